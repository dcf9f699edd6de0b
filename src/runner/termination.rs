//! The short JSON summary errand's runner writes to its container's termination message, which the controller copies into the status.

use serde::{Deserialize, Serialize};

use crate::api::ResultEntry;
use crate::runner::{RunState, RunSummary};

/// Kubernetes keeps at most this many bytes of a container's termination message.
pub const TERMINATION_MESSAGE_LIMIT: usize = 4096;

/// The termination-message summary: plain serde, shared by the runner (writer) and the
/// controller (reader).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminationSummary {
    /// How the run ended.
    pub state: RunState,
    /// The agent's exit code (128 + signal number when killed by a signal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Whether the run's deadline passed.
    #[serde(default)]
    pub timed_out: bool,
    /// The end of the agent's stderr.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
    /// The results saved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ResultEntry>,
    /// Why some results could not be saved, if any could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results_error: Option<String>,
    /// The GPUs the agent's container was given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_devices: Vec<String>,
}

impl TerminationSummary {
    /// The summary of a finished run, as the runner writes it to the termination message.
    pub fn from_run(run: &RunSummary) -> Self {
        Self {
            state: run.state,
            exit_code: run.exit_code,
            timed_out: run.timed_out,
            stderr_tail: run.stderr_tail.clone(),
            results: run.results.clone(),
            results_error: run.results_error.clone(),
            gpu_devices: run.gpu_devices.clone(),
        }
    }

    /// The summary in a termination message, if the message is one.
    pub fn parse(message: &str) -> Option<Self> {
        serde_json::from_str(message.trim()).ok()
    }

    /// The summary as JSON that fits [`TERMINATION_MESSAGE_LIMIT`]: the stderr tail is
    /// shortened from its start, since its end says why the agent failed.
    pub fn to_termination_message(&self) -> String {
        let mut summary = self.clone();
        fitted_json(&mut summary, |s| &mut s.stderr_tail)
    }
}

/// `summary` as JSON that fits [`TERMINATION_MESSAGE_LIMIT`], its stderr tail (`tail`)
/// shortened from its start as far as needed, since its end says why a process failed.
pub fn fitted_json<T: Serialize>(summary: &mut T, tail: impl Fn(&mut T) -> &mut String) -> String {
    loop {
        let json = serde_json::to_string(summary).expect("a summary always serializes");
        let stderr = tail(summary);
        if json.len() <= TERMINATION_MESSAGE_LIMIT || stderr.is_empty() {
            return json;
        }
        let excess = json.len() - TERMINATION_MESSAGE_LIMIT;
        let mut cut = excess.min(stderr.len());
        while !stderr.is_char_boundary(cut) {
            cut += 1;
        }
        stderr.drain(..cut);
    }
}

/// What `errand stage` writes to its termination message when staging succeeded: the results it
/// saved. The agent's runner lists them again in its own summary; this one is what still shows
/// them when the pod ends before that runner reports (deleted, or its node lost).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedSummary {
    /// The results staging saved (`input_workdir`).
    pub staged: Vec<ResultEntry>,
}

impl StagedSummary {
    /// The summary in a termination message, if the message is one.
    pub fn parse(message: &str) -> Option<Self> {
        serde_json::from_str(message.trim()).ok()
    }

    /// The summary as the termination message.
    pub fn to_termination_message(&self) -> String {
        serde_json::to_string(self).expect("a summary always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(stderr: &str) -> TerminationSummary {
        TerminationSummary {
            state: RunState::Failed,
            exit_code: Some(3),
            timed_out: false,
            stderr_tail: stderr.to_owned(),
            results: vec![ResultEntry {
                name: "output_artifacts".into(),
                size: 120,
                sha256: "c".repeat(64),
            }],
            results_error: None,
            gpu_devices: Vec::new(),
        }
    }

    #[test]
    fn a_run_summary_becomes_a_termination_summary() {
        let run = RunSummary {
            state: RunState::TimedOut,
            exit_code: Some(143),
            timed_out: true,
            error: Some("deadline".into()),
            response: Some("a long response that stays out of the termination message".into()),
            started_at: None,
            finished_at: None,
            duration_ms: Some(1000),
            stderr_tail: "killed".into(),
            results: vec![ResultEntry {
                name: crate::store::keys::ResultName::Manifest.as_str().into(),
                size: 10,
                sha256: "e".repeat(64),
            }],
            results_error: None,
            skipped: Vec::new(),
            gpu_devices: vec!["GPU-1".into()],
        };
        let summary = TerminationSummary::from_run(&run);
        assert_eq!(summary.state, RunState::TimedOut);
        assert_eq!(summary.gpu_devices, ["GPU-1"]);
        assert!(summary.timed_out);
        assert_eq!(summary.results[0].name, "manifest.json");
        let message = summary.to_termination_message();
        assert!(!message.contains("long response"));
        assert_eq!(TerminationSummary::parse(&message), Some(summary));
    }

    #[test]
    fn a_staged_summary_is_not_a_run_summary_nor_the_other_way_round() {
        let staged = StagedSummary {
            staged: summary("").results,
        };
        let message = staged.to_termination_message();
        assert_eq!(StagedSummary::parse(&message), Some(staged));
        assert_eq!(TerminationSummary::parse(&message), None);
        assert_eq!(
            StagedSummary::parse(&summary("boom").to_termination_message()),
            None
        );
    }

    #[test]
    fn the_runner_format_parses() {
        let message = r#"{"state":"TimedOut","exit_code":143,"timed_out":true,
            "stderr_tail":"killed","results":[{"name":"run_error","size":88,"sha256":"ab"}],
            "response":"ignored extra field"}"#;
        let parsed = TerminationSummary::parse(message).unwrap();
        assert_eq!(parsed.state, RunState::TimedOut);
        assert_eq!(parsed.exit_code, Some(143));
        assert!(parsed.timed_out);
        assert_eq!(parsed.results[0].name, "run_error");
        assert_eq!(TerminationSummary::parse("Error: boom"), None);
    }

    #[test]
    fn a_long_stderr_is_cut_from_its_start_to_fit_the_termination_message() {
        let stderr = format!("{}THE END", "é".repeat(5000));
        let message = summary(&stderr).to_termination_message();
        assert!(
            message.len() <= TERMINATION_MESSAGE_LIMIT,
            "{}",
            message.len()
        );
        let parsed = TerminationSummary::parse(&message).unwrap();
        assert!(parsed.stderr_tail.ends_with("THE END"));
        assert_eq!(parsed.results.len(), 1);
        let short = summary("boom").to_termination_message();
        assert_eq!(TerminationSummary::parse(&short).unwrap(), summary("boom"));
    }
}
