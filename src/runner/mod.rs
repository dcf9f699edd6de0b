//! The runner: stage a working directory, run the agent once under a deadline, and collect its
//! results — the same code for local runs and inside pods.
//!
//! Locally, [`execute`] does everything in one process. In a pod the init container calls
//! [`stage`] (or [`stage_failed`] when staging fails or is stopped) and the main container
//! calls [`run_and_collect`] with the [`ResultEntry`] that staging produced.

mod collect;
pub mod control;
pub mod end_report;
pub mod extension;
pub mod extension_pod;
pub mod outcome;
pub mod plan;
pub mod pod;
mod run;
mod send_end_report;
pub mod signals;
mod stage;
pub mod termination;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use collect::{ResultsManifest, SkippedResultEntry, fail_before_run};
pub use extension::{ExtensionSummary, run_extension};
pub use run::group_running;
pub use stage::{DEFAULT_STAGING_BUDGET, StageSettings, stage};

use crate::api::ResultEntry;
use crate::store::keys::{ExecutionId, ResultName};
use crate::store::{BlobSource, ResultSink, StoreError, StoredObject};
use crate::telemetry::ExecutionTelemetry;

/// What went wrong staging or saving results.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// A blob could not be fetched.
    #[error("fetching Fileset {fileset:?} ({key}): {source}")]
    Fetch {
        /// The Fileset.
        fileset: String,
        /// The blob's key.
        key: String,
        /// The underlying error.
        #[source]
        source: StoreError,
    },
    /// Extracting or packing failed.
    #[error(transparent)]
    Archive(#[from] crate::archive::ArchiveError),
    /// A result could not be saved.
    #[error("saving result {result}: {source}")]
    Save {
        /// Which result.
        result: ResultName,
        /// The underlying error.
        #[source]
        source: StoreError,
    },
    /// A file or directory the run needs could not be prepared.
    #[error("preparing {path}: {source}")]
    Prepare {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A blob's bytes do not hash to the digest its Fileset was pinned at.
    #[error(
        "Fileset {fileset:?}: the stored content has sha256:{actual}, not the pinned sha256:{expected}; it was changed after it was pushed"
    )]
    DigestMismatch {
        /// The Fileset.
        fileset: String,
        /// The pinned digest (hex).
        expected: String,
        /// The digest of the bytes read (hex).
        actual: String,
    },
    /// Staging was cancelled.
    #[error("cancelled while staging the working directory")]
    Cancelled,
    /// Staging ran out of its budget.
    #[error("staging did not finish within its budget of {seconds}s ({detail})")]
    StagingBudget {
        /// The budget.
        seconds: u64,
        /// How far it got.
        detail: String,
    },
    /// Staging was stopped by its token (reported as [`RunnerError::Cancelled`] or
    /// [`RunnerError::StagingBudget`]).
    #[error("staging was stopped")]
    Stopped,
    /// A background task panicked or was cancelled.
    #[error("runner task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A blob to extract: a store key and optionally one directory (or file) inside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    /// The Fileset the blob holds, for messages.
    pub fileset: String,
    /// Store key of the `tar.gz` blob.
    pub key: String,
    /// The pinned sha256 of the blob (hex), checked as it streams.
    pub sha256: String,
    /// Only this path inside the archive, re-rooted (`docs/` or `config/app.json`).
    pub subpath: Option<String>,
}

impl BlobRef {
    /// How errors name the blob: by its Fileset, not its store key.
    pub fn label(&self) -> String {
        format!("Fileset {:?}", self.fileset)
    }
}

/// A blob extracted at a path inside the working directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountRef {
    /// What to extract.
    pub blob: BlobRef,
    /// Where, relative to the working directory.
    pub mount_path: String,
}

/// What goes into the working directory before the agent starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagePlan {
    /// Extracted first, at the root of the working directory.
    pub base: Option<BlobRef>,
    /// Extracted after the base, in order; their files replace the base's.
    pub mounts: Vec<MountRef>,
}

/// The scratch directory of one run: input, response, logs and artifacts, kept outside the
/// working directory so they do not end up in `output_workdir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScratchDir {
    root: PathBuf,
}

impl ScratchDir {
    /// The scratch directory at `root`.
    pub fn new(root: impl Into<PathBuf>) -> ScratchDir {
        ScratchDir { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `ERRAND_ARTIFACTS_DIR`.
    pub fn artifacts_dir(&self) -> PathBuf {
        self.root.join("artifacts")
    }

    /// The agent's captured standard output.
    pub fn stdout_log(&self) -> PathBuf {
        self.root.join("stdout.log")
    }

    /// The agent's captured standard error.
    pub fn stderr_log(&self) -> PathBuf {
        self.root.join("stderr.log")
    }

    /// `ERRAND_INPUT_FILE`.
    pub fn input_file(&self) -> PathBuf {
        self.root.join("input.txt")
    }

    /// `ERRAND_RESPONSE_FILE`.
    pub fn response_file(&self) -> PathBuf {
        self.root.join("response.txt")
    }

    /// The id of the agent's process group, written when it starts: what a local restart
    /// checks is empty before it runs the agent again.
    pub fn agent_group_file(&self) -> PathBuf {
        self.root.join("agent.pgid")
    }
}

/// One agent run.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The execution the results belong to.
    pub execution: ExecutionId,
    /// The agent command and its arguments.
    pub command: Vec<String>,
    /// The input text.
    pub input: String,
    /// Path of the agent configuration file (`AGENT_CONFIG_PATH`).
    pub agent_config_path: PathBuf,
    /// Extra environment (bound secrets, configuration), on top of the runner's own
    /// environment; the variables the runner sets (see [`crate::api::contract`]) always carry
    /// the runner's values.
    pub env: Vec<(String, String)>,
    /// How long the agent may run, unless `control` moves its deadline.
    pub timeout: Duration,
    /// The file that may change the run while it goes (its deadline, a kill, signals); none:
    /// nothing changes it.
    pub control: Option<control::ControlFile>,
    /// Time between SIGTERM and SIGKILL when the deadline passes or the run is cancelled.
    pub grace: Duration,
    /// The working directory the agent runs in.
    pub workdir: PathBuf,
    /// Input, response, logs and artifacts.
    pub scratch: ScratchDir,
    /// A file that is the agent's standard input (`execute --stdin` locally); else it reads
    /// nothing (`/dev/null`).
    pub stdin: Option<PathBuf>,
    /// Copy the agent's stdout and stderr to ours as well as to the logs.
    pub passthrough: bool,
    /// What a stop signal means here.
    pub stop: StopRequest,
    /// Whether the agent starts with the runner's own environment beneath `env`: in a pod,
    /// what Kubernetes gave the container (its image's `PATH`, the bound secrets). Locally the
    /// runner's environment is the caller's, so the local backend passes what the agent may
    /// see in `env` and sets this to false.
    pub inherit_env: bool,
    /// The GPUs the agent's container was given (see [`pod::visible_gpus`]), for the run
    /// record; none locally.
    pub gpu_devices: Vec<String>,
    /// What the run came from, for `run_result`.
    pub provenance: Provenance,
    /// Auto telemetry: errand's spans of the run and the agent's `OTEL_*` settings (off
    /// without `autoTelemetry`).
    pub telemetry: ExecutionTelemetry,
    /// An extension runs after a successful agent: the manifest is then left to its step,
    /// which lists the extension's results too.
    pub extension_follows: bool,
}

/// What a run came from, as `run_result` records it beside the command.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Provenance {
    /// Digest of the snapshot the run came from, `sha256:<hex>`.
    pub snapshot_digest: String,
    /// The agent's image as the pod named it (pinned by digest on a rerun); `None` locally,
    /// where the agent's command runs on this machine and there is no image.
    pub image: Option<String>,
}

/// What a stop signal (SIGTERM, Ctrl-C) means to the runner that receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRequest {
    /// A cancel: a local run is only stopped by `errand cancel` or Ctrl-C.
    Cancel,
    /// The pod is being deleted. A cancel, an eviction, a node drain and `kubectl delete pod`
    /// all arrive as the same SIGTERM, so the runner records only that; the controller, which
    /// sees the pod, says in the status which it was.
    PodDeletion,
}

impl StopRequest {
    /// How a run stopped this way ended.
    pub fn state(self) -> RunState {
        match self {
            StopRequest::Cancel => RunState::Cancelled,
            StopRequest::PodDeletion => RunState::Terminated,
        }
    }

    /// What happened, `when` it did (`before the agent started`, ...).
    pub fn message(self, when: &str) -> String {
        match self {
            StopRequest::Cancel => format!("the run was cancelled {when}"),
            StopRequest::PodDeletion => format!("the pod was being deleted (SIGTERM) {when}"),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum RunState {
    /// The agent exited with code 0.
    Succeeded,
    /// The agent exited with a non-zero code or was killed by a signal.
    Failed,
    /// The deadline passed; the agent was stopped.
    TimedOut,
    /// The run was cancelled; the agent was stopped (or never started).
    Cancelled,
    /// The runner's pod was being deleted (SIGTERM); the agent was stopped (or never started).
    /// The execution's status says why the pod was deleted.
    Terminated,
    /// The agent command could not be started.
    StartFailed,
    /// The working directory could not be staged; the agent never started.
    StageFailed,
}

impl RunState {
    /// The `type` written to `run_error` for runs that did not complete.
    pub fn error_type(self) -> Option<&'static str> {
        match self {
            RunState::Succeeded | RunState::Failed => None,
            RunState::TimedOut => Some("DeadlineExceeded"),
            RunState::Cancelled => Some("Cancelled"),
            RunState::Terminated => Some("Terminated"),
            RunState::StartFailed => Some("StartFailed"),
            RunState::StageFailed => Some("StageFailed"),
        }
    }
}

/// The entry of result `name` once it is `stored`, as the manifest, the summary and the status
/// list it.
fn result_entry(name: ResultName, stored: StoredObject) -> ResultEntry {
    ResultEntry {
        name: name.as_str().to_owned(),
        size: stored.size,
        sha256: stored.sha256,
    }
}

/// Everything a caller needs about a finished run: for the execution record, the status
/// message and the pod's termination message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    /// How the run ended.
    pub state: RunState,
    /// The agent's exit code (128 + signal number when killed by a signal).
    pub exit_code: Option<i32>,
    /// Whether the deadline passed.
    pub timed_out: bool,
    /// Why the run did not complete, as written to `run_error`.
    pub error: Option<String>,
    /// The agent's response: its response file, or the tail of its stdout.
    pub response: Option<String>,
    /// When the agent started.
    pub started_at: Option<jiff::Timestamp>,
    /// When the agent ended.
    pub finished_at: Option<jiff::Timestamp>,
    /// How long the agent ran.
    pub duration_ms: Option<u64>,
    /// The last ~2 KiB of the agent's stderr.
    pub stderr_tail: String,
    /// The results saved, in order, the manifest last.
    pub results: Vec<ResultEntry>,
    /// Why some results could not be saved, if any could not.
    pub results_error: Option<String>,
    /// Entries the results' archives left out (fifos, sockets, unreadable files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedResultEntry>,
    /// The GPUs the agent's container was given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_devices: Vec<String>,
}

/// Stages, runs and collects one execution in this process.
///
/// Always returns a summary: staging failures, start failures, timeouts and cancellation are
/// states, and results are saved for each of them.
pub async fn execute<S: BlobSource, K: ResultSink>(
    invocation: &Invocation,
    plan: &StagePlan,
    source: &S,
    sink: &K,
    settings: &StageSettings,
    cancel: CancellationToken,
) -> RunSummary {
    let staged = stage(plan, &invocation.workdir, source, sink, settings, &cancel);
    match traced_stage(&invocation.telemetry, staged).await {
        Ok(input) => run_and_collect(invocation, vec![input], sink, cancel).await,
        Err(e) => stage_failed(&invocation.execution, invocation.stop, e, sink).await,
    }
}

/// Runs `staging` (a [`stage`] call) inside errand's `stage` span of `telemetry`.
pub async fn traced_stage(
    telemetry: &ExecutionTelemetry,
    staging: impl Future<Output = Result<ResultEntry, RunnerError>>,
) -> Result<ResultEntry, RunnerError> {
    let span = telemetry.span(SPAN_STAGE);
    let staged = staging.await;
    span.end(staged.as_ref().err().map(ToString::to_string).as_deref());
    staged
}

/// errand's span of staging the working directory (and saving `input_workdir`).
pub const SPAN_STAGE: &str = "stage";
/// errand's span of the agent's run; the agent's `TRACEPARENT` names it.
pub const SPAN_RUN: &str = "run";
/// errand's span of saving the results.
pub const SPAN_UPLOAD: &str = "upload";
/// Span attribute: how the run ended ([`RunState`]).
pub const ATTR_RUN_STATE: &str = "errand.run.state";
/// Span attribute: the agent's exit code.
pub const ATTR_EXIT_CODE: &str = "errand.run.exit_code";
/// Span attribute: how many results were saved.
pub const ATTR_RESULTS: &str = "errand.results.count";

/// Records a staging that did not finish: cancelled, or failed (its budget included).
pub async fn stage_failed<K: ResultSink>(
    execution: &ExecutionId,
    stop: StopRequest,
    error: RunnerError,
    sink: &K,
) -> RunSummary {
    let (state, message) = match error {
        RunnerError::Cancelled => (
            stop.state(),
            stop.message("while staging the working directory"),
        ),
        other => (
            RunState::StageFailed,
            format!("staging the working directory: {other}"),
        ),
    };
    fail_before_run(execution, state, message, Vec::new(), sink).await
}

/// Runs the agent in an already staged working directory and saves its results; `staged` are
/// the results saved during staging (`input_workdir`), listed again in the manifest.
pub async fn run_and_collect<K: ResultSink>(
    invocation: &Invocation,
    staged: Vec<ResultEntry>,
    sink: &K,
    cancel: CancellationToken,
) -> RunSummary {
    let mut run_span = invocation.telemetry.span(SPAN_RUN);
    let telemetry_env = invocation.telemetry.agent_env(&run_span);
    let run = if telemetry_env.is_empty() {
        run::supervise(invocation, &cancel).await
    } else {
        // After the invocation's own variables, so the runner's values win.
        let mut traced = invocation.clone();
        traced.env.extend(telemetry_env);
        run::supervise(&traced, &cancel).await
    };
    run_span.set(ATTR_RUN_STATE, format!("{:?}", run.state));
    if let Some(code) = run.exit_code {
        run_span.set(ATTR_EXIT_CODE, i64::from(code));
    }
    let failure = (run.state != RunState::Succeeded).then(|| {
        run.error
            .clone()
            .unwrap_or_else(|| format!("{:?}", run.state))
    });
    run_span.end(failure.as_deref());
    // The stop that ended the agent leaves its partial results to be saved; a stop that
    // arrives while they are saved abandons the archives.
    let abandon = if cancel.is_cancelled() {
        CancellationToken::new()
    } else {
        cancel
    };
    let mut upload_span = invocation.telemetry.span(SPAN_UPLOAD);
    let summary = collect::collect(invocation, run, staged, sink, &abandon).await;
    upload_span.set(ATTR_RESULTS, summary.results.len() as i64);
    upload_span.end(summary.results_error.as_deref());
    summary
}
