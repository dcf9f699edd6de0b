//! The reconcile pipeline of one execution, by stage: dereference → validate → build → apply → update_status.
//!
//! Each stage has its file: [`dereference`] reads what the execution names and what became of
//! its Job; [`validate`] completes the snapshot with this cluster's defaults and checks it
//! against its limits; [`build`] signs the grants and builds the children; [`apply`] creates
//! them (create-only) or stops what must stop; [`update_status`] writes the status; once it
//! is finished, [`notify`] delivers its end to its webhook and [`expire`] deletes it when its
//! lifetime runs out. Validate and build take no client.
//!
//! Writes are few by construction: two creates (the snapshot ConfigMap carries the results
//! finalizer from birth), one status write per phase shown (a run that ends within
//! [`status::RUNNING_SHOWN_AFTER`] of its agent's start goes from `Starting` to its end in one),
//! one Warning event per failure, and nothing at all for terminal executions but one status
//! write per webhook attempt (when `spec.notify.webhook` is set) and the one delete when their
//! lifetime runs out.

mod apply;
mod build;
mod control;
mod dereference;
mod expire;
mod notify;
mod update_status;
mod validate;

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::debug;

use apply::Creation;

use super::context::Context;
use super::status::{self, Facts, Standing};
use crate::api::{AgentExecution, Phase, SnapshotRef, contract};
use crate::controller::build::ExecutionOwner;
use crate::controller::error::{Error, Result};
use crate::runner::end_report::RunEndReport;
use crate::store::keys::ExecutionId;

/// How long one reconcile may take. Every step is a few API calls; one that hangs (a lost
/// response) would otherwise hold the execution, and every later event for it, until the
/// client's read timeout of nearly five minutes.
pub const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);

/// From this many failed reconciles in a row on, the execution's status shows the last error
/// (condition `Retrying`); fewer are routine (a conflict, a restarting API server).
pub const FAILURES_BEFORE_RETRYING_SHOWS: u32 = 3;

/// How long writing the `Retrying` condition may take: the API server may be what fails.
const RETRYING_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Reconciles one execution, failing (and so retrying with backoff) if it hangs. Once it has
/// failed several times in a row, its status says so.
pub async fn reconcile(execution: Arc<AgentExecution>, ctx: Arc<Context>) -> Result<Action> {
    // Only an execution that asked for telemetry has a trace.
    let traced = execution
        .spec
        .auto_telemetry
        .then(|| ExecutionOwner::of(&execution).ok());
    let span = traced.flatten().map(|owner| {
        ctx.reconcile_spans.span(&ExecutionId {
            namespace: owner.namespace,
            name: owner.name,
            uid: owner.uid,
        })
    });
    let result = tokio::time::timeout(
        RECONCILE_TIMEOUT,
        reconcile_once(Arc::clone(&execution), Arc::clone(&ctx)),
    )
    .await
    .unwrap_or(Err(Error::TimedOut(RECONCILE_TIMEOUT)));
    if let Err(error) = &result {
        show_retrying(&execution, &ctx, error).await;
    }
    if let Some(span) = span {
        span.end(result.as_ref().err().map(ToString::to_string).as_deref());
    }
    result
}

/// Writes condition `Retrying` with `error` once the execution has failed
/// [`FAILURES_BEFORE_RETRYING_SHOWS`] times in a row (the error policy counts this failure
/// after this returns), and again only when [`status::retrying`] has something new to show.
/// Best effort: if the API server is what fails, the log still has it.
async fn show_retrying(execution: &AgentExecution, ctx: &Context, error: &Error) {
    let Ok(owner) = ExecutionOwner::of(execution) else {
        return;
    };
    let attempt = ctx.failures_of(&owner.uid).saturating_add(1);
    let execution = ctx.latest(Arc::new(execution.clone()));
    let terminal = execution
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(Phase::is_terminal);
    if attempt < FAILURES_BEFORE_RETRYING_SHOWS
        || terminal
        || execution.metadata.deletion_timestamp.is_some()
    {
        return;
    }
    let reconciler = Reconciler {
        api: Api::namespaced(ctx.client.clone(), &owner.namespace),
        execution: &execution,
        owner,
        ctx,
    };
    let Some(status) = status::retrying(&execution, attempt, &error.to_string(), Timestamp::now())
    else {
        return;
    };
    let written =
        tokio::time::timeout(RETRYING_WRITE_TIMEOUT, reconciler.write_status(status)).await;
    if !matches!(written, Ok(Ok(()))) {
        debug!(execution = %reconciler.owner.name, "could not show the Retrying condition");
    }
}

async fn reconcile_once(execution: Arc<AgentExecution>, ctx: Arc<Context>) -> Result<Action> {
    let _timer = ctx.metrics.reconcile_started();
    ctx.metrics.work_queue.taken(
        &execution.name_any(),
        execution.metadata.namespace.as_deref(),
    );
    let owner = ExecutionOwner::of(&execution)?;
    debug!(execution = %owner.name, namespace = %owner.namespace, "reconciling");
    if execution.metadata.deletion_timestamp.is_some() {
        // Owner references remove the children; the snapshot ConfigMap's finalizer removes
        // the results (`results_cleanup`).
        ctx.forget(&owner.uid);
        return Ok(Action::await_change());
    }
    let execution = ctx.latest(execution);
    let status = execution.status.clone().unwrap_or_default();
    let reconciler = Reconciler {
        api: Api::namespaced(ctx.client.clone(), &owner.namespace),
        execution: &execution,
        owner,
        ctx: &ctx,
    };
    let action = if status.phase.is_some_and(Phase::is_terminal) {
        let settled = match reconciler.reported() {
            Some(report) => reconciler.correct(report).await?,
            None => PodEnd::Agrees,
        };
        // A webhook says how the run ended for good: not before the pod's end had its say.
        let notify = (settled == PodEnd::Agrees)
            .then(|| notify::deliver_webhook(&execution, &ctx))
            .flatten();
        match [notify, reconciler.retain().await?]
            .into_iter()
            .flatten()
            .min()
        {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        }
    } else if status.snapshot.is_none() && execution.spec.held {
        reconciler.hold().await?
    } else if status.snapshot.is_none() {
        reconciler.admit().await?
    } else {
        reconciler.progress().await?
    };
    ctx.reset_backoff(&reconciler.owner.uid);
    Ok(action)
}

/// Logs and counts a failed reconcile and retries it with exponential backoff.
pub fn error_policy(execution: Arc<AgentExecution>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.retry_failed("reconcile", execution.as_ref(), error)
}

/// One reconcile of one execution: what every stage works on.
struct Reconciler<'a> {
    /// The execution, with the status this controller wrote last.
    execution: &'a AgentExecution,
    /// Its name, namespace, uid and owner reference.
    owner: ExecutionOwner,
    /// AgentExecutions in its namespace.
    api: Api<AgentExecution>,
    /// What every reconcile shares.
    ctx: &'a Context,
}

impl Reconciler<'_> {
    /// First reconcile: resolve and snapshot the spec, create the children, record Starting.
    async fn admit(&self) -> Result<Action> {
        let namespace = self.owner.namespace.as_str();
        let resolved = self.resolve().await?;
        let limits = self.ctx.config.run_limits(self.ctx.signer.as_ref());
        let snapshot = match resolved.and_then(|s| validate::validate(s, &self.ctx.config, &limits))
        {
            Ok(snapshot) => snapshot,
            Err(invalid) => return self.refuse(&invalid).await,
        };
        let children = build::children(&self.owner, &snapshot, &self.ctx.config);
        let (config_map, job) = match self.create(children).await? {
            Creation::Created(config_map, job) => (config_map, job),
            Creation::Rejected(message) => return self.reject(&message).await,
        };
        debug!(execution = %self.owner.name, namespace, "children created");
        self.ctx
            .created_jobs
            .created(&self.owner.uid, (*job).clone());
        let digest = config_map
            .annotations()
            .get(contract::SNAPSHOT_DIGEST_ANNOTATION)
            .cloned()
            .unwrap_or_else(|| snapshot.digest());
        if let Some(created) = &self.execution.metadata.creation_timestamp {
            let after = Timestamp::now().duration_since(created.0);
            self.ctx.metrics.job_created(after.as_secs_f64());
        }
        let suspended = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
        let queue = snapshot.queue_name.as_deref().filter(|_| suspended);
        let status = status::starting(
            self.execution,
            &snapshot.agent.name,
            SnapshotRef {
                config_map: config_map.name_any(),
                digest,
            },
            &job.name_any(),
            queue,
            Timestamp::now(),
        );
        self.write_status(status).await?;
        // No event may come while a pod waits, so look again when its start timeout passes.
        Ok(Action::requeue(start_recheck(
            snapshot.start_timeout_seconds,
        )))
    }

    /// Later reconciles: decide the status from the Job and its pod, stop what must stop,
    /// write the status if it changed.
    async fn progress(&self) -> Result<Action> {
        let observed = self.observe().await?;
        let pods = observed.pods();
        let mut facts = status::facts(
            observed.job.as_deref(),
            &pods,
            observed.workload.as_deref(),
            Timestamp::now(),
        );
        facts.report = self.reported();
        let mut decision = status::decide(self.execution, &facts);
        if decision.needs_warnings(&facts) {
            let job_uid = facts.job.as_ref().and_then(|j| j.uid.as_deref());
            facts.warnings = self.warnings(&pods, job_uid).await?;
            decision = status::decide(self.execution, &facts);
        }
        if let Some(stop) = &decision.stop {
            self.stop(stop, &observed.job_name).await?;
        }
        let status = status::render(self.execution, &decision.standing, facts.now);
        let plan = status::plan_control(self.execution, facts.pod.as_ref(), facts.now);
        let status = self
            .apply_control(
                &plan,
                &facts,
                observed.job.as_deref(),
                &observed.job_name,
                status,
            )
            .await?;
        let terminal = status.phase.is_some_and(Phase::is_terminal);
        debug!(
            execution = %self.owner.name,
            namespace = %self.owner.namespace,
            was = ?self.execution.status.as_ref().and_then(|s| s.phase),
            now = ?status.phase,
            job = observed.job.is_some(),
            pods = ?pods.iter().map(|p| p.status.as_ref().and_then(|s| s.phase.clone())).collect::<Vec<_>>(),
            "assessed"
        );
        self.write_status(status).await?;
        Ok(match decision.recheck_after {
            Some(after) if !terminal => Action::requeue(recheck_delay(after)),
            _ => Action::await_change(),
        })
    }
}

impl Reconciler<'_> {
    /// The run's end as its runner reported it: handed to this replica, or recorded on the
    /// execution sealed for it ([`contract::RUN_ENDED_ANNOTATION`]).
    fn reported(&self) -> Option<RunEndReport> {
        if let Some(report) = self.ctx.handed_reports.get(&self.owner.uid) {
            return Some(report);
        }
        let tokens = self.ctx.config.run_end_tokens.as_ref()?;
        let recorded = self
            .execution
            .annotations()
            .get(contract::RUN_ENDED_ANNOTATION)?;
        RunEndReport::unseal(recorded, tokens, &self.owner.uid)
    }

    /// A run that ended on its runner's `report`: once its pod is seen, the pod's end wins
    /// where it disagrees (killed after the report, its node lost). A report handed over is
    /// dropped once the pod's end is seen or the pod is gone.
    async fn correct(&self, report: RunEndReport) -> Result<PodEnd> {
        let observed = self.observe().await?;
        let facts = Facts {
            report: Some(report),
            ..status::facts(
                observed.job.as_deref(),
                &observed.pods(),
                observed.workload.as_deref(),
                Timestamp::now(),
            )
        };
        let decision = status::decide(self.execution, &facts);
        if let Standing::Ended(_) = &decision.standing {
            let status = status::render(self.execution, &decision.standing, facts.now);
            self.write_status(status).await?;
            return Ok(PodEnd::Corrected);
        }
        let pod = facts.pod.as_ref();
        if !pod.is_none_or(|pod| pod.finished || pod.node_lost()) {
            return Ok(PodEnd::NotSeen);
        }
        self.ctx.handed_reports.forget(&self.owner.uid);
        Ok(PodEnd::Agrees)
    }
}

/// What the pod's end says of a run that ended on its runner's report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PodEnd {
    /// Not seen yet: the pod runs on (its agent's container exiting).
    NotSeen,
    /// It disagreed, and the status was corrected (the next reconcile sees it so).
    Corrected,
    /// It agrees with the status, or there is no pod left to say otherwise.
    Agrees,
}

/// The longest the controller waits before looking at an execution again on its own: a longer
/// start timeout is watched over in several looks, and no requeue can overflow a clock.
pub const MAX_RECHECK: Duration = Duration::from_secs(3600);

/// How long to wait to look again at something due `after` from now: at most [`MAX_RECHECK`].
pub fn recheck_delay(after: Duration) -> Duration {
    after.min(MAX_RECHECK)
}

/// When to look again at an execution whose Job was just created: once its start timeout of
/// `start_timeout_seconds` has passed, a second past it so it has passed in whole seconds (or
/// [`MAX_RECHECK`] before that).
pub fn start_recheck(start_timeout_seconds: i64) -> Duration {
    recheck_delay(Duration::from_secs(
        u64::try_from(start_timeout_seconds)
            .unwrap_or(0)
            .saturating_add(1),
    ))
}

#[cfg(test)]
mod tests;
