//! Pure builders every kind's children are made of: the owner they belong to, the snapshot ConfigMap's content, and what every agent pod shares (resources, security, environment, volumes, egress rules).
//!
//! Each kind builds its own children from these ([`crate::controller::execution::build`],
//! [`crate::controller::deployment::build`]). Nothing here talks to the API server.

mod config_map;
pub mod egress;
pub mod model_credentials;
pub mod pod;
pub mod resources;
pub mod security;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use crate::api::AgentExecution;

pub use config_map::{AGENT_CONFIG_KEY, SNAPSHOT_KEY, snapshot_holder};
pub use pod::{
    AGENT_CONFIG_FILE, SNAPSHOT_DIR, SNAPSHOT_MODE, SNAPSHOT_PATH, WORKSPACE_DIR, agent_env,
    agent_pod, empty_dir, mount, snapshot_volume,
};

/// Why an execution's children cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The object lacks metadata the API server always sets (name, namespace, uid).
    #[error("the object has no metadata.{0}")]
    MissingMetadata(&'static str),
}

impl BuildError {
    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            BuildError::MissingMetadata(_) => "missing_metadata",
        }
    }
}

/// The execution as the owner of its children: the name, namespace and uid they are named
/// and labelled after, and the owner reference they carry. (Its store-key counterpart is
/// [`crate::store::keys::ExecutionId`].)
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionOwner {
    /// The execution's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its uid.
    pub uid: String,
    /// The controller owner reference its children carry.
    pub owner: OwnerReference,
}

impl ExecutionOwner {
    /// `execution` as an owner; it must have a name, namespace and uid.
    pub fn of(execution: &AgentExecution) -> Result<Self, BuildError> {
        Self::of_object(execution)
    }

    /// Any errand object as the owner of its children (an AgentDeployment owns its Deployment,
    /// Service and snapshots the same way); it must have a name, namespace and uid.
    pub fn of_object<K: Resource<DynamicType = ()>>(execution: &K) -> Result<Self, BuildError> {
        let meta = execution.meta();
        let name = meta
            .name
            .clone()
            .ok_or(BuildError::MissingMetadata("name"))?;
        let namespace = meta
            .namespace
            .clone()
            .ok_or(BuildError::MissingMetadata("namespace"))?;
        let uid = meta.uid.clone().ok_or(BuildError::MissingMetadata("uid"))?;
        // Foreground deletion of an execution waits for its children, as it does for a Job's pods.
        let owner = OwnerReference {
            block_owner_deletion: Some(true),
            ..execution
                .controller_owner_ref(&())
                .ok_or(BuildError::MissingMetadata("uid"))?
        };
        Ok(Self {
            name,
            namespace,
            uid,
            owner,
        })
    }
}
