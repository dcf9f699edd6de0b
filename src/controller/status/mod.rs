//! Pure status computation: from what was observed (execution, Job, pods, now) to the status it should have and what must be stopped.
//!
//! Terminal executions keep their status for good, so a restarted controller writes nothing
//! for them; everything else is recomputed from the Job and its pod on every reconcile.

pub mod conditions;

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{AgentExecution, AgentExecutionStatus, Phase, SnapshotRef};
use crate::resolve::{DEFAULT_START_TIMEOUT_SECONDS, InvalidSpec};

use crate::api::contract::{AGENT_CONTAINER, STAGE_CONTAINER};
pub use crate::runner::RunState;
pub use crate::runner::termination::TerminationSummary;
use conditions::reason;

/// Longest status message; a failure's stderr tail is cut from its start to fit.
pub const MESSAGE_LIMIT: usize = 1536;

/// Waiting reasons of a container whose image cannot be pulled.
const IMAGE_PULL_REASONS: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// What the controller knows about the execution's Job.
#[derive(Clone, Copy, Debug)]
pub enum JobObservation<'a> {
    /// The Job exists.
    Present(&'a Job),
    /// The Job was created and is gone (confirmed with the API server, not just the cache).
    Gone,
}

/// Everything the status of a resolved execution is computed from.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// The execution, with the status last written.
    pub execution: &'a AgentExecution,
    /// Its Job.
    pub job: JobObservation<'a>,
    /// The pods of its Job (at most one is expected).
    pub pods: &'a [&'a Pod],
    /// Warning events about the pod, read only once its start timed out (see
    /// [`needs_pod_warnings`]).
    pub pod_warnings: &'a [PodWarning],
    /// The current time.
    pub now: Timestamp,
}

/// A Warning event the kubelet or the scheduler published about a pod. The kubelet's container
/// status can drop back to `PodInitializing` between two pull attempts, so the event is what
/// still names the cause when the start timeout passes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodWarning {
    /// The container the event is about, if it names one.
    pub container: Option<String>,
    /// The event's reason, e.g. `ErrImageNeverPull` or `Failed`.
    pub reason: String,
    /// The event's message.
    pub message: String,
}

impl PodWarning {
    /// The warning an event carries, if it is a Warning.
    pub fn from_event(event: &k8s_openapi::api::core::v1::Event) -> Option<Self> {
        if event.type_.as_deref() != Some("Warning") {
            return None;
        }
        // `spec.containers{agent}` or `spec.initContainers{errand-stage}`.
        let container = event
            .involved_object
            .field_path
            .as_deref()
            .and_then(|path| path.split_once('{'))
            .map(|(_, rest)| rest.trim_end_matches('}').to_owned());
        Some(Self {
            container,
            reason: event.reason.clone().unwrap_or_default(),
            message: event.message.clone().unwrap_or_default(),
        })
    }

    /// Whether the event says an image cannot be pulled.
    fn is_image_pull(&self) -> bool {
        IMAGE_PULL_REASONS.contains(&self.reason.as_str())
            || (self.reason == "Failed"
                && IMAGE_PULL_REASONS.iter().any(|r| self.message.contains(r)))
    }
}

/// Whether `assessment` failed the start for no reason the pod's status gave, so that the
/// pod's Warning events should be read and the execution assessed again with them.
pub fn needs_pod_warnings(observed: &Observed<'_>, assessment: &Assessment) -> bool {
    observed.pod_warnings.is_empty()
        && !observed.pods.is_empty()
        && assessment
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == conditions::FAILED && c.reason == reason::START_TIMEOUT)
}

/// What must be stopped to carry out the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Delete the pod with its grace period: the runner stops the agent and saves partial results.
    DeletePod(String),
    /// Delete the Job (and its pod): nothing ran that has results to save.
    DeleteJob,
}

/// The outcome of [`assess`].
#[derive(Clone, Debug, PartialEq)]
pub struct Assessment {
    /// The status the execution should have.
    pub status: AgentExecutionStatus,
    /// What to stop first, if anything.
    pub stop: Option<Stop>,
    /// When to look again if nothing changes before (a pending start timeout).
    pub recheck_after: Option<Duration>,
}

/// `now` truncated to whole seconds, as the API server stores times.
fn time(now: Timestamp) -> Time {
    Time(Timestamp::from_second(now.as_second()).expect("a whole second of a valid time"))
}

fn base_status(execution: &AgentExecution) -> AgentExecutionStatus {
    let mut status = execution.status.clone().unwrap_or_default();
    status.observed_generation = execution.metadata.generation;
    status
}

/// The status of an execution whose spec failed resolution: Failed with reason `InvalidSpec`.
pub fn invalid(
    execution: &AgentExecution,
    error: &InvalidSpec,
    now: Timestamp,
) -> AgentExecutionStatus {
    let mut status = base_status(execution);
    let now = time(now);
    let message = bounded(&error.to_string());
    let generation = execution.metadata.generation;
    conditions::set(
        &mut status.conditions,
        conditions::RESOLVED,
        false,
        reason::INVALID_SPEC,
        &message,
        generation,
        &now,
    );
    conditions::set(
        &mut status.conditions,
        conditions::FAILED,
        true,
        reason::INVALID_SPEC,
        &message,
        generation,
        &now,
    );
    status.phase = Some(Phase::Failed);
    status.message = Some(message);
    finish(&mut status, execution, now);
    status
}

/// The status right after the snapshot and the Job were created: Starting.
pub fn starting(
    execution: &AgentExecution,
    agent: &str,
    snapshot: SnapshotRef,
    job_name: &str,
    queued: bool,
    now: Timestamp,
) -> AgentExecutionStatus {
    let mut status = base_status(execution);
    let now = time(now);
    let generation = execution.metadata.generation;
    conditions::set(
        &mut status.conditions,
        conditions::RESOLVED,
        true,
        reason::RESOLVED,
        "",
        generation,
        &now,
    );
    mark_waiting(&mut status, queued, generation, &now);
    status.agent = Some(agent.to_owned());
    status.snapshot = Some(snapshot);
    status.job_name = Some(job_name.to_owned());
    status
}

/// Phase Starting with condition Started false: `Queued` while Kueue holds the Job,
/// `PodStarting` otherwise.
fn mark_waiting(
    status: &mut AgentExecutionStatus,
    queued: bool,
    generation: Option<i64>,
    now: &Time,
) {
    let waiting = if queued {
        reason::QUEUED
    } else {
        reason::POD_STARTING
    };
    conditions::set(
        &mut status.conditions,
        conditions::STARTED,
        false,
        waiting,
        "",
        generation,
        now,
    );
    status.phase = Some(Phase::Starting);
}

/// The status of a resolved execution from its Job and pod, and what to stop.
pub fn assess(observed: Observed<'_>) -> Assessment {
    let execution = observed.execution;
    let current = execution.status.clone().unwrap_or_default();
    if current.phase.is_some_and(Phase::is_terminal) {
        return Assessment {
            status: current,
            stop: None,
            recheck_after: None,
        };
    }
    let job = match observed.job {
        JobObservation::Present(job) => job,
        JobObservation::Gone => {
            let outcome = Outcome::failed(
                reason::JOB_DELETED,
                "the Job was deleted before the run ended; errand never starts a second one".into(),
            );
            return Assessment {
                status: outcome.apply(execution, observed.now, None),
                stop: None,
                recheck_after: None,
            };
        }
    };
    let pod = observed
        .pods
        .iter()
        .copied()
        .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    match pod {
        Some(pod) if pod_finished(pod) => {
            let outcome = finished_outcome(execution, job, pod);
            Assessment {
                status: outcome.apply(execution, observed.now, Some(pod)),
                stop: None,
                recheck_after: None,
            }
        }
        Some(pod) if agent_started(pod).is_some() => running(execution, pod, observed.now),
        Some(pod) => pending(
            execution,
            job,
            Some(pod),
            observed.pod_warnings,
            observed.now,
        ),
        None => match job_failure(job) {
            Some(job_reason) => {
                let outcome = if execution.spec.cancel {
                    Outcome::cancelled("cancelled before the agent started".into())
                } else if job_reason.0 == "DeadlineExceeded" {
                    Outcome::failed(
                        reason::DEADLINE_EXCEEDED,
                        format!("the Job's deadline passed: {}", job_reason.1),
                    )
                } else {
                    Outcome::failed(
                        reason::AGENT_FAILED,
                        format!("the Job failed ({}): {}", job_reason.0, job_reason.1),
                    )
                };
                Assessment {
                    status: outcome.apply(execution, observed.now, None),
                    stop: None,
                    recheck_after: None,
                }
            }
            // A pod that ran is gone but the Job has not failed yet: wait for the Job
            // controller rather than step back to Starting.
            None if current.phase == Some(Phase::Running) => Assessment {
                status: base_status(execution),
                stop: None,
                recheck_after: None,
            },
            None => pending(execution, job, None, &[], observed.now),
        },
    }
}

/// The agent is running: phase Running, or a graceful stop when cancelled.
fn running(execution: &AgentExecution, pod: &Pod, now: Timestamp) -> Assessment {
    let mut status = base_status(execution);
    let generation = execution.metadata.generation;
    let now_time = time(now);
    status.phase = Some(Phase::Running);
    if status.start_time.is_none() {
        status.start_time = agent_started(pod).cloned();
    }
    conditions::set(
        &mut status.conditions,
        conditions::STARTED,
        true,
        reason::AGENT_STARTED,
        "",
        generation,
        &now_time,
    );
    let stop = (execution.spec.cancel && pod.metadata.deletion_timestamp.is_none())
        .then(|| Stop::DeletePod(pod.metadata.name.clone().unwrap_or_default()));
    Assessment {
        status,
        stop,
        recheck_after: None,
    }
}

/// Nothing runs yet: Starting, until the start timeout or a cancel ends it.
fn pending(
    execution: &AgentExecution,
    job: &Job,
    pod: Option<&Pod>,
    warnings: &[PodWarning],
    now: Timestamp,
) -> Assessment {
    let queued = job.spec.as_ref().and_then(|s| s.suspend) == Some(true);
    if execution.spec.cancel {
        let outcome = Outcome::cancelled("cancelled before the agent started".into());
        return Assessment {
            status: outcome.apply(execution, now, pod),
            stop: Some(Stop::DeleteJob),
            recheck_after: None,
        };
    }
    let mut status = base_status(execution);
    let generation = execution.metadata.generation;
    mark_waiting(&mut status, queued && pod.is_none(), generation, &time(now));
    if queued && pod.is_none() {
        // Waiting for quota in Kueue is not a start failure.
        return Assessment {
            status,
            stop: None,
            recheck_after: None,
        };
    }
    let since = pod
        .and_then(|p| p.metadata.creation_timestamp.as_ref())
        .or_else(|| job.status.as_ref().and_then(|s| s.start_time.as_ref()))
        .or(job.metadata.creation_timestamp.as_ref())
        .map_or(now, |t| t.0);
    let limit = execution
        .spec
        .start_timeout_seconds
        .unwrap_or(DEFAULT_START_TIMEOUT_SECONDS);
    let waited = now.as_second() - since.as_second();
    if waited < limit {
        let remaining = u64::try_from(limit - waited).unwrap_or(0);
        return Assessment {
            status,
            stop: None,
            recheck_after: Some(Duration::from_secs(remaining)),
        };
    }
    let outcome = start_timeout_outcome(pod, warnings, limit);
    Assessment {
        status: outcome.apply(execution, now, pod),
        stop: Some(Stop::DeleteJob),
        recheck_after: None,
    }
}

/// Why the pod has not started after `limit` seconds, in the scheduler's or kubelet's words:
/// from its status first, then from its Warning events.
fn start_timeout_outcome(pod: Option<&Pod>, warnings: &[PodWarning], limit: i64) -> Outcome {
    let after = format!("the pod did not start within {limit}s");
    let Some(pod) = pod else {
        return Outcome::failed(
            reason::START_TIMEOUT,
            format!("{after}: no pod was created (see the Job's events)"),
        );
    };
    let waiting = all_statuses(pod).filter_map(|cs| {
        let waiting = cs.state.as_ref()?.waiting.as_ref()?;
        Some((
            cs.name.as_str(),
            waiting.reason.clone().unwrap_or_default(),
            waiting.message.clone().unwrap_or_default(),
        ))
    });
    let mut other = None;
    for (container, why, message) in waiting {
        if IMAGE_PULL_REASONS.contains(&why.as_str()) {
            return Outcome::failed(
                reason::IMAGE_PULL_FAILED,
                format!("{after}: container {container}: {why}: {message}"),
            );
        }
        if other.is_none() && !why.is_empty() && why != "PodInitializing" {
            other = Some(format!("{after}: container {container}: {why}: {message}"));
        }
    }
    if let Some(warning) = warnings.iter().find(|w| w.is_image_pull()) {
        let container = warning.container.as_deref().unwrap_or("?");
        return Outcome::failed(
            reason::IMAGE_PULL_FAILED,
            format!(
                "{after}: container {container}: {}: {}",
                warning.reason, warning.message
            ),
        );
    }
    let unscheduled = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        });
    if let Some(condition) = unscheduled {
        return Outcome::failed(
            reason::UNSCHEDULABLE,
            format!(
                "{after}: {}: {}",
                condition.reason.clone().unwrap_or_default(),
                condition.message.clone().unwrap_or_default()
            ),
        );
    }
    let warned = warnings.last().map(|w| {
        let container = w.container.as_deref().unwrap_or("?");
        format!(
            "{after}: container {container}: {}: {}",
            w.reason, w.message
        )
    });
    Outcome::failed(reason::START_TIMEOUT, other.or(warned).unwrap_or(after))
}

/// How a finished pod ended, most specific cause first.
fn finished_outcome(execution: &AgentExecution, job: &Job, pod: &Pod) -> Outcome {
    let agent = container_status(pod, AGENT_CONTAINER, false);
    let stage = container_status(pod, STAGE_CONTAINER, true);
    let agent_exit = terminated(agent).map(|t| t.exit_code);
    let summary = termination_message(agent)
        .or_else(|| termination_message(stage))
        .and_then(TerminationSummary::parse);
    let exit_code = summary.as_ref().and_then(|s| s.exit_code).or(agent_exit);
    let succeeded = summary
        .as_ref()
        .map_or(agent_exit == Some(0), |s| s.state == RunState::Succeeded);
    let stderr = summary
        .as_ref()
        .map(|s| s.stderr_tail.as_str())
        .unwrap_or_default();
    let pod_status = pod.status.as_ref();
    let pod_reason = pod_status
        .and_then(|s| s.reason.clone())
        .unwrap_or_default();
    let disrupted = pod_status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        });

    let mut outcome = if job_failure(job).is_some_and(|(why, _)| why == "DeadlineExceeded") {
        Outcome::failed(
            reason::DEADLINE_EXCEEDED,
            "the Job's deadline passed (backstop behind the run's timeout)".into(),
        )
    } else if summary
        .as_ref()
        .is_some_and(|s| s.timed_out || s.state == RunState::TimedOut)
    {
        Outcome::failed(
            reason::DEADLINE_EXCEEDED,
            format!(
                "the agent ran past timeoutSeconds ({}s) and was stopped",
                execution.spec.timeout_seconds
            ),
        )
    } else if execution.spec.cancel && !succeeded {
        Outcome::cancelled("cancelled while running; partial results saved".into())
    } else if succeeded {
        Outcome::succeeded()
    } else if pod_reason == "Evicted" || disrupted {
        let message = pod_status
            .and_then(|s| s.message.clone())
            .unwrap_or_default();
        Outcome::failed(
            reason::POD_EVICTED,
            format!("the pod was evicted: {message}"),
        )
    } else if pod_reason.starts_with("OutOf") || pod_reason == "UnexpectedAdmissionError" {
        let message = pod_status
            .and_then(|s| s.message.clone())
            .unwrap_or_default();
        Outcome::failed(
            reason::UNSCHEDULABLE,
            format!("the node refused the pod ({pod_reason}): {message}"),
        )
    } else if terminated(stage).is_some_and(|t| t.exit_code != 0)
        || summary
            .as_ref()
            .is_some_and(|s| s.state == RunState::StageFailed)
    {
        Outcome::failed(
            reason::STAGE_FAILED,
            with_tail("staging the working directory failed", stderr),
        )
    } else if summary
        .as_ref()
        .is_some_and(|s| s.state == RunState::StartFailed)
    {
        Outcome::failed(
            reason::AGENT_FAILED,
            with_tail("the agent's command could not be started", stderr),
        )
    } else {
        let code = exit_code.map_or_else(
            || "without an exit code".to_owned(),
            |c| format!("with exit code {c}"),
        );
        Outcome::failed(
            reason::AGENT_FAILED,
            with_tail(&format!("the agent failed {code}"), stderr),
        )
    };
    outcome.exit_code = exit_code;
    outcome.summary = summary;
    outcome
}

/// A terminal phase with its condition reason and message.
struct Outcome {
    phase: Phase,
    reason: &'static str,
    message: String,
    exit_code: Option<i32>,
    summary: Option<TerminationSummary>,
}

impl Outcome {
    fn failed(reason: &'static str, message: String) -> Self {
        Self {
            phase: Phase::Failed,
            reason,
            message,
            exit_code: None,
            summary: None,
        }
    }

    fn cancelled(message: String) -> Self {
        Self {
            phase: Phase::Cancelled,
            reason: reason::CANCELLED,
            message,
            exit_code: None,
            summary: None,
        }
    }

    fn succeeded() -> Self {
        Self {
            phase: Phase::Succeeded,
            reason: reason::SUCCEEDED,
            message: String::new(),
            exit_code: None,
            summary: None,
        }
    }

    /// The terminal status. A success whose results could not be saved is a failure: the
    /// Succeeded phase promises saved results.
    fn apply(
        mut self,
        execution: &AgentExecution,
        now: Timestamp,
        pod: Option<&Pod>,
    ) -> AgentExecutionStatus {
        let mut status = base_status(execution);
        let generation = execution.metadata.generation;
        let now_time = time(now);
        if let Some(summary) = &self.summary {
            status.results = summary.results.clone();
            match &summary.results_error {
                Some(error) => {
                    let message = format!("some results could not be saved: {error}");
                    conditions::set(
                        &mut status.conditions,
                        conditions::RESULTS_SAVED,
                        false,
                        reason::RESULTS_UPLOAD_FAILED,
                        &bounded(&message),
                        generation,
                        &now_time,
                    );
                    if self.phase == Phase::Succeeded {
                        self = Outcome {
                            phase: Phase::Failed,
                            reason: reason::RESULTS_UPLOAD_FAILED,
                            message,
                            ..self
                        };
                    }
                }
                None => conditions::set(
                    &mut status.conditions,
                    conditions::RESULTS_SAVED,
                    true,
                    reason::RESULTS_SAVED,
                    &format!("{} results saved", summary.results.len()),
                    generation,
                    &now_time,
                ),
            }
        }
        if self.phase == Phase::Succeeded {
            self.message = format!("the agent exited 0; {} results saved", status.results.len());
        }
        let message = bounded(&self.message);
        let (type_, ok) = match self.phase {
            Phase::Succeeded => (conditions::COMPLETE, true),
            _ => (conditions::FAILED, true),
        };
        conditions::set(
            &mut status.conditions,
            type_,
            ok,
            self.reason,
            &message,
            generation,
            &now_time,
        );
        if let Some(pod) = pod {
            if status.start_time.is_none() {
                status.start_time = agent_started(pod).cloned();
            }
            if status.start_time.is_some() {
                conditions::set(
                    &mut status.conditions,
                    conditions::STARTED,
                    true,
                    reason::AGENT_STARTED,
                    "",
                    generation,
                    &now_time,
                );
            }
        }
        status.phase = Some(self.phase);
        status.exit_code = self.exit_code;
        status.message = Some(message);
        let finished = pod
            .and_then(|p| terminated(container_status(p, AGENT_CONTAINER, false)))
            .and_then(|t| t.finished_at.clone());
        finish(&mut status, execution, finished.unwrap_or(now_time));
        status
    }
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

fn with_tail(what: &str, stderr: &str) -> String {
    let stderr = stderr.trim_end();
    if stderr.is_empty() {
        return what.to_owned();
    }
    bounded(&format!("{what}; stderr tail:\n{stderr}"))
}

/// `message` cut to [`MESSAGE_LIMIT`] bytes, keeping its start (what happened) and its end
/// (the last lines of stderr).
fn bounded(message: &str) -> String {
    if message.len() <= MESSAGE_LIMIT {
        return message.to_owned();
    }
    let head_end = floor_boundary(message, MESSAGE_LIMIT / 4);
    let tail_start = ceil_boundary(message, message.len() - (MESSAGE_LIMIT - head_end - 5));
    format!("{} ... {}", &message[..head_end], &message[tail_start..])
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

fn pod_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// When the agent container started, if it has.
fn agent_started(pod: &Pod) -> Option<&Time> {
    let state = container_status(pod, AGENT_CONTAINER, false)?
        .state
        .as_ref()?;
    match state {
        ContainerState {
            running: Some(running),
            ..
        } => running.started_at.as_ref(),
        ContainerState {
            terminated: Some(terminated),
            ..
        } => terminated.started_at.as_ref(),
        _ => None,
    }
}

fn container_status<'a>(pod: &'a Pod, name: &str, init: bool) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    let list = if init {
        status.init_container_statuses.as_ref()
    } else {
        status.container_statuses.as_ref()
    };
    list?.iter().find(|c| c.name == name)
}

fn all_statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let status = pod.status.as_ref();
    let init = status
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten();
    let main = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten();
    init.chain(main)
}

fn terminated(
    status: Option<&ContainerStatus>,
) -> Option<&k8s_openapi::api::core::v1::ContainerStateTerminated> {
    status?.state.as_ref()?.terminated.as_ref()
}

fn termination_message(status: Option<&ContainerStatus>) -> Option<&str> {
    terminated(status)?.message.as_deref()
}

/// The reason and message of the Job's failure, once the Job controller decided it failed.
fn job_failure(job: &Job) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find_map(|c| {
            let failing = (c.type_ == "Failed" || c.type_ == "FailureTarget") && c.status == "True";
            failing.then(|| {
                (
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            })
        })
}

#[cfg(test)]
mod tests;
