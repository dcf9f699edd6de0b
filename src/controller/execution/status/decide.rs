//! The decision: from an execution and the facts observed about it to where its run stands, what must be stopped and when to look again.
//!
//! A terminal execution stays as it is for good, so a restarted controller decides nothing
//! new for it; everything else is decided afresh from the facts on every reconcile. The one
//! exception is a run that ended on its runner's report ([`Facts::report`]) before its pod was
//! seen finished: its pod's end, once seen, may still correct it ([`corrected_by_pod`]).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::observe::{
    ExtensionFacts, Facts, IMAGE_PULL_REASONS, JobFacts, PodFacts, Warning, WorkloadFacts,
};
use crate::api::contract::{self, Reason};
use crate::api::{AgentExecution, Phase, ResultEntry};
use crate::resolve::DEFAULT_START_TIMEOUT_SECONDS;
use crate::runner::end_report::RunEndReport;
use crate::runner::outcome::{Outcome, RunReport, extension_outcome, run_outcome};
use crate::runner::termination::TerminationSummary;
use crate::runner::{ExtensionSummary, RunState};

/// How long after its agent started a run shows phase `Running`. A run that ends sooner goes
/// from `Starting` to its end in one status write instead of two, and still records its
/// `startTime`, image and condition `Started` (from the pod's own timestamps); a longer run
/// shows `Running` this much after the start the pod reports (in whole seconds), so between
/// four and five seconds after its agent started. Five seconds cover a short run's upload, its
/// exit and the kubelet's report of it (its pod lifecycle relist runs every second) also on a
/// busy node; an agent run is measured in minutes.
pub const RUNNING_SHOWN_AFTER: Duration = Duration::from_secs(5);

/// What must be stopped to carry out a decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Delete the pod with its grace period: the runner stops the agent and saves partial results.
    DeletePod(String),
    /// Delete the Job (and its pod): nothing ran that has results to save.
    DeleteJob,
}

/// What [`decide`] concluded.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Where the run stands, which the status says.
    pub standing: Standing,
    /// What to stop first, if anything.
    pub stop: Option<Stop>,
    /// When to look again if nothing changes before (a pending start timeout, a run whose
    /// `Running` is held back).
    pub recheck_after: Option<Duration>,
}

impl Decision {
    fn settled(standing: Standing) -> Self {
        Self {
            standing,
            stop: None,
            recheck_after: None,
        }
    }

    /// Whether this failed the start for no reason the pod's status gave, so that the Warning
    /// events of the pod (or of the Job, when it has no pod) should be read into `facts` and
    /// the execution decided again with them.
    pub fn needs_warnings(&self, facts: &Facts) -> bool {
        facts.warnings.is_empty()
            && matches!(&self.standing, Standing::Ended(ending) if ending.reason == Reason::StartTimeout)
    }
}

/// Where a run stands.
#[derive(Clone, Debug, PartialEq)]
pub enum Standing {
    /// It ended before: its status is final and stays as written.
    Final,
    /// Nothing new to show: a pod that ran is gone and the Job controller has not failed the
    /// Job yet, or the agent started less than [`RUNNING_SHOWN_AFTER`] ago.
    Unchanged,
    /// Phase `Queued`: Kueue holds the Job and no pod exists.
    Queued {
        /// Why, in Kueue's words when it gave them ([`queued_message`]).
        message: String,
    },
    /// Phase `Starting`: the pod is on its way.
    Starting,
    /// Phase `Running`: the agent started.
    Running {
        /// When, as the pod says.
        started_at: Option<Time>,
        /// The image the agent runs, by digest, as the kubelet reports it.
        image_id: Option<String>,
    },
    /// A terminal phase.
    Ended(Ending),
}

/// How a run ended: its terminal phase, the condition's reason and message, and what the pod
/// reported.
#[derive(Clone, Debug, PartialEq)]
pub struct Ending {
    /// `Succeeded`, `Failed` or `Cancelled`.
    pub phase: Phase,
    /// The reason of condition `Complete` (on success) or `Failed`.
    pub reason: Reason,
    /// What happened, unbounded.
    pub message: String,
    /// The agent's exit code.
    pub exit_code: Option<i32>,
    /// The runner's summary, with the results it saved.
    pub summary: Option<TerminationSummary>,
    /// What staging saved, listed when the runner left no summary.
    pub staged: Vec<ResultEntry>,
    /// The agent's start, end and image, when the run had a pod.
    pub agent: Option<Box<AgentContainer>>,
    /// How the extension's step ended, when the agent succeeded and the execution has one.
    pub extension: Option<Box<ExtensionSummary>>,
}

/// When the agent container started and terminated and the image it ran, as its pod says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentContainer {
    /// When the agent started.
    pub started_at: Option<Time>,
    /// When it terminated.
    pub finished_at: Option<Time>,
    /// The image by digest, as the kubelet reports it (`imageID`), once the container exists.
    pub image_id: Option<String>,
}

impl From<Outcome> for Ending {
    fn from(outcome: Outcome) -> Self {
        Self {
            phase: outcome.phase,
            reason: outcome.reason,
            message: outcome.message,
            exit_code: None,
            summary: None,
            staged: Vec::new(),
            agent: None,
            extension: None,
        }
    }
}

impl Ending {
    fn failed(reason: Reason, message: String) -> Self {
        Outcome::failed(reason, message).into()
    }

    /// The ending with the agent's times and what staging saved from `pod`, if the run had one.
    fn on(self, pod: Option<&PodFacts>) -> Self {
        Self {
            agent: pod.map(|pod| {
                Box::new(AgentContainer {
                    started_at: pod.agent_started_at.clone(),
                    finished_at: pod.agent_finished_at.clone(),
                    image_id: pod.agent_image_id.clone(),
                })
            }),
            staged: pod.map(|pod| pod.staged.clone()).unwrap_or_default(),
            ..self
        }
    }

    /// The results saved so far: the runner's, else staging's, then the extension's.
    pub fn results(&self) -> Vec<ResultEntry> {
        let mut results = self
            .summary
            .as_ref()
            .map_or_else(|| self.staged.clone(), |s| s.results.clone());
        if let Some(step) = &self.extension {
            results.extend(step.results.iter().cloned());
        }
        results
    }
}

/// Where the run of `execution` stands given `facts`, and what to stop.
pub fn decide(execution: &AgentExecution, facts: &Facts) -> Decision {
    let phase = execution.status.as_ref().and_then(|s| s.phase);
    if phase.is_some_and(Phase::is_terminal) {
        return Decision::settled(match &facts.report {
            Some(_) => corrected_by_pod(execution, facts),
            None => Standing::Final,
        });
    }
    let Some(job) = &facts.job else {
        return Decision::settled(Standing::Ended(Ending::failed(
            Reason::JobDeleted,
            "the Job was deleted before the run ended; errand never starts a second one".into(),
        )));
    };
    let pod = facts.pod.as_ref();
    // The runner reported the end and the saved manifest backs it: no need to wait for the
    // kubelet to publish the pod's end. Only once the pod's status has shown the agent's start,
    // which the status takes its start time and image from (the kubelet shows a start sooner
    // than an end).
    if let (Some(pod), Some(report)) = (pod, &facts.report)
        && !pod.finished
        && !pod.node_lost()
        && pod.agent_started_at.is_some()
    {
        return Decision::settled(Standing::Ended(reported(execution, job, pod, report)));
    }
    match pod {
        Some(pod) if pod.finished => {
            Decision::settled(Standing::Ended(finished(execution, job, pod).on(Some(pod))))
        }
        // A lost node never reports the pod finished: its run is over once Kubernetes evicts it.
        Some(pod) if pod.node_lost() && !execution.spec.cancel => {
            let ending = stopped(job, pod, None).unwrap_or_else(|| {
                Ending::failed(Reason::NodeLost, "the pod's node was lost".into())
            });
            Decision::settled(Standing::Ended(ending.on(Some(pod))))
        }
        Some(pod) if pod.agent_started_at.is_some() => running(execution, pod, facts.now),
        Some(_) => pending(execution, job, pod, facts),
        None => match &job.failure {
            Some(failure) => {
                let ending = if execution.spec.cancel {
                    Ending::from(Outcome::cancelled_before_start())
                } else if deadline_passed(job) {
                    Ending::failed(
                        Reason::DeadlineExceeded,
                        format!("the Job's deadline passed: {}", failure.message),
                    )
                } else if failure.reason == contract::JOB_FAILED_BY_DISRUPTION {
                    Ending::failed(
                        Reason::PodEvicted,
                        format!(
                            "the pod was evicted (its DisruptionTarget condition failed the Job: \
                             {}) and was gone before errand saw how the run ended",
                            failure.message
                        ),
                    )
                } else if phase == Some(Phase::Running) {
                    // Otherwise only a deletion takes a Job's pod away before errand saw it end.
                    Ending::failed(
                        Reason::PodDeleted,
                        format!(
                            "the pod was deleted before errand saw how the run ended, and the Job \
                             failed ({}): {}",
                            failure.reason, failure.message
                        ),
                    )
                } else {
                    Ending::failed(
                        Reason::AgentFailed,
                        format!("the Job failed ({}): {}", failure.reason, failure.message),
                    )
                };
                Decision::settled(Standing::Ended(ending))
            }
            // A pod that ran is gone but the Job has not failed yet: wait for the Job
            // controller rather than step back to Starting.
            None if phase == Some(Phase::Running) => Decision::settled(Standing::Unchanged),
            None => pending(execution, job, None, facts),
        },
    }
}

/// How a run ended that its runner reported before its pod was seen finished: as the pod will
/// say if its agent container ends as the runner said it would, with the report's
/// termination summary, exit code and end time.
fn reported(
    execution: &AgentExecution,
    job: &JobFacts,
    pod: &PodFacts,
    report: &RunEndReport,
) -> Ending {
    let pod = PodFacts {
        finished: true,
        summary: Some(report.summary.clone()),
        agent_exit_code: Some(report.runner_exit_code),
        agent_finished_at: Some(Time(report.finished_at)),
        ..pod.clone()
    };
    finished(execution, job, &pod).on(Some(&pod))
}

/// A run that ended on its runner's report stays as it is, unless its pod, seen since, ended
/// otherwise: killed after the report (out of memory, say), or lost with its node before the
/// kubelet confirmed the end. Then the pod's end wins; once the status says what the pod says,
/// nothing changes any more.
fn corrected_by_pod(execution: &AgentExecution, facts: &Facts) -> Standing {
    let (Some(job), Some(pod)) = (&facts.job, &facts.pod) else {
        return Standing::Final;
    };
    let ending = if pod.finished {
        finished(execution, job, pod).on(Some(pod))
    } else if pod.node_lost() {
        let node = pod.node.as_deref().unwrap_or("its node");
        Ending::failed(
            Reason::NodeLost,
            format!(
                "node {node} was lost after errand's runner reported the run's end and before \
                 the kubelet confirmed how the agent's container ended; errand never starts a \
                 second pod"
            ),
        )
        .on(Some(pod))
    } else {
        return Standing::Final;
    };
    let status = execution.status.as_ref();
    let recorded = status.and_then(|s| {
        let type_ = match s.phase? {
            Phase::Succeeded => contract::ConditionType::Complete,
            _ => contract::ConditionType::Failed,
        };
        let reason = crate::resolve::conditions::get(&s.conditions, type_)?;
        Some((s.phase?, reason.reason.clone(), s.exit_code))
    });
    let pod_says = (
        ending.phase,
        ending.reason.as_str().to_owned(),
        ending.exit_code,
    );
    if recorded.as_ref() == Some(&pod_says) {
        Standing::Final
    } else {
        Standing::Ended(ending)
    }
}

/// Whether the Job's `activeDeadlineSeconds` ended it.
/// The deadline `errand deadline set` gave the run (`spec.deadline` with `inSeconds`, accepted
/// in `status.deadline`), if one replaces `timeoutSeconds`.
fn changed_deadline(execution: &AgentExecution) -> Option<Timestamp> {
    let asked = execution.spec.deadline.as_ref()?;
    asked.in_seconds?;
    let answered = execution.status.as_ref()?.deadline.as_ref()?;
    let accepted = answered.request == asked.request && answered.refused.is_none();
    accepted.then(|| answered.deadline.as_ref().map(|t| t.0))?
}

fn deadline_passed(job: &JobFacts) -> bool {
    job.failure
        .as_ref()
        .is_some_and(|f| f.reason == "DeadlineExceeded")
}

/// The agent is running: phase Running, or a graceful stop when cancelled.
fn running(execution: &AgentExecution, pod: &PodFacts, now: Timestamp) -> Decision {
    let starting = execution.status.as_ref().and_then(|s| s.phase) == Some(Phase::Starting);
    let shown_at = pod
        .agent_started_at
        .as_ref()
        .and_then(|started| started.0.checked_add(RUNNING_SHOWN_AFTER).ok());
    if let Some(left) = shown_at
        .filter(|_| starting && !execution.spec.cancel)
        .and_then(|at| Duration::try_from(now.duration_until(at)).ok())
        .filter(|left| !left.is_zero())
    {
        // Held: a run that ends before then goes from Starting to its end in one write.
        return Decision {
            standing: Standing::Unchanged,
            stop: None,
            recheck_after: Some(left),
        };
    }
    Decision {
        standing: Standing::Running {
            started_at: pod.agent_started_at.clone(),
            image_id: pod.agent_image_id.clone(),
        },
        // A kill reaches the runner through the pod's control annotation: deleting the pod
        // would give the agent its grace period.
        stop: (execution.spec.cancel && !execution.spec.kill && !pod.deleting)
            .then(|| Stop::DeletePod(pod.name.clone())),
        recheck_after: None,
    }
}

/// Nothing runs yet: Queued while Kueue holds the Job, then Starting until the start timeout
/// or a cancel ends it.
fn pending(
    execution: &AgentExecution,
    job: &JobFacts,
    pod: Option<&PodFacts>,
    facts: &Facts,
) -> Decision {
    let (warnings, now) = (&facts.warnings, facts.now);
    let queued = job.suspended && pod.is_none();
    if execution.spec.cancel {
        let when = if queued {
            "cancelled while queued in Kueue; no pod ran"
        } else {
            "cancelled before the agent started"
        };
        return Decision {
            standing: Standing::Ended(Ending::from(Outcome::cancelled(when)).on(pod)),
            stop: Some(Stop::DeleteJob),
            recheck_after: None,
        };
    }
    if queued {
        // Waiting for quota in Kueue is not a start failure: the start timeout counts from the
        // Job's start, which Kueue's admission (resuming the Job) sets.
        return Decision::settled(Standing::Queued {
            message: queued_message(job.queue.as_deref(), facts.workload.as_ref()),
        });
    }
    // A resuming Job not started yet (`started: None`) starts its timeout now.
    let since = pod.and_then(|p| p.created).or(job.started).unwrap_or(now);
    let limit = execution
        .spec
        .start_timeout_seconds
        .unwrap_or(DEFAULT_START_TIMEOUT_SECONDS);
    let waited = now.as_second() - since.as_second();
    if waited < limit {
        let remaining = u64::try_from(limit.saturating_sub(waited)).unwrap_or(0);
        return Decision {
            standing: Standing::Starting,
            stop: None,
            // A second past it, so that it has passed in whole seconds too.
            recheck_after: Some(Duration::from_secs(remaining.saturating_add(1))),
        };
    }
    Decision {
        standing: Standing::Ended(start_timeout(pod, warnings, limit).on(pod)),
        stop: Some(Stop::DeleteJob),
        recheck_after: None,
    }
}

/// Why a Job waits in Kueue's `queue` (its LocalQueue), from its `workload`: Kueue's reason
/// and message while it has not admitted the Job (no quota yet, an inadmissible Workload),
/// else what Kueue has done so far.
pub fn queued_message(queue: Option<&str>, workload: Option<&WorkloadFacts>) -> String {
    let queue = queue.map_or_else(
        || "Kueue".to_owned(),
        |queue| format!("Kueue LocalQueue {queue}"),
    );
    match workload {
        Some(WorkloadFacts {
            name,
            pending: Some(cause),
            ..
        }) => format!(
            "waiting in {queue} (Workload {name}: {}): {}",
            cause.reason, cause.message
        ),
        Some(workload) if workload.admitted => {
            format!(
                "admitted from {queue} (Workload {}); the Job resumes",
                workload.name
            )
        }
        Some(workload) => format!(
            "waiting in {queue} (Workload {}): Kueue has not considered it yet",
            workload.name
        ),
        None => format!("waiting in {queue}: Kueue has not created the Job's Workload yet"),
    }
}

/// Why the pod has not started after `limit` seconds, in the scheduler's, kubelet's or Job
/// controller's words: from its status first, then from the Warning events.
fn start_timeout(pod: Option<&PodFacts>, warnings: &[Warning], limit: i64) -> Ending {
    let after = format!("the pod did not start within {limit}s");
    let Some(pod) = pod else {
        // The Job controller's last word on why it could not create the pod (a missing
        // PriorityClass, a quota, a policy).
        let message = match warnings.last() {
            Some(w) => format!("{after}: no pod was created: {}: {}", w.reason, w.message),
            None => format!("{after}: no pod was created (see the Job's events)"),
        };
        return Ending::failed(Reason::StartTimeout, message);
    };
    let mut other = None;
    for waiting in &pod.waiting {
        let (container, why, message) = (&waiting.container, &waiting.reason, &waiting.message);
        if IMAGE_PULL_REASONS.contains(&why.as_str()) {
            return Ending::failed(
                Reason::ImagePullFailed,
                format!("{after}: container {container}: {why}: {message}"),
            );
        }
        if other.is_none() && !why.is_empty() && why != "PodInitializing" {
            other = Some(format!("{after}: container {container}: {why}: {message}"));
        }
    }
    if let Some(warning) = warnings.iter().find(|w| w.is_image_pull()) {
        let container = warning.container.as_deref().unwrap_or("?");
        return Ending::failed(
            Reason::ImagePullFailed,
            format!(
                "{after}: container {container}: {}: {}",
                warning.reason, warning.message
            ),
        );
    }
    if let Some(condition) = &pod.unschedulable {
        return Ending::failed(
            Reason::Unschedulable,
            format!("{after}: {}: {}", condition.reason, condition.message),
        );
    }
    let warned = warnings.last().map(|w| {
        let container = w.container.as_deref().unwrap_or("?");
        format!(
            "{after}: container {container}: {}: {}",
            w.reason, w.message
        )
    });
    Ending::failed(Reason::StartTimeout, other.or(warned).unwrap_or(after))
}

/// How a run ended that Kubernetes stopped under the agent, if it did: its pod evicted,
/// preempted, lost with its node or deleted, as the pod's `DisruptionTarget` condition, status
/// reason and deletion say. A runner that reported a run it ended itself (`summary`) was not
/// stopped, even if the pod was deleted afterwards.
fn stopped(job: &JobFacts, pod: &PodFacts, summary: Option<&TerminationSummary>) -> Option<Ending> {
    let stop_reported =
        summary.is_some_and(|s| matches!(s.state, RunState::Terminated | RunState::Cancelled));
    let deleted = summary.map_or(pod.deleting, |_| stop_reported);
    let when = if pod.agent_started_at.is_some() {
        "while the agent was running"
    } else if pod.stage_exit_code == Some(0) {
        "after staging, before the agent started"
    } else {
        "while the working directory was being staged"
    };
    let results = summary.map_or(pod.staged.as_slice(), |s| s.results.as_slice());
    let saved = if results.is_empty() {
        "no results were saved".to_owned()
    } else {
        let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
        format!("saved: {}", names.join(", "))
    };
    let (reason, what) = match &pod.disruption {
        Some(cause) if pod.node_lost() => {
            let node = pod.node.as_deref().unwrap_or("its node");
            (
                Reason::NodeLost,
                format!(
                    "node {node} stopped responding for longer than the pod tolerates, and the pod \
                     was evicted from it ({}: {}) {when}; errand never starts a second pod",
                    cause.reason, cause.message
                ),
            )
        }
        Some(cause) => (
            Reason::PodEvicted,
            format!(
                "the pod was evicted ({}: {}) {when}",
                cause.reason, cause.message
            ),
        ),
        None if pod.reason == "Evicted" => (
            Reason::PodEvicted,
            format!("the pod was evicted by its node ({}) {when}", pod.message),
        ),
        None if deleted && job.suspended => (
            Reason::PodEvicted,
            format!("the Job was suspended (Kueue preempted it) and its pod deleted {when}"),
        ),
        None if deleted => (
            Reason::PodDeleted,
            format!("the pod was deleted (not by errand) {when}"),
        ),
        None => return None,
    };
    Some(Ending::failed(reason, format!("{what}; {saved}")))
}

/// How a finished pod ended: as the runner reported it ([`run_outcome`]), unless the Job's
/// deadline ended it first, or a failure has a cause only the pod shows (Kubernetes stopped
/// it, the node refused it, its staging container failed).
fn finished(execution: &AgentExecution, job: &JobFacts, pod: &PodFacts) -> Ending {
    let summary = pod.summary.as_ref();
    let exit_code = summary.and_then(|s| s.exit_code).or(pod.agent_exit_code);
    let stderr = summary.map(|s| s.stderr_tail.as_str()).unwrap_or_default();
    let mut ending = if deadline_passed(job) {
        Ending::failed(
            Reason::DeadlineExceeded,
            "the Job's deadline passed (backstop behind the run's timeout)".into(),
        )
    } else {
        let outcome = run_outcome(&RunReport {
            state: summary.map(|s| s.state),
            exit_code,
            timed_out: summary.is_some_and(|s| s.timed_out),
            error: None,
            stderr_tail: stderr,
            results_error: summary.and_then(|s| s.results_error.as_deref()),
            results_saved: summary.map_or_else(
                || execution.status.as_ref().map_or(0, |s| s.results.len()),
                |s| s.results.len(),
            ),
            timeout_seconds: execution.spec.timeout_seconds,
            changed_deadline: changed_deadline(execution),
            cancel_requested: execution.spec.cancel,
        });
        let agent_side = outcome.phase == Phase::Failed
            && matches!(
                outcome.reason,
                Reason::AgentFailed | Reason::StageFailed | Reason::PodDeleted
            );
        let seen_on_pod = agent_side
            .then(|| {
                stopped(job, pod, summary)
                    .or_else(|| refused_by_node(pod))
                    .or_else(|| stage_container_failed(pod, stderr))
            })
            .flatten();
        seen_on_pod
            .or_else(|| killed_after_success(pod, summary))
            .unwrap_or_else(|| outcome.into())
    };
    ending.exit_code = exit_code;
    ending.summary = summary.cloned();
    // Only a pod of an execution with an extension has its container (a rerun's spec names
    // none: it comes with the snapshot).
    if ending.phase == Phase::Succeeded
        && let Some(ran) = &pod.extension
    {
        let kind = execution.spec.extension.as_ref().map(|e| e.kind.as_str());
        let step = extension_step(kind.unwrap_or_default(), ran);
        if let Some(outcome) = extension_outcome(&step) {
            ending.phase = outcome.phase;
            ending.reason = outcome.reason;
            ending.message = outcome.message;
        }
        ending.extension = Some(Box::new(step));
    }
    ending
}

/// How the extension's step of kind `kind` ended, as its container reported it; a container
/// that reported no step after the agent succeeded failed it.
fn extension_step(kind: &str, ran: &ExtensionFacts) -> ExtensionSummary {
    if let Some(step) = &ran.summary {
        return step.clone();
    }
    let said = ran.message.trim();
    ExtensionSummary {
        kind: kind.to_owned(),
        name: String::new(),
        state: RunState::Failed,
        exit_code: Some(ran.exit_code),
        failure: Some(if said.is_empty() {
            format!(
                "its container exited with code {} without reporting the step",
                ran.exit_code
            )
        } else {
            said.to_owned()
        }),
        stderr_tail: String::new(),
        results: Vec::new(),
    }
}

/// A pod whose agent container did not end as its runner said it would: the runner reported a
/// success with every result saved (it then exits 0), but the container ended otherwise, killed
/// after the report (out of memory, by a signal).
fn killed_after_success(pod: &PodFacts, summary: Option<&TerminationSummary>) -> Option<Ending> {
    let summary = summary?;
    let code = pod.agent_exit_code.filter(|code| *code != 0)?;
    if summary.state != RunState::Succeeded || summary.results_error.is_some() {
        return None;
    }
    let how = match pod.agent_terminated_reason.as_str() {
        "" => String::new(),
        reason => format!(" ({reason})"),
    };
    Some(Ending::failed(
        Reason::AgentFailed,
        format!(
            "the agent's container ended with exit code {code}{how} after errand's runner \
             reported the run succeeded with its results saved; the pod's end decides"
        ),
    ))
}

/// A pod the node refused to run (out of a resource, or an admission error).
fn refused_by_node(pod: &PodFacts) -> Option<Ending> {
    let pod_reason = pod.reason.as_str();
    (pod_reason.starts_with("OutOf") || pod_reason == "UnexpectedAdmissionError").then(|| {
        Ending::failed(
            Reason::Unschedulable,
            format!("the node refused the pod ({pod_reason}): {}", pod.message),
        )
    })
}

/// A pod whose staging container failed before the runner could report.
fn stage_container_failed(pod: &PodFacts, stderr: &str) -> Option<Ending> {
    pod.stage_exit_code.is_some_and(|code| code != 0).then(|| {
        let outcome = run_outcome(&RunReport {
            state: Some(RunState::StageFailed),
            stderr_tail: stderr,
            ..RunReport::default()
        });
        outcome.into()
    })
}
