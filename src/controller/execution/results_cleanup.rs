//! Deleting an execution's results from the store when the execution is deleted.
//!
//! The results finalizer sits on the execution's snapshot ConfigMap from the moment it is
//! created, so it costs no API write of its own. Deleting the execution garbage-collects the
//! ConfigMap; its finalizer holds it until the results are gone. With foreground deletion
//! (`errand delete`) the execution itself waits for that too, because the ConfigMap blocks
//! its owner's deletion. A snapshot ConfigMap deleted on its own while its execution lives
//! is released without touching the results; in a namespace being deleted the execution goes
//! too (the namespace controller deletes ConfigMaps before custom resources), so its results
//! go with it rather than stay in the store with nothing left to delete them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use super::context::Context;
use crate::api::{AgentExecution, contract};
use crate::controller::config::RESULTS_FINALIZER;
use crate::controller::error::{Error, Result};
use crate::store::keys::{self, ExecutionId};

/// How often to look again while the execution's pod is still stopping.
const POD_STOPPING_RECHECK: Duration = Duration::from_secs(2);

/// What to do about one snapshot ConfigMap.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Not being deleted, or not holding the finalizer: nothing.
    Nothing,
    /// The execution's pod may still upload results: look again later.
    WaitForPod,
    /// The execution is gone or going: delete its results, then release the ConfigMap.
    DeleteResults(ExecutionId),
    /// The ConfigMap was deleted while its execution lives: release it, keep the results.
    KeepResults,
}

/// Decides what `config_map` needs, given its execution as the API server has it now,
/// whether their namespace is being deleted and whether any pod of that execution is still
/// running.
pub fn step(
    config_map: &PartialObjectMeta<ConfigMap>,
    execution: Option<&AgentExecution>,
    namespace_deleting: bool,
    pod_running: bool,
) -> Step {
    if config_map.metadata.deletion_timestamp.is_none()
        || !config_map
            .finalizers()
            .iter()
            .any(|f| f == RESULTS_FINALIZER)
    {
        return Step::Nothing;
    }
    let Some(id) = execution_of(config_map) else {
        // Not one of ours after all (labels edited): nothing to find in the store.
        return Step::KeepResults;
    };
    let same = execution.filter(|e| e.metadata.uid.as_deref() == Some(id.uid.as_str()));
    match same {
        Some(e) if e.metadata.deletion_timestamp.is_none() && !namespace_deleting => {
            Step::KeepResults
        }
        _ if pod_running => Step::WaitForPod,
        _ => Step::DeleteResults(id),
    }
}

/// The execution a snapshot ConfigMap belongs to, from its labels and annotation.
fn execution_of(config_map: &PartialObjectMeta<ConfigMap>) -> Option<ExecutionId> {
    Some(ExecutionId {
        namespace: config_map.namespace()?,
        name: config_map
            .annotations()
            .get(contract::EXECUTION_NAME_ANNOTATION)?
            .clone(),
        uid: config_map
            .labels()
            .get(contract::EXECUTION_UID_LABEL)?
            .clone(),
    })
}

/// How long one cleanup may take: deleting a large execution's results is many store calls.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(300);

/// Reconciles one snapshot ConfigMap: deletes its execution's results when both are going.
/// A cleanup that hangs fails and is retried.
pub async fn reconcile(
    config_map: Arc<PartialObjectMeta<ConfigMap>>,
    ctx: Arc<Context>,
) -> Result<Action> {
    tokio::time::timeout(CLEANUP_TIMEOUT, clean_up(config_map, ctx))
        .await
        .unwrap_or(Err(Error::TimedOut(CLEANUP_TIMEOUT)))
}

async fn clean_up(
    config_map: Arc<PartialObjectMeta<ConfigMap>>,
    ctx: Arc<Context>,
) -> Result<Action> {
    if config_map.metadata.deletion_timestamp.is_none() {
        return Ok(Action::await_change());
    }
    let namespace = config_map.namespace().unwrap_or_default();
    let execution = match execution_of(&config_map) {
        Some(id) => Api::<AgentExecution>::namespaced(ctx.client.clone(), &namespace)
            .get_opt(&id.name)
            .await
            .map_err(Error::kube(format!("reading execution {}", id.name)))?,
        None => None,
    };
    let uid = config_map.labels().get(contract::EXECUTION_UID_LABEL);
    // Right after a restart the Pod cache may still be filling: an empty one must not read as
    // a pod that stopped uploading, or its later uploads would outlive the deletion.
    ctx.caches_filled().await?;
    let pod_running = uid.is_some_and(|uid| pod_running(&ctx, &namespace, uid));
    let namespace_deleting = ctx.namespace_deleting(&namespace);
    match step(
        &config_map,
        execution.as_ref(),
        namespace_deleting,
        pod_running,
    ) {
        Step::Nothing => return Ok(Action::await_change()),
        Step::WaitForPod => return Ok(Action::requeue(POD_STOPPING_RECHECK)),
        Step::KeepResults => warn!(
            config_map = %config_map.name_any(),
            namespace,
            "snapshot ConfigMap deleted while its execution exists; its results are kept"
        ),
        Step::DeleteResults(id) => {
            let deleted = ctx
                .results
                .delete_prefix(&keys::results_prefix(&id)?)
                .await?;
            info!(execution = %id.name, namespace, deleted, "deleted results");
            ctx.forget(&id.uid);
        }
    }
    release(&config_map, &ctx).await?;
    ctx.reset_backoff(&config_map.uid().unwrap_or_default());
    Ok(Action::await_change())
}

/// Whether a pod of execution `uid` has not finished (it may still upload results).
fn pod_running(ctx: &Context, namespace: &str, uid: &str) -> bool {
    ctx.pods.get(namespace, uid).iter().any(|pod| {
        !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    })
}

/// Removes the finalizer; the JSON patch tests its position first, so a concurrent change to
/// the list fails and is retried.
async fn release(config_map: &PartialObjectMeta<ConfigMap>, ctx: &Context) -> Result<()> {
    let name = config_map.name_any();
    let Some(index) = config_map
        .finalizers()
        .iter()
        .position(|f| f == RESULTS_FINALIZER)
    else {
        return Ok(());
    };
    let path = format!("/metadata/finalizers/{index}");
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": path, "value": RESULTS_FINALIZER},
        {"op": "remove", "path": path},
    ]))
    .expect("a well-formed JSON patch");
    let api = Api::<ConfigMap>::namespaced(
        ctx.client.clone(),
        &config_map.namespace().unwrap_or_default(),
    );
    match api
        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(e) => Err(Error::kube(format!(
            "removing the finalizer of ConfigMap {name}"
        ))(e)),
    }
}

/// Logs and counts a failed cleanup and retries it with exponential backoff.
pub fn error_policy(
    config_map: Arc<PartialObjectMeta<ConfigMap>>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    ctx.retry_failed("results cleanup", config_map.as_ref(), error)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::testing::{NS, UID};

    fn config_map(deleting: bool, finalizer: bool) -> PartialObjectMeta<ConfigMap> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some("errand-calc-snapshot".into()),
                namespace: Some(NS.into()),
                labels: Some(BTreeMap::from([(
                    contract::EXECUTION_UID_LABEL.to_owned(),
                    UID.to_owned(),
                )])),
                annotations: Some(BTreeMap::from([(
                    contract::EXECUTION_NAME_ANNOTATION.to_owned(),
                    "calc".to_owned(),
                )])),
                finalizers: finalizer.then(|| vec![RESULTS_FINALIZER.to_owned()]),
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                ..ObjectMeta::default()
            },
            _phantom: Default::default(),
        }
    }

    fn execution(uid: &str, deleting: bool) -> AgentExecution {
        let mut execution = AgentExecution::test();
        execution.metadata.uid = Some(uid.into());
        execution.metadata.deletion_timestamp = deleting.then_some(Time(Timestamp::UNIX_EPOCH));
        execution
    }

    #[test]
    fn a_live_or_released_config_map_needs_nothing() {
        assert_eq!(
            step(&config_map(false, true), None, false, false),
            Step::Nothing
        );
        assert_eq!(
            step(&config_map(true, false), None, false, false),
            Step::Nothing
        );
    }

    #[test]
    fn results_go_once_the_execution_is_gone_or_going_and_its_pod_stopped() {
        let deleting = config_map(true, true);
        assert_eq!(
            step(&deleting, None, false, false),
            Step::DeleteResults(ExecutionId::test())
        );
        let going = execution(UID, true);
        assert_eq!(
            step(&deleting, Some(&going), false, false),
            Step::DeleteResults(ExecutionId::test())
        );
        let successor = execution("another-uid", false);
        assert_eq!(
            step(&deleting, Some(&successor), false, false),
            Step::DeleteResults(ExecutionId::test()),
            "a new execution of the same name does not keep the old one's results"
        );
        assert_eq!(step(&deleting, None, false, true), Step::WaitForPod);
    }

    #[test]
    fn a_config_map_deleted_under_a_live_execution_keeps_the_results() {
        let live = execution(UID, false);
        assert_eq!(
            step(&config_map(true, true), Some(&live), false, false),
            Step::KeepResults
        );
    }

    #[test]
    fn in_a_namespace_being_deleted_the_results_go_with_the_live_execution() {
        let live = execution(UID, false);
        let deleting = config_map(true, true);
        assert_eq!(
            step(&deleting, Some(&live), true, false),
            Step::DeleteResults(ExecutionId::test())
        );
        assert_eq!(
            step(&deleting, Some(&live), true, true),
            Step::WaitForPod,
            "not while its pod may still upload"
        );
    }
}
