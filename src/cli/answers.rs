//! The payloads of the command line's JSON answers, typed so that `errand schema` is generated from what the commands print.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Serialize;

use crate::api::FilesetStatus;
use crate::ops::Execution;
use crate::ops::excerpt::StreamOutput;

/// An execution as the commands show it: its record, the agent's output streams (sizes, and
/// excerpts in waiting answers), and how long a bounded wait looked at it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ExecutionView {
    /// The record.
    #[serde(flatten)]
    pub record: Execution,
    /// The agent's output streams: `stdout` and `stderr` locally, one `stdout+stderr` log on a
    /// cluster. `total_bytes` is null where the size cannot be known without reading the log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<StreamOutput>,
    /// How a bounded observation (`wait`, `execute --until`) went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
}

impl ExecutionView {
    /// The record alone.
    pub fn of(record: Execution) -> Self {
        Self {
            record,
            output: Vec::new(),
            observation: None,
        }
    }
}

/// How a bounded observation went. Reaching `until_seconds` never stops the run.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Observation {
    /// The longest it would look.
    pub until_seconds: f64,
    /// How long it looked.
    pub elapsed_seconds: f64,
    /// Whether the execution had ended when it returned (else the deadline came first).
    pub ended: bool,
}

/// `tail`: the last lines of one stream.
#[derive(Serialize, JsonSchema)]
pub struct Logs {
    /// The execution.
    pub execution: String,
    /// `stdout`, `stderr`, or `stdout+stderr` where they reach one log.
    pub stream: &'static str,
    /// The lines, oldest first.
    pub lines: Vec<String>,
}

/// `results download`: what was written where.
#[derive(Serialize, JsonSchema)]
pub struct Downloaded {
    /// The execution.
    pub execution: String,
    /// The result.
    pub result: String,
    /// The file written.
    pub file: PathBuf,
    /// Its size in bytes.
    pub size: u64,
}

/// `delete` of an execution.
#[derive(Serialize, JsonSchema)]
pub struct Deleted {
    /// The execution.
    pub execution: String,
    /// How many stored results were removed, when the backend knows.
    pub results_removed: Option<usize>,
}

/// `kill`: what a signal did.
#[derive(Serialize, JsonSchema)]
pub struct Killed {
    /// The execution.
    pub execution: String,
    /// The signal sent (`SIGTERM`, `SIGKILL`, `SIGUSR1`, ...).
    pub signal: String,
    /// `cancel` (TERM: stopped with the grace period, results saved), `cancel_without_grace`
    /// (KILL), or `process_group` (any other signal, sent to the agent's process group; the run
    /// goes on).
    pub effect: &'static str,
    /// The execution's phase afterwards.
    pub phase: crate::api::Phase,
}

/// `delete --all`: the finished executions removed (or, with `--dry-run`, that would be).
#[derive(Serialize, JsonSchema)]
pub struct DeletedAll {
    /// Whether nothing was removed (`--dry-run`).
    pub dry_run: bool,
    /// Each finished execution, with how it ended.
    pub executions: Vec<DeletedExecution>,
    /// The executions that have not ended, which `--all` never removes.
    pub kept_running: Vec<String>,
}

/// One execution `delete --all` removed or would remove.
#[derive(Serialize, JsonSchema)]
pub struct DeletedExecution {
    /// The execution.
    pub execution: String,
    /// How it ended: `Succeeded`, `Failed` or `Cancelled`.
    pub phase: crate::api::Phase,
    /// How many stored results were removed, when the backend knows (none in a dry run).
    pub results_removed: Option<usize>,
}

/// `delete` of an Agent, AgentEnvironment, AgentRuntime or Fileset.
#[derive(Serialize, JsonSchema)]
pub struct DeletedObject {
    /// Its kind.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
}

/// `filesets push`: the Fileset's new content.
#[derive(Serialize, JsonSchema)]
pub struct PushedFilesetAnswer {
    /// The Fileset.
    pub name: String,
    /// Its new content: digest, size, file count, push time.
    pub status: FilesetStatus,
}

/// `gc --no-automatic` without limits: the automatic gc is off.
#[derive(Serialize, JsonSchema)]
pub struct AutomaticGcOff {
    /// Always false.
    pub automatic: bool,
}
