//! Pure builders of an execution's children: the snapshot ConfigMap and the Job.
//!
//! They take the execution, its snapshot and the controller's settings and return complete
//! objects; the reconcile shell only creates them. Nothing here talks to the API server.

mod config_map;
mod job;
mod pod;
pub mod resources;
pub mod security;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::api::AgentExecution;

pub use config_map::{AGENT_CONFIG_KEY, SNAPSHOT_KEY, snapshot_config_map, snapshot_holder};
pub use job::job;
pub use pod::{
    AGENT_CONFIG_FILE, ERRAND_BIN_DIR, EXTENSION_DIR, EXTENSION_GRANTS_DIR, EXTENSION_GRANTS_PATH,
    GRANT_TOKEN_DIR, GRANT_TOKEN_PATH, GRANTS_DIR, GRANTS_PATH, HANDOFF_DIR, HANDOFF_PATH,
    SCRATCH_DIR, SNAPSHOT_DIR, SNAPSHOT_PATH, WORKSPACE_DIR, agent_env, agent_pod, empty_dir,
    mount, snapshot_volume,
};

use super::names;

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

    /// Metadata of a child named `name` with the common labels.
    fn child_meta(&self, name: String, agent: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(names::child_labels(&self.name, &self.uid, agent)),
            owner_references: Some(vec![self.owner.clone()]),
            ..ObjectMeta::default()
        }
    }
}

#[cfg(test)]
mod tests;
