//! Rendering: where a run stands, as the status and conditions the execution shows.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::decide::{Ending, Standing, queued_message};
use crate::api::contract::{ConditionType, Reason};
use crate::api::{AgentExecution, AgentExecutionStatus, Phase, SnapshotRef};
use crate::resolve::InvalidSpec;
use crate::resolve::conditions::ConditionWriter;
use crate::runner::outcome::{bounded, results_not_saved};

/// `now` truncated to whole seconds, as the API server stores times.
fn time(now: Timestamp) -> Time {
    Time(Timestamp::from_second(now.as_second()).expect("a whole second of a valid time"))
}

/// The status as written, for the current generation, without the `Retrying` condition: a
/// reconcile that renders a status succeeded.
fn base_status(execution: &AgentExecution) -> AgentExecutionStatus {
    let mut status = execution.status.clone().unwrap_or_default();
    status.observed_generation = execution.metadata.generation;
    status
        .conditions
        .retain(|c| c.type_ != ConditionType::Retrying.as_str());
    status
}

/// A writer of `conditions` for `execution`'s generation at `now`.
fn writer<'a>(
    conditions: &'a mut Vec<Condition>,
    execution: &AgentExecution,
    now: &Time,
) -> ConditionWriter<'a> {
    ConditionWriter::new(conditions, execution.metadata.generation, now.clone())
}

/// The status of an execution whose spec failed resolution: Failed with reason `InvalidSpec`.
pub fn invalid(
    execution: &AgentExecution,
    error: &InvalidSpec,
    now: Timestamp,
) -> AgentExecutionStatus {
    let message = bounded(&error.to_string());
    failed_before_start(execution, false, Reason::InvalidSpec, message, now)
}

/// The status of an execution one of whose children the API server refused for good (the
/// others were removed): Failed with reason `CreateRejected` and the API server's `message`.
pub fn rejected(execution: &AgentExecution, message: &str, now: Timestamp) -> AgentExecutionStatus {
    failed_before_start(
        execution,
        true,
        Reason::CreateRejected,
        bounded(message),
        now,
    )
}

/// Failed before anything ran, the spec `resolved` or not.
fn failed_before_start(
    execution: &AgentExecution,
    resolved: bool,
    reason: Reason,
    message: String,
    now: Timestamp,
) -> AgentExecutionStatus {
    let mut status = base_status(execution);
    let now = time(now);
    let mut conditions = writer(&mut status.conditions, execution, &now);
    if resolved {
        conditions.set(ConditionType::Resolved, true, Reason::Resolved, "");
    } else {
        conditions.set(ConditionType::Resolved, false, reason, &message);
    }
    conditions.set(ConditionType::Failed, true, reason, &message);
    status.phase = Some(Phase::Failed);
    status.message = Some(message);
    finish(&mut status, execution, now);
    status
}

/// The status after reconcile `attempt` (of several in a row) failed with `error`: as it was,
/// plus condition `Retrying` with the error, so that `kubectl describe` shows why the
/// execution is not moving; `None` when there is nothing new to show. Every status write
/// wakes the controller at once, past its backoff, so the condition is written when it first
/// shows and then only for a new error, and that at most at attempts 4, 8, 16, ... The next
/// reconcile that renders a status clears it.
pub fn retrying(
    execution: &AgentExecution,
    attempt: u32,
    error: &str,
    now: Timestamp,
) -> Option<AgentExecutionStatus> {
    let message = bounded(&format!(
        "reconciling failed {attempt} times in a row; retrying with backoff. Last error: {error}"
    ));
    let mut status = execution.status.clone().unwrap_or_default();
    let shown = crate::resolve::conditions::get(&status.conditions, ConditionType::Retrying);
    let due = match shown {
        None => true,
        Some(shown) => attempt.is_power_of_two() && !same_error(&shown.message, &message),
    };
    if !due {
        return None;
    }
    status.observed_generation = execution.metadata.generation;
    writer(&mut status.conditions, execution, &time(now)).set(
        ConditionType::Retrying,
        true,
        Reason::ReconcileError,
        &message,
    );
    Some(status)
}

/// Whether two `Retrying` messages name the same last error (their attempt counts aside).
fn same_error(a: &str, b: &str) -> bool {
    let error = |m: &str| m.split_once("Last error: ").map(|(_, e)| e.to_owned());
    error(a) == error(b)
}

/// The status right after the snapshot and the Job were created: Queued when the Job went to
/// Kueue's LocalQueue `queue` (created suspended), else Starting.
pub fn starting(
    execution: &AgentExecution,
    agent: &str,
    snapshot: SnapshotRef,
    job_name: &str,
    queue: Option<&str>,
    now: Timestamp,
) -> AgentExecutionStatus {
    let mut status = base_status(execution);
    let now = time(now);
    writer(&mut status.conditions, execution, &now).set(
        ConditionType::Resolved,
        true,
        Reason::Resolved,
        "",
    );
    let message = queue.map(|queue| queued_message(Some(queue), None));
    mark_waiting(&mut status, execution, message.as_deref(), &now);
    status.agent = Some(agent.to_owned());
    status.snapshot = Some(snapshot);
    status.job_name = Some(job_name.to_owned());
    status
}

/// The status of `execution` whose run stands as `standing` at `now`.
pub fn render(
    execution: &AgentExecution,
    standing: &Standing,
    now: Timestamp,
) -> AgentExecutionStatus {
    let now = time(now);
    match standing {
        Standing::Final => execution.status.clone().unwrap_or_default(),
        Standing::Unchanged => base_status(execution),
        Standing::Queued { message } => {
            let mut status = base_status(execution);
            mark_waiting(&mut status, execution, Some(message), &now);
            status
        }
        Standing::Starting => {
            let mut status = base_status(execution);
            mark_waiting(&mut status, execution, None, &now);
            status
        }
        Standing::Running {
            started_at,
            image_id,
        } => {
            let mut status = base_status(execution);
            status.phase = Some(Phase::Running);
            status.message = None;
            if status.start_time.is_none() {
                status.start_time.clone_from(started_at);
            }
            if image_id.is_some() {
                status.image_id.clone_from(image_id);
            }
            writer(&mut status.conditions, execution, &now).set(
                ConditionType::Started,
                true,
                Reason::AgentStarted,
                "",
            );
            status
        }
        Standing::Ended(ending) => ended(execution, ending, now),
    }
}

/// Condition Started false, and the phase to match: `Queued` with Kueue's `queued` message
/// (also the status message) while Kueue holds the Job, `Starting` with reason `PodStarting`
/// otherwise.
fn mark_waiting(
    status: &mut AgentExecutionStatus,
    execution: &AgentExecution,
    queued: Option<&str>,
    now: &Time,
) {
    let (phase, reason) = match queued {
        Some(_) => (Phase::Queued, Reason::Queued),
        None => (Phase::Starting, Reason::PodStarting),
    };
    let message = queued.map(bounded);
    writer(&mut status.conditions, execution, now).set(
        ConditionType::Started,
        false,
        reason,
        message.as_deref().unwrap_or_default(),
    );
    status.phase = Some(phase);
    status.message = message;
}

/// The terminal status: the results saved (by the runner, else by staging), the ending's
/// condition, the agent's start and the completion time.
fn ended(execution: &AgentExecution, ending: &Ending, now: Time) -> AgentExecutionStatus {
    let mut status = base_status(execution);
    let message = bounded(&ending.message);
    let was_complete = crate::resolve::conditions::get(&status.conditions, ConditionType::Complete)
        .is_some_and(|c| c.status == "True");
    let mut conditions = writer(&mut status.conditions, execution, &now);
    let results = ending.results();
    if !results.is_empty() {
        status.results = results;
    }
    if let Some(step) = &ending.extension {
        let (succeeded, reason, said) = if step.succeeded() {
            let saved = format!("{} results saved", step.results.len());
            (true, Reason::ExtensionSucceeded, saved)
        } else {
            let failure = step.failure.as_deref().unwrap_or("failed");
            (false, Reason::ExtensionFailed, bounded(failure))
        };
        conditions.set(ConditionType::ExtensionSucceeded, succeeded, reason, &said);
    }
    if let Some(summary) = &ending.summary {
        match &summary.results_error {
            Some(error) => conditions.set(
                ConditionType::ResultsSaved,
                false,
                Reason::ResultsUploadFailed,
                &bounded(&results_not_saved(error)),
            ),
            None => conditions.set(
                ConditionType::ResultsSaved,
                true,
                Reason::ResultsSaved,
                &format!("{} results saved", summary.results.len()),
            ),
        }
    }
    let type_ = match ending.phase {
        Phase::Succeeded => ConditionType::Complete,
        _ => ConditionType::Failed,
    };
    if type_ == ConditionType::Failed && was_complete {
        // It ended on its runner's report, and its pod then ended otherwise.
        conditions.set(ConditionType::Complete, false, ending.reason, &message);
    }
    conditions.set(type_, true, ending.reason, &message);
    if let Some(agent) = &ending.agent {
        if status.start_time.is_none() {
            status.start_time.clone_from(&agent.started_at);
        }
        if agent.image_id.is_some() {
            status.image_id.clone_from(&agent.image_id);
        }
        if status.start_time.is_some() {
            conditions.set(ConditionType::Started, true, Reason::AgentStarted, "");
        }
    }
    if let Some(summary) = ending
        .summary
        .as_ref()
        .filter(|s| !s.gpu_devices.is_empty())
    {
        status.gpu_devices.clone_from(&summary.gpu_devices);
    }
    status.phase = Some(ending.phase);
    status.exit_code = ending.exit_code;
    status.message = Some(message);
    let finished = ending.agent.as_ref().and_then(|a| a.finished_at.clone());
    finish(&mut status, execution, finished.unwrap_or(now));
    status
}

/// Sets the completion time and the duration (from the agent's start, or from the
/// execution's creation when the agent never started).
fn finish(status: &mut AgentExecutionStatus, execution: &AgentExecution, completed: Time) {
    let began = status
        .start_time
        .as_ref()
        .or(execution.metadata.creation_timestamp.as_ref());
    status.duration = began.map(|b| format_duration(completed.0.as_second() - b.0.as_second()));
    status.completion_time = Some(completed);
}

/// `45s`, `2m5s`, `1h2m3s`.
pub fn format_duration(seconds: i64) -> String {
    let seconds = seconds.max(0);
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}
