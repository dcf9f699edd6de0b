//! Build: the execution's children, its grants signed for the run's whole budget, as objects ready to create.
//!
//! No client: the signer is the only call out (a backend's signer may fetch its credentials).

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use crate::controller::build::{self, ExecutionOwner};
use crate::controller::config::ControllerConfig;
use crate::resolve::{RunBudget, Snapshot};
use crate::store::grants::{GrantError, UrlSigner, issue_grants};
use crate::store::keys::ExecutionId;

/// What an admitted execution creates.
pub(super) struct Children {
    /// The snapshot ConfigMap.
    pub config_map: ConfigMap,
    /// The Secret with the signed store URLs.
    pub secret: Secret,
    /// The Job.
    pub job: Job,
}

/// The children of the execution `owner` stands for, run as `snapshot`, with grants signed at
/// `now` by `signer`, valid as long as the run's budget.
pub(super) async fn children(
    owner: &ExecutionOwner,
    snapshot: &Snapshot,
    config: &ControllerConfig,
    signer: &dyn UrlSigner,
    now: Timestamp,
) -> Result<Children, GrantError> {
    let expires = RunBudget::of(snapshot, config.allowance()).urls_expire_at(now);
    let execution_id = ExecutionId {
        namespace: owner.namespace.clone(),
        name: owner.name.clone(),
        uid: owner.uid.clone(),
    };
    let grants = issue_grants(signer, &execution_id, snapshot, expires).await?;
    Ok(Children {
        config_map: build::snapshot_config_map(owner, snapshot),
        secret: build::grants_secret(owner, &snapshot.agent.name, &grants),
        job: build::job(owner, snapshot, config),
    })
}
