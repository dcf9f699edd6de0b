//! Build: the execution's children as objects ready to create.
//!
//! No grants here: the pod asks the controller for them when it starts
//! ([`crate::serve::grants`]), so how long it waits in a queue never shortens them.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::NetworkPolicy;

use crate::controller::build::ExecutionOwner;
use crate::controller::config::ControllerConfig;
use crate::controller::execution::build;
use crate::resolve::Snapshot;

/// What an admitted execution creates.
pub(super) struct Children {
    /// The snapshot ConfigMap.
    pub config_map: ConfigMap,
    /// The Job.
    pub job: Job,
    /// The pod's egress NetworkPolicy, created before the Job (`None`: egress is open).
    pub network_policy: Option<NetworkPolicy>,
}

/// The children of the execution `owner` stands for, run as `snapshot`.
pub(super) fn children(
    owner: &ExecutionOwner,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> Children {
    Children {
        config_map: build::snapshot_config_map(owner, snapshot, config),
        job: build::job(owner, snapshot, config),
        network_policy: build::network_policy(owner, snapshot, config),
    }
}
