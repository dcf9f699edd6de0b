//! The reconcile pipeline of one execution: fetch → resolve → build → apply (create-only) → status.
//!
//! Writes are few by construction: three creates (the snapshot ConfigMap carries the results
//! finalizer from birth), one status write per phase, one Warning event per failure, and
//! nothing at all for terminal executions.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use super::build::{self, ExecutionOwner};
use super::config::FIELD_MANAGER;
use super::context::Context;
use super::error::{Error, Result};
use super::events::outcome_event;
use super::names;
use super::status::{self, JobObservation, Observed, Stop};
use crate::api::{AgentExecution, AgentExecutionStatus, Phase, SnapshotRef, contract};
use crate::cluster::catalog::resolve;
use crate::resolve::{InvalidSpec, Problem, Snapshot};
use crate::store::grants::{GrantError, issue_grants};
use crate::store::keys::ExecutionId;

/// How long one reconcile may take. Every step is a few API calls; one that hangs (a lost
/// response) would otherwise hold the execution, and every later event for it, until the
/// client's read timeout of nearly five minutes.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);

/// Reconciles one execution, failing (and so retrying with backoff) if it hangs.
pub async fn reconcile(execution: Arc<AgentExecution>, ctx: Arc<Context>) -> Result<Action> {
    tokio::time::timeout(RECONCILE_TIMEOUT, reconcile_once(execution, ctx))
        .await
        .unwrap_or(Err(Error::TimedOut(RECONCILE_TIMEOUT)))
}

async fn reconcile_once(execution: Arc<AgentExecution>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile_started();
    let identity = ExecutionOwner::of(&execution)?;
    let api = Api::<AgentExecution>::namespaced(ctx.client.clone(), &identity.namespace);
    debug!(execution = %identity.name, namespace = %identity.namespace, "reconciling");
    if execution.metadata.deletion_timestamp.is_some() {
        // Owner references remove the children; the snapshot ConfigMap's finalizer removes
        // the results (`results_cleanup`).
        ctx.forget(&identity.uid);
        return Ok(Action::await_change());
    }
    let execution = ctx.latest(execution);
    let status = execution.status.clone().unwrap_or_default();
    let action = if status.phase.is_some_and(Phase::is_terminal) {
        Action::await_change()
    } else if status.snapshot.is_none() {
        admit(&execution, &identity, &api, &ctx).await?
    } else {
        progress(&execution, &identity, &api, &ctx).await?
    };
    ctx.reset_backoff(&identity.uid);
    Ok(action)
}

/// Logs and counts a failed reconcile and retries it with exponential backoff.
pub fn error_policy(execution: Arc<AgentExecution>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retry_failed("reconcile", execution.as_ref(), error)
}

/// First reconcile: resolve and snapshot the spec, create the children, record Starting.
async fn admit(
    execution: &AgentExecution,
    identity: &ExecutionOwner,
    api: &Api<AgentExecution>,
    ctx: &Context,
) -> Result<Action> {
    let namespace = identity.namespace.as_str();
    let mut snapshot = match resolve(&ctx.client, &ctx.catalog, namespace, &execution.spec).await? {
        Ok(snapshot) => snapshot,
        Err(invalid) => return refuse(execution, identity, &invalid, api, ctx).await,
    };
    ctx.config.apply_default_queue(&mut snapshot);
    // Grants are signed before anything is created, so a run longer than the store's signed
    // URLs can last is refused with nothing left behind.
    let (config_map, job) = match create_children(identity, &snapshot, ctx).await {
        Err(Error::Grants(GrantError::Lifetime { needed, max })) => {
            let problem = Problem::new(
                "spec.timeoutSeconds",
                format!(
                    "{}: with the start timeout and the staging and upload budget the run needs \
                     signed store URLs valid for {needed}s, and this store's last at most {max}s",
                    snapshot.timeout_seconds
                ),
            );
            let invalid = InvalidSpec {
                problems: vec![problem],
            };
            return refuse(execution, identity, &invalid, api, ctx).await;
        }
        created => created?,
    };
    debug!(execution = %identity.name, namespace, "children created");
    let digest = config_map
        .annotations()
        .get(contract::SNAPSHOT_DIGEST_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| snapshot.digest());
    if let Some(created) = &execution.metadata.creation_timestamp {
        let after = Timestamp::now().duration_since(created.0);
        ctx.metrics.job_created(after.as_secs_f64());
    }
    let queued = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
    let status = status::starting(
        execution,
        &snapshot.agent.name,
        SnapshotRef {
            config_map: config_map.name_any(),
            digest,
        },
        &job.name_any(),
        queued,
        Timestamp::now(),
    );
    write_status(execution, status, api, ctx).await?;
    // No event may come while a pod waits, so look again when its start timeout passes.
    let start_timeout = u64::try_from(snapshot.start_timeout_seconds).unwrap_or(0);
    Ok(Action::requeue(Duration::from_secs(start_timeout + 1)))
}

/// Records an execution that cannot run as `Failed` with reason `InvalidSpec`; it waits for a
/// change (its spec is immutable, so in practice for its deletion).
async fn refuse(
    execution: &AgentExecution,
    identity: &ExecutionOwner,
    invalid: &InvalidSpec,
    api: &Api<AgentExecution>,
    ctx: &Context,
) -> Result<Action> {
    info!(execution = %identity.name, namespace = %identity.namespace, "invalid spec: {invalid}");
    let status = status::invalid(execution, invalid, Timestamp::now());
    write_status(execution, status, api, ctx).await?;
    Ok(Action::await_change())
}

/// Creates the snapshot ConfigMap, the grants Secret and the Job, concurrently and create-only.
/// Returns the ConfigMap and the Job as they are in the cluster, which after a restart may be
/// the ones an earlier reconcile created.
async fn create_children(
    identity: &ExecutionOwner,
    snapshot: &Snapshot,
    ctx: &Context,
) -> Result<(ConfigMap, Job)> {
    let namespace = identity.namespace.as_str();
    let valid_for = snapshot.start_timeout_seconds
        + snapshot.timeout_seconds
        + ctx.config.staging_budget_seconds
        + ctx.config.termination_grace_seconds;
    let expires = Timestamp::now()
        .checked_add(SignedDuration::from_secs(valid_for))
        .unwrap_or(Timestamp::MAX);
    let execution_id = ExecutionId {
        namespace: namespace.to_owned(),
        name: identity.name.clone(),
        uid: identity.uid.clone(),
    };
    let grants = issue_grants(ctx.signer.as_ref(), &execution_id, snapshot, expires).await?;
    let config_map = build::snapshot_config_map(identity, snapshot);
    let secret = build::grants_secret(identity, &snapshot.agent.name, &grants);
    let job = build::job(identity, snapshot, &ctx.config);
    let (config_map, _, job) = futures::try_join!(
        create_owned(&ctx.client, namespace, &identity.uid, config_map),
        create_owned(&ctx.client, namespace, &identity.uid, secret),
        create_owned(&ctx.client, namespace, &identity.uid, job),
    )?;
    Ok((config_map, job))
}

/// Creates `object`; if it already exists and this execution owns it, that is success (a
/// restarted controller never makes a second one).
async fn create_owned<K>(client: &kube::Client, namespace: &str, uid: &str, object: K) -> Result<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api = Api::<K>::namespaced(client.clone(), namespace);
    let name = object.name_any();
    let kind = K::kind(&());
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            let existing = api
                .get(&name)
                .await
                .map_err(Error::kube(format!("reading the existing {kind} {name}")))?;
            let ours = existing
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true));
            if ours {
                Ok(existing)
            } else {
                Err(Error::ForeignChild {
                    kind: match kind.as_ref() {
                        "Job" => "Job",
                        "ConfigMap" => "ConfigMap",
                        _ => "Secret",
                    },
                    name,
                })
            }
        }
        Err(e) => Err(Error::kube(format!("creating {kind} {name}"))(e)),
    }
}

/// Later reconciles: compute the status from the Job and its pod, stop what must stop, write
/// the status if it changed.
async fn progress(
    execution: &AgentExecution,
    identity: &ExecutionOwner,
    api: &Api<AgentExecution>,
    ctx: &Context,
) -> Result<Action> {
    let namespace = identity.namespace.as_str();
    // Right after a restart the caches may still be filling; a missing pod must not read as
    // a pod that has not started yet.
    ctx.jobs
        .wait_until_ready()
        .await
        .map_err(|_| Error::CacheStopped("Job"))?;
    ctx.pods
        .wait_until_ready()
        .await
        .map_err(|_| Error::CacheStopped("Pod"))?;
    let job_name = execution
        .status
        .as_ref()
        .and_then(|s| s.job_name.clone())
        .unwrap_or_else(|| names::job_name(&identity.name));
    let owned = |job: &Job| job.owner_references().iter().any(|o| o.uid == identity.uid);
    let cached = ctx
        .jobs
        .get(&ObjectRef::new(&job_name).within(namespace))
        .filter(|job| owned(job));
    let job = match cached {
        Some(job) => Some(job),
        // The cache may not have caught up with a Job created moments ago: ask before
        // concluding it is gone.
        None => Api::<Job>::namespaced(ctx.client.clone(), namespace)
            .get_opt(&job_name)
            .await
            .map_err(Error::kube(format!("reading Job {job_name}")))?
            .filter(|job| owned(job))
            .map(Arc::new),
    };
    let pods = ctx.pods.state_filter(|pod| {
        pod.namespace().as_deref() == Some(namespace)
            && pod.labels().get(contract::EXECUTION_UID_LABEL) == Some(&identity.uid)
    });
    let pod_refs: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
    let observation = match &job {
        Some(job) => JobObservation::Present(job),
        None => JobObservation::Gone,
    };
    let mut observed = Observed {
        execution,
        job: observation,
        pods: &pod_refs,
        pod_warnings: &[],
        now: Timestamp::now(),
    };
    let mut assessment = status::assess(observed);
    let warnings;
    if status::needs_pod_warnings(&observed, &assessment) {
        warnings = pod_warnings(&pod_refs, namespace, ctx).await?;
        observed.pod_warnings = &warnings;
        assessment = status::assess(observed);
    }
    if let Some(stop) = &assessment.stop {
        carry_out(stop, namespace, &job_name, ctx).await?;
    }
    let terminal = assessment.status.phase.is_some_and(Phase::is_terminal);
    debug!(
        execution = %identity.name,
        namespace,
        was = ?execution.status.as_ref().and_then(|s| s.phase),
        now = ?assessment.status.phase,
        job = job.is_some(),
        pods = ?pod_refs.iter().map(|p| p.status.as_ref().and_then(|s| s.phase.clone())).collect::<Vec<_>>(),
        "assessed"
    );
    write_status(execution, assessment.status, api, ctx).await?;
    Ok(match assessment.recheck_after {
        Some(after) if !terminal => Action::requeue(after + Duration::from_secs(1)),
        _ => Action::await_change(),
    })
}

/// The Warning events about `pods`, oldest first: read only when a start timed out.
async fn pod_warnings(
    pods: &[&Pod],
    namespace: &str,
    ctx: &Context,
) -> Result<Vec<status::PodWarning>> {
    let api = Api::<k8s_openapi::api::core::v1::Event>::namespaced(ctx.client.clone(), namespace);
    let mut warnings = Vec::new();
    for uid in pods.iter().filter_map(|p| p.metadata.uid.as_deref()) {
        let params =
            ListParams::default().fields(&format!("involvedObject.uid={uid},type=Warning"));
        let mut events = api
            .list(&params)
            .await
            .map_err(Error::kube(format!("reading the events of pod {uid}")))?
            .items;
        events.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
        warnings.extend(events.iter().filter_map(status::PodWarning::from_event));
    }
    Ok(warnings)
}

/// Deletes the pod (gracefully, so the runner saves partial results) or the whole Job.
async fn carry_out(stop: &Stop, namespace: &str, job_name: &str, ctx: &Context) -> Result<()> {
    let result = match stop {
        Stop::DeletePod(pod) => {
            let params = DeleteParams {
                grace_period_seconds: u32::try_from(ctx.config.termination_grace_seconds).ok(),
                ..DeleteParams::default()
            };
            Api::<Pod>::namespaced(ctx.client.clone(), namespace)
                .delete(pod, &params)
                .await
                .map(|_| ())
                .map_err(|e| (format!("deleting pod {pod}"), e))
        }
        Stop::DeleteJob => Api::<Job>::namespaced(ctx.client.clone(), namespace)
            .delete(job_name, &DeleteParams::background())
            .await
            .map(|_| ())
            .map_err(|e| (format!("deleting Job {job_name}"), e)),
    };
    match result {
        Ok(()) => Ok(()),
        Err((_, kube::Error::Api(status))) if status.is_not_found() => Ok(()),
        Err((action, e)) => Err(Error::kube(action)(e)),
    }
}

/// Writes `status` with server-side apply unless it equals the current one, then records
/// completion metrics and publishes the failure event.
async fn write_status(
    execution: &AgentExecution,
    status: AgentExecutionStatus,
    api: &Api<AgentExecution>,
    ctx: &Context,
) -> Result<()> {
    if execution.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let name = execution.name_any();
    let patch = serde_json::json!({
        "apiVersion": crate::api::GROUP.to_owned() + "/" + crate::api::VERSION,
        "kind": "AgentExecution",
        "status": status,
    });
    debug!(execution = %name, phase = ?status.phase, "writing status");
    let updated = api
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::kube(format!("writing the status of {name}")))?;
    debug!(execution = %name, "status written");
    ctx.remember(updated);
    let was_terminal = execution
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(Phase::is_terminal);
    if let (false, Some(created), Some(done)) = (
        was_terminal,
        &execution.metadata.creation_timestamp,
        &status.completion_time,
    ) {
        ctx.metrics
            .completed(done.0.duration_since(created.0).as_secs_f64());
    }
    if let Some(event) = outcome_event(execution.status.as_ref(), &status) {
        let reference = execution.object_ref(&());
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            warn!(execution = %name, "publishing event {}: {e}", event.reason);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
