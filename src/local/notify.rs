//! Completion and output-match notifications of local runs: the sinks an execution names (a command fed the event on stdin, an NDJSON file), events built from records and sent as the CloudEvent a cluster's webhook gets, best-effort delivery whose results are kept with the event.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::api::{CloudEvent, ExecutionEvent};

pub use crate::api::{EXECUTION_FINISHED, OUTPUT_MATCHED};
/// How long a notify command may take before it is killed (its delivery then failed).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// Where an execution's notifications go, and which output lines notify.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NotifySettings {
    /// A shell command run per event (`sh -c`), the CloudEvent JSON on its standard input and
    /// `ERRAND_EVENT_*` variables in its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// A file each event is appended to as one CloudEvent JSON line (NDJSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// Output lines that notify (delivered to the same sinks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_matches: Vec<OutputMatch>,
    /// The URL a cluster's controller POSTs the run's end to (`spec.notify.webhook`; cluster
    /// executions only, and never stored in a local record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
}

impl NotifySettings {
    /// Whether any sink is set.
    pub fn armed(&self) -> bool {
        self.command.is_some() || self.file.is_some() || self.webhook.is_some()
    }
}

/// Lines of the agent's output that notify once they appear after the watch was set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutputMatch {
    /// A substring, or a regular expression with `regex`.
    pub pattern: String,
    /// Whether `pattern` is a regular expression.
    #[serde(default)]
    pub regex: bool,
    /// `stdout`, `stderr` or `both`.
    pub stream: String,
    /// The size of stdout when the watch was set: earlier lines never match.
    pub stdout_from: u64,
    /// The size of stderr when the watch was set.
    pub stderr_from: u64,
}

impl OutputMatch {
    /// Whether `line` matches.
    pub fn matches(&self, line: &str) -> bool {
        if self.regex {
            regex::Regex::new(&self.pattern).is_ok_and(|r| r.is_match(line))
        } else {
            line.contains(&self.pattern)
        }
    }
}

/// One event and how its delivery went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NotificationEvent {
    /// What happened: the same fields on every backend.
    #[serde(flatten)]
    pub event: ExecutionEvent,
    /// One entry per sink, filled once delivery was tried.
    #[serde(default)]
    pub deliveries: Vec<Delivery>,
}

/// How delivery to one sink went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Delivery {
    /// `command` or `file`.
    pub sink: String,
    /// Whether it was delivered (the command exited 0, the line was written).
    pub ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl NotificationEvent {
    /// The event as sinks get it: one line, the CloudEvent 1.0 (structured mode, JSON) a
    /// cluster's webhook gets, without the delivery results.
    fn line(&self) -> String {
        String::from_utf8(CloudEvent::of(self.event.clone()).body()).expect("JSON is UTF-8")
    }
}

/// Delivers `event` to every sink of `settings`, best effort, and records how each went.
pub async fn deliver(settings: &NotifySettings, event: &mut NotificationEvent) {
    let line = event.line();
    if let Some(command) = &settings.command {
        let result = run_command(command, &event.event, &line).await;
        event.deliveries.push(Delivery {
            sink: "command".into(),
            ok: result.is_ok(),
            error: result.err(),
        });
    }
    if let Some(file) = &settings.file {
        let result = append_line(file, &line).map_err(|e| format!("{}: {e}", file.display()));
        event.deliveries.push(Delivery {
            sink: "file".into(),
            ok: result.is_ok(),
            error: result.err(),
        });
    }
}

async fn run_command(command: &str, event: &ExecutionEvent, line: &str) -> Result<(), String> {
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", command])
        .env("ERRAND_EVENT_TYPE", &event.kind)
        .env("ERRAND_EVENT_EXECUTION", &event.execution)
        .env("ERRAND_EVENT_NAMESPACE", &event.namespace)
        .env("ERRAND_EVENT_UID", &event.uid)
        .env("ERRAND_EVENT_PHASE", format!("{:?}", event.phase))
        .env(
            "ERRAND_EVENT_REASON",
            event.reason.clone().unwrap_or_default(),
        )
        .env(
            "ERRAND_EVENT_EXIT_CODE",
            event.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start sh: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its input still counts as delivered when it exits 0.
        let _ = stdin.write_all(format!("{line}\n").as_bytes()).await;
    }
    match tokio::time::timeout(COMMAND_TIMEOUT, child.wait()).await {
        Err(_) => Err(format!(
            "the command did not exit within {}s and was killed",
            COMMAND_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Err(format!("waiting for the command: {e}")),
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(format!("the command failed: {status}")),
    }
}

fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(format!("{line}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_match_substrings_or_regular_expressions() {
        let watch = |pattern: &str, regex| OutputMatch {
            pattern: pattern.into(),
            regex,
            stream: "both".into(),
            stdout_from: 0,
            stderr_from: 0,
        };
        assert!(watch("error", false).matches("an error here"));
        assert!(!watch("e.ror", false).matches("an error here"));
        assert!(watch("^an e.ror", true).matches("an error here"));
        assert!(
            !watch("(", true).matches("("),
            "an invalid expression matches nothing"
        );
    }
}
