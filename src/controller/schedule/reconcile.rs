//! One reconcile of an AgentSchedule: read its executions from the cache, ask the pure plan what is due, then cancel, create, delete and write the status it says.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use tracing::{debug, info, warn};

use crate::api::contract::SCHEDULED_TIME_ANNOTATION;
use crate::api::{AgentExecution, AgentSchedule, Phase};
use crate::controller::build::ExecutionOwner;
use crate::controller::error::{Error, Result};
use crate::controller::metrics::Metrics;
use crate::controller::status_write::{Written, write_status};
use crate::resolve::schedule::status::{self, Observed as StatusObserved};
use crate::resolve::schedule::{self, Due, Observed, Run, RunState};

/// How long one reconcile may take before it is retried.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a failed reconcile waits before it is retried.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// How soon a reconcile that read a schedule older than the API server's looks again.
const STALE_READ_RETRY: Duration = Duration::from_secs(1);
/// How far past a due time the reconcile is woken, so the time has passed when it looks.
const WAKE_MARGIN: Duration = Duration::from_millis(200);

/// What every schedule reconcile shares.
pub struct ScheduleContext {
    /// The API client.
    pub client: Client,
    /// The executions schedules created (labelled `errand.dev/schedule`).
    pub runs: Store<AgentExecution>,
    /// Counts created, missed and held runs.
    pub metrics: Arc<Metrics>,
}

/// Reconciles one schedule, failing (and so retrying) if it hangs.
pub async fn reconcile(schedule: Arc<AgentSchedule>, ctx: Arc<ScheduleContext>) -> Result<Action> {
    crate::controller::within_limit(RECONCILE_TIMEOUT, reconcile_once(&schedule, &ctx)).await
}

/// Logs a failed reconcile and retries it.
pub fn error_policy(
    schedule: Arc<AgentSchedule>,
    error: &Error,
    _ctx: Arc<ScheduleContext>,
) -> Action {
    crate::controller::retry_after_failure(&*schedule, error, RETRY_AFTER)
}

async fn reconcile_once(schedule: &AgentSchedule, ctx: &ScheduleContext) -> Result<Action> {
    if schedule.metadata.deletion_timestamp.is_some() {
        // Its executions carry owner references: the garbage collector deletes them.
        return Ok(Action::await_change());
    }
    let owner = ExecutionOwner::of_object(schedule)?;
    let executions: Api<AgentExecution> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let schedules: Api<AgentSchedule> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let previous = schedule.status.clone().unwrap_or_default();
    let generation = schedule.metadata.generation;
    let now = Timestamp::now();
    let timing = match schedule::check(&schedule.spec, now) {
        Ok(timing) => timing,
        Err(invalid) => {
            let message = invalid.describe("AgentSchedule");
            info!(schedule = %owner.name, namespace = %owner.namespace, "invalid: {message}");
            let status = status::invalid(&previous, generation, &message, now);
            return Ok(
                match write_status(&schedules, schedule, schedule.status.as_ref(), &status).await? {
                    Written::Done => Action::await_change(),
                    Written::Stale => Action::requeue(STALE_READ_RETRY),
                },
            );
        }
    };
    let owned = owned_executions(&ctx.runs, &owner);
    let mut runs: Vec<Run> = owned.iter().map(|e| as_run(e)).collect();
    let created = schedule
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let plan = schedule::plan(
        &Observed {
            name: &owner.name,
            spec: &schedule.spec,
            created,
            last_schedule: previous.last_schedule_time.as_ref().map(|t| t.0),
            runs: &runs,
            now,
        },
        &timing,
    );
    for name in &plan.cancel {
        info!(schedule = %owner.name, execution = %name, "concurrencyPolicy Replace: cancelling");
        let cancel = serde_json::json!({"spec": {"cancel": true}});
        executions
            .patch(name, &PatchParams::default(), &Patch::Merge(&cancel))
            .await
            .map_err(Error::kube(format!("cancelling execution {name}")))?;
    }
    let mut refused = None;
    match plan.due {
        Due::Start(at) => {
            ctx.metrics.schedule_runs_missed(plan.missed);
            let mut execution =
                schedule::execution_for(schedule, schedule::execution_name(&owner.name, at), at);
            execution.metadata.owner_references = Some(vec![owner.owner.clone()]);
            let name = execution.name_any();
            match executions.create(&PostParams::default(), &execution).await {
                Ok(_) => {
                    info!(schedule = %owner.name, execution = %name, scheduled = %at, "created");
                    ctx.metrics.schedule_run_created();
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    debug!(execution = %name, "already created");
                }
                Err(kube::Error::Api(status)) if [400, 403, 422].contains(&status.code) => {
                    // Refused (admission, quota): the time counts as missed, the next one is tried.
                    warn!(schedule = %owner.name, execution = %name, "refused: {}", status.message);
                    ctx.metrics.schedule_runs_missed(1);
                    refused = Some(format!(
                        "the run due at {at} was refused: {}",
                        status.message
                    ));
                }
                Err(e) => return Err(Error::kube(format!("creating execution {name}"))(e)),
            }
            if refused.is_none() {
                runs.push(Run {
                    name,
                    scheduled: at,
                    state: RunState::Active,
                });
            }
        }
        Due::Missed(at) => {
            info!(schedule = %owner.name, scheduled = %at, "missed: past startingDeadlineSeconds");
            ctx.metrics.schedule_runs_missed(plan.missed + 1);
        }
        Due::Held(at) => {
            if previous
                .message
                .as_deref()
                .is_none_or(|m| !m.contains(&at.to_string()))
            {
                info!(schedule = %owner.name, scheduled = %at, "held: concurrencyPolicy Forbid");
                ctx.metrics.schedule_run_held();
            }
        }
        Due::Started(_) | Due::Nothing => {}
    }
    for name in &plan.delete {
        info!(schedule = %owner.name, execution = %name, "past the history limit: deleting");
        match executions.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(Error::kube(format!("deleting execution {name}"))(e)),
        }
    }
    runs.retain(|r| !plan.delete.contains(&r.name));
    let last_success = owned
        .iter()
        .filter(|e| !plan.delete.contains(&e.name_any()))
        .filter(|e| e.status.as_ref().and_then(|s| s.phase) == Some(Phase::Succeeded))
        .filter_map(|e| e.status.as_ref()?.completion_time.as_ref().map(|t| t.0))
        .max();
    let mut next = status::render(
        &previous,
        &plan,
        &StatusObserved {
            generation,
            suspended: schedule.spec.suspend,
            runs: &runs,
            last_success,
            now,
        },
    );
    if let Some(refused) = refused {
        next.message = Some(refused);
    }
    if write_status(&schedules, schedule, schedule.status.as_ref(), &next).await? == Written::Stale
    {
        return Ok(Action::requeue(STALE_READ_RETRY));
    }
    Ok(match plan.wake_at {
        Some(at) => {
            let wait = Duration::try_from(at.duration_since(Timestamp::now())).unwrap_or_default();
            Action::requeue(wait + WAKE_MARGIN)
        }
        None => Action::await_change(),
    })
}

/// The executions in the cache this schedule owns.
fn owned_executions(
    runs: &Store<AgentExecution>,
    owner: &ExecutionOwner,
) -> Vec<Arc<AgentExecution>> {
    runs.state()
        .into_iter()
        .filter(|e| e.namespace().as_deref() == Some(owner.namespace.as_str()))
        .filter(|e| e.owner_references().iter().any(|o| o.uid == owner.uid))
        .collect()
}

/// One execution as the plan sees it: its scheduled time from its annotation (its creation
/// when that is unreadable) and whether it ended.
fn as_run(execution: &AgentExecution) -> Run {
    let scheduled = execution
        .annotations()
        .get(SCHEDULED_TIME_ANNOTATION)
        .and_then(|t| t.parse::<Timestamp>().ok())
        .or_else(|| execution.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let state = match execution.status.as_ref().and_then(|s| s.phase) {
        Some(Phase::Succeeded) => RunState::Succeeded,
        Some(Phase::Failed | Phase::Cancelled) => RunState::Failed,
        _ => RunState::Active,
    };
    Run {
        name: execution.name_any(),
        scheduled,
        state,
    }
}
