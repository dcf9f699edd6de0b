//! Pure builders of an execution's children: the snapshot ConfigMap, the Job and, when egress is denied by default, the NetworkPolicy of its pod.
//!
//! They take the execution, its snapshot and the controller's settings and return complete
//! objects; the reconcile shell only creates them. They build on what every kind's children
//! share ([`crate::controller::build`]). Nothing here talks to the API server.

mod config_map;
mod job;
mod network_policy;
mod pod;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::controller::build::ExecutionOwner;
use crate::controller::names;

pub use config_map::snapshot_config_map;
pub use job::job;
pub use network_policy::network_policy;
pub use pod::{
    ERRAND_BIN_DIR, EXTENSION_DIR, EXTENSION_GRANTS_DIR, EXTENSION_GRANTS_PATH, GRANT_TOKEN_DIR,
    GRANT_TOKEN_PATH, GRANTS_DIR, GRANTS_PATH, HANDOFF_DIR, HANDOFF_PATH, SCRATCH_DIR,
};

/// Metadata of a child of `execution` named `name` with the common labels.
fn child_meta(execution: &ExecutionOwner, name: String, agent: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(execution.namespace.clone()),
        labels: Some(names::child_labels(&execution.name, &execution.uid, agent)),
        owner_references: Some(vec![execution.owner.clone()]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests;
