//! How a run ended, decided once for every backend: the runner's report of a run becomes its terminal phase, typed reason and message, and a terminal status reads back as the same outcome.
//!
//! The controller (from a pod's termination message), the local supervisor (from the
//! runner's summary) and the command line (from an execution's status) all go through here,
//! so one run state reads the same, message included, whichever backend ran it. Pure: no I/O.

use super::RunState;
use crate::api::contract::{ConditionType, Reason};
use crate::api::{AgentExecutionStatus, Phase};

/// How a run ended: its terminal phase, the reason its condition (or record) carries, and what
/// happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// `Succeeded`, `Failed` or `Cancelled`.
    pub phase: Phase,
    /// The reason of condition `Complete` (on success) or `Failed`.
    pub reason: Reason,
    /// What happened, unbounded.
    pub message: String,
}

impl Outcome {
    /// A failure for `reason`.
    pub fn failed(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            phase: Phase::Failed,
            reason,
            message: message.into(),
        }
    }

    /// A cancellation, `message` saying when it happened.
    pub fn cancelled(message: impl Into<String>) -> Self {
        Self {
            phase: Phase::Cancelled,
            reason: Reason::Cancelled,
            message: message.into(),
        }
    }

    /// A run cancelled before its agent started.
    pub fn cancelled_before_start() -> Self {
        Self::cancelled("cancelled before the agent started")
    }

    /// How the status of an execution says its run ended: `None` while it has not ended, or
    /// when its condition carries a reason errand does not write.
    pub fn of_status(status: &AgentExecutionStatus) -> Option<Self> {
        let phase = status.phase.filter(|p| p.is_terminal())?;
        let type_ = match phase {
            Phase::Succeeded => ConditionType::Complete,
            _ => ConditionType::Failed,
        };
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == type_.as_str() && c.status == "True")?;
        Some(Self {
            phase,
            reason: Reason::parse(&condition.reason)?,
            message: status.message.clone().unwrap_or_default(),
        })
    }
}

/// How an execution ends when its agent succeeded and its extension's step did not: `Failed`
/// with reason `ExtensionFailed` (the user asked for the run and its extension, and did not get
/// both; the agent's results stay), or `Cancelled` when a stop ended the step. `None` when the
/// step succeeded: the agent's outcome stands.
pub fn extension_outcome(step: &super::ExtensionSummary) -> Option<Outcome> {
    if step.succeeded() {
        return None;
    }
    if matches!(step.state, RunState::Cancelled | RunState::Terminated) {
        return Some(Outcome::cancelled(
            "cancelled while the extension ran, after the agent succeeded",
        ));
    }
    let tail = step.stderr_tail.trim();
    let mut message = format!(
        "extension {:?} (AgentExtension {:?}) failed after the agent succeeded: {}",
        step.kind,
        step.name,
        step.failure.as_deref().unwrap_or("failed")
    );
    if !tail.is_empty() {
        message = format!("{message}; stderr: {tail}");
    }
    Some(Outcome::failed(Reason::ExtensionFailed, message))
}

/// What the runner reported about a run that ended, as either backend learns it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunReport<'a> {
    /// How the runner says the run ended; `None` when it reported nothing (a pod whose
    /// termination message is missing), so only the agent's exit code is known.
    pub state: Option<RunState>,
    /// The agent's exit code.
    pub exit_code: Option<i32>,
    /// Whether the run's deadline passed.
    pub timed_out: bool,
    /// Why the run did not complete, when the runner said (a staging or start error).
    pub error: Option<&'a str>,
    /// The end of the agent's stderr.
    pub stderr_tail: &'a str,
    /// Why some results could not be saved, if any could not.
    pub results_error: Option<&'a str>,
    /// How many results were saved.
    pub results_saved: usize,
    /// The run's `timeoutSeconds`.
    pub timeout_seconds: i64,
    /// The deadline `errand deadline set` gave the run in place of `timeoutSeconds`, if any:
    /// the one that passed when it timed out.
    pub changed_deadline: Option<jiff::Timestamp>,
    /// Whether a cancel was requested before the run ended.
    pub cancel_requested: bool,
}

/// How a run the runner reported on ended. A success whose results could not all be saved is
/// a failure: the Succeeded phase promises saved results. A run stopped under the agent is
/// reported by the runner as [`RunState::Terminated`] and reads as `PodDeleted` here; the
/// controller, which sees the pod, says more precisely what stopped it.
pub fn run_outcome(report: &RunReport<'_>) -> Outcome {
    let state = report.state.unwrap_or(match report.exit_code {
        Some(0) => RunState::Succeeded,
        _ => RunState::Failed,
    });
    let tail = report.stderr_tail;
    let because = |what: &str| match report.error {
        Some(error) if !error.is_empty() => format!("{what}: {error}"),
        _ => what.to_owned(),
    };
    let outcome = if report.timed_out || state == RunState::TimedOut {
        Outcome::failed(
            Reason::DeadlineExceeded,
            match report.changed_deadline {
                Some(at) => format!(
                    "the agent ran past the deadline set with `errand deadline set` ({at}) and was stopped"
                ),
                None => format!(
                    "the agent ran past timeoutSeconds ({}s) and was stopped",
                    report.timeout_seconds
                ),
            },
        )
    } else if state == RunState::Cancelled
        || (report.cancel_requested && state != RunState::Succeeded)
    {
        // The runner says when a cancel stopped a run before its agent ran.
        match report.error {
            Some(error) if state == RunState::Cancelled && !error.is_empty() => {
                Outcome::cancelled(error)
            }
            _ => Outcome::cancelled("cancelled while running; partial results saved"),
        }
    } else {
        match state {
            RunState::Succeeded => Outcome {
                phase: Phase::Succeeded,
                reason: Reason::Succeeded,
                message: format!("the agent exited 0; {} results saved", report.results_saved),
            },
            RunState::Terminated => Outcome::failed(
                Reason::PodDeleted,
                "the runner was stopped (SIGTERM) before the run ended",
            ),
            RunState::StageFailed => Outcome::failed(
                Reason::StageFailed,
                with_tail(&because("staging the working directory failed"), tail),
            ),
            RunState::StartFailed => Outcome::failed(
                Reason::AgentFailed,
                with_tail(&because("the agent's command could not be started"), tail),
            ),
            RunState::Failed | RunState::TimedOut | RunState::Cancelled => {
                let code = report.exit_code.map_or_else(
                    || "without an exit code".to_owned(),
                    |c| format!("with exit code {c}"),
                );
                Outcome::failed(
                    Reason::AgentFailed,
                    with_tail(&format!("the agent failed {code}"), tail),
                )
            }
        }
    };
    match report.results_error {
        Some(error) if outcome.phase == Phase::Succeeded => {
            Outcome::failed(Reason::ResultsUploadFailed, results_not_saved(error))
        }
        _ => outcome,
    }
}

/// The message of a run some of whose results could not be saved.
pub fn results_not_saved(error: &str) -> String {
    format!("some results could not be saved: {error}")
}

/// Longest status message; a failure's stderr tail is cut from its start to fit.
pub const MESSAGE_LIMIT: usize = 1536;

/// `what`, followed by the tail of the agent's stderr if there is one, bounded.
pub fn with_tail(what: &str, stderr: &str) -> String {
    let stderr = stderr.trim_end();
    if stderr.is_empty() {
        return what.to_owned();
    }
    bounded(&format!("{what}; stderr tail:\n{stderr}"))
}

/// `message` cut to [`MESSAGE_LIMIT`] bytes, keeping its start (what happened) and its end
/// (the last lines of stderr).
pub fn bounded(message: &str) -> String {
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;

    fn report(state: RunState) -> RunReport<'static> {
        RunReport {
            state: Some(state),
            exit_code: Some(0),
            results_saved: 5,
            timeout_seconds: 30,
            ..RunReport::default()
        }
    }

    #[test]
    fn each_way_a_run_ends_has_one_phase_reason_and_message() {
        let failed = RunReport {
            exit_code: Some(3),
            stderr_tail: "boom\n",
            ..report(RunState::Failed)
        };
        let cases = [
            (
                report(RunState::Succeeded),
                Phase::Succeeded,
                Reason::Succeeded,
                "the agent exited 0; 5 results saved",
            ),
            (
                failed.clone(),
                Phase::Failed,
                Reason::AgentFailed,
                "the agent failed with exit code 3; stderr tail:\nboom",
            ),
            (
                RunReport {
                    state: None,
                    exit_code: None,
                    ..report(RunState::Failed)
                },
                Phase::Failed,
                Reason::AgentFailed,
                "the agent failed without an exit code",
            ),
            (
                RunReport {
                    timed_out: true,
                    ..failed.clone()
                },
                Phase::Failed,
                Reason::DeadlineExceeded,
                "the agent ran past timeoutSeconds (30s) and was stopped",
            ),
            (
                RunReport {
                    timed_out: true,
                    changed_deadline: Some("2026-12-02T03:00:03Z".parse().unwrap()),
                    ..failed.clone()
                },
                Phase::Failed,
                Reason::DeadlineExceeded,
                "the agent ran past the deadline set with `errand deadline set` (2026-12-02T03:00:03Z) and was stopped",
            ),
            (
                report(RunState::Cancelled),
                Phase::Cancelled,
                Reason::Cancelled,
                "cancelled while running; partial results saved",
            ),
            (
                RunReport {
                    cancel_requested: true,
                    ..failed.clone()
                },
                Phase::Cancelled,
                Reason::Cancelled,
                "cancelled while running; partial results saved",
            ),
            (
                RunReport {
                    error: Some("Fileset \"docs\": not found"),
                    ..report(RunState::StageFailed)
                },
                Phase::Failed,
                Reason::StageFailed,
                "staging the working directory failed: Fileset \"docs\": not found",
            ),
            (
                RunReport {
                    error: Some("No such file or directory"),
                    ..report(RunState::StartFailed)
                },
                Phase::Failed,
                Reason::AgentFailed,
                "the agent's command could not be started: No such file or directory",
            ),
            (
                report(RunState::Terminated),
                Phase::Failed,
                Reason::PodDeleted,
                "the runner was stopped (SIGTERM) before the run ended",
            ),
            (
                RunReport {
                    results_error: Some("disk full"),
                    ..report(RunState::Succeeded)
                },
                Phase::Failed,
                Reason::ResultsUploadFailed,
                "some results could not be saved: disk full",
            ),
        ];
        for (report, phase, reason, message) in cases {
            let outcome = run_outcome(&report);
            assert_eq!(
                outcome,
                Outcome {
                    phase,
                    reason,
                    message: message.to_owned()
                },
                "{report:?}"
            );
        }
    }

    #[test]
    fn a_success_with_a_cancel_requested_too_late_stays_a_success() {
        let outcome = run_outcome(&RunReport {
            cancel_requested: true,
            ..report(RunState::Succeeded)
        });
        assert_eq!(outcome.phase, Phase::Succeeded);
    }

    #[test]
    fn a_terminal_status_reads_back_as_the_outcome_it_was_written_from() {
        let condition = |type_: ConditionType, reason: Reason| Condition {
            type_: type_.as_str().to_owned(),
            status: "True".to_owned(),
            reason: reason.as_str().to_owned(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        };
        let status = |phase: Phase, conditions: Vec<Condition>| AgentExecutionStatus {
            phase: Some(phase),
            message: Some("what happened".into()),
            conditions,
            ..AgentExecutionStatus::default()
        };
        let cancelled = status(
            Phase::Cancelled,
            vec![condition(ConditionType::Failed, Reason::Cancelled)],
        );
        assert_eq!(
            Outcome::of_status(&cancelled),
            Some(Outcome::cancelled("what happened"))
        );
        let succeeded = status(
            Phase::Succeeded,
            vec![
                condition(ConditionType::Started, Reason::AgentStarted),
                condition(ConditionType::Complete, Reason::Succeeded),
            ],
        );
        assert_eq!(
            Outcome::of_status(&succeeded).map(|o| o.reason),
            Some(Reason::Succeeded)
        );
        let running = status(Phase::Running, Vec::new());
        assert_eq!(Outcome::of_status(&running), None);
        for reason in Reason::ALL {
            assert_eq!(Reason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(Reason::parse("Whatever"), None);
    }

    #[test]
    fn a_failed_extension_fails_the_execution_and_a_stopped_one_cancels_it() {
        let step = |state: RunState, failure: Option<&str>| super::super::ExtensionSummary {
            kind: "analysis".into(),
            name: "analysis".into(),
            state,
            exit_code: Some(3),
            failure: failure.map(str::to_owned),
            stderr_tail: "cannot analyse\n".into(),
            results: Vec::new(),
        };
        assert_eq!(extension_outcome(&step(RunState::Succeeded, None)), None);
        let failed =
            extension_outcome(&step(RunState::Failed, Some("exited with code 3"))).unwrap();
        assert_eq!(failed.phase, Phase::Failed);
        assert_eq!(failed.reason, Reason::ExtensionFailed);
        assert_eq!(
            failed.message,
            "extension \"analysis\" (AgentExtension \"analysis\") failed after the agent \
             succeeded: exited with code 3; stderr: cannot analyse"
        );
        // A step that exited 0 but left a declared result unwritten failed too.
        let unwritten = step(
            RunState::Succeeded,
            Some("results: analysis-report: not written"),
        );
        assert_eq!(
            extension_outcome(&unwritten).unwrap().reason,
            Reason::ExtensionFailed
        );
        let stopped = extension_outcome(&step(RunState::Cancelled, Some("stopped"))).unwrap();
        assert_eq!(stopped.phase, Phase::Cancelled);
    }
}
