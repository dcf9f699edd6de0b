//! Saving a run's results: the output working directory, the artifacts with the logs, the JSON
//! run record (`run_result` or `run_error`), and last the manifest of everything saved.
//! Each result is attempted even when an earlier one failed. A stop that arrives while the
//! results are saved abandons the archives within a chunk; the run record and the manifest,
//! small JSON, are still written.

use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::run::AgentRun;
use super::{Invocation, Provenance, RunState, RunSummary, RunnerError, ScratchDir, result_entry};
use crate::api::ResultEntry;
use crate::archive::{self, ArchiveError, PackItem, PackOptions, PackStats, SkippedEntry};
use crate::store::keys::{ExecutionId, ResultName};
use crate::store::{ResultBody, ResultSink, StoredObject};

/// `run_result`: the record of a run that completed, successfully or not.
#[derive(Serialize)]
struct RunResultRecord<'a> {
    state: RunState,
    exit_code: Option<i32>,
    response: Option<&'a str>,
    started_at: Option<jiff::Timestamp>,
    finished_at: Option<jiff::Timestamp>,
    duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    gpu_devices: &'a [String],
    execution: &'a ExecutionId,
    /// The command that ran: locally, on this machine; in a pod, in `image`.
    command: &'a [String],
    #[serde(flatten)]
    provenance: &'a Provenance,
}

/// `run_error`: the record of a run that could not start, timed out or was cancelled.
#[derive(Serialize)]
struct RunErrorRecord<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
    timed_out: bool,
    exit_code: Option<i32>,
    started_at: Option<jiff::Timestamp>,
    finished_at: Option<jiff::Timestamp>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    gpu_devices: &'a [String],
    execution: &'a ExecutionId,
}

/// `manifest.json`: every result saved before it, with size and sha256, and the entries the
/// archives left out (fifos, sockets, unreadable files).
#[derive(Serialize)]
pub struct ResultsManifest<'a> {
    /// The execution the results belong to.
    pub execution: &'a ExecutionId,
    /// Every result saved before the manifest.
    pub results: &'a [ResultEntry],
    /// What the archives left out.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub skipped: &'a [SkippedResultEntry],
}

/// An entry a result's archive left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct SkippedResultEntry {
    /// The result (`output_workdir`, ...).
    pub result: ResultName,
    /// The entry and why it was left out.
    #[serde(flatten)]
    pub entry: SkippedEntry,
}

/// Saves everything the finished run left and summarizes it.
pub(super) async fn collect<K: ResultSink>(
    inv: &Invocation,
    run: AgentRun,
    staged: Vec<ResultEntry>,
    sink: &K,
    stop: &CancellationToken,
) -> RunSummary {
    let mut saver = Saver::new(sink, staged);
    saver
        .archive(
            ResultName::OutputWorkdir,
            archive::list_dir(&inv.workdir),
            stop,
        )
        .await;
    saver
        .archive(
            ResultName::OutputArtifacts,
            artifact_items(&inv.scratch),
            stop,
        )
        .await;
    let (state, error) = if stop.is_cancelled() {
        (
            RunState::Cancelled,
            Some(
                "stopped while the results were saved; the archives not yet saved were abandoned"
                    .to_owned(),
            ),
        )
    } else {
        (run.state, run.error)
    };

    let summary = RunSummary {
        state,
        exit_code: run.exit_code,
        timed_out: state == RunState::TimedOut,
        error,
        response: run.response,
        started_at: run.started_at,
        finished_at: run.finished_at,
        duration_ms: run.duration_ms,
        stderr_tail: run.stderr_tail,
        results: Vec::new(),
        results_error: None,
        skipped: Vec::new(),
        gpu_devices: inv.gpu_devices.clone(),
    };
    match (summary.state.error_type(), &summary.error) {
        (Some(kind), error) => {
            let record = RunErrorRecord {
                kind,
                message: error.as_deref().unwrap_or_default(),
                timed_out: summary.timed_out,
                exit_code: summary.exit_code,
                started_at: summary.started_at,
                finished_at: summary.finished_at,
                gpu_devices: &summary.gpu_devices,
                execution: &inv.execution,
            };
            saver.json(ResultName::RunError, &record).await;
        }
        (None, _) => {
            let record = RunResultRecord {
                state: summary.state,
                exit_code: summary.exit_code,
                response: summary.response.as_deref(),
                started_at: summary.started_at,
                finished_at: summary.finished_at,
                duration_ms: summary.duration_ms,
                gpu_devices: &summary.gpu_devices,
                execution: &inv.execution,
                command: &inv.command,
                provenance: &inv.provenance,
            };
            saver.json(ResultName::RunResult, &record).await;
        }
    }
    if inv.extension_follows && summary.state == RunState::Succeeded {
        // The extension's step lists its own results too, in the manifest it saves last.
        return saver.summarize(summary);
    }
    saver.finish(&inv.execution, summary).await
}

/// Records a run that ended before the agent started (staging failed, or cancelled while
/// staging): saves `run_error` and the manifest, listing `staged`.
pub async fn fail_before_run<K: ResultSink>(
    execution: &ExecutionId,
    state: RunState,
    message: String,
    staged: Vec<ResultEntry>,
    sink: &K,
) -> RunSummary {
    let mut saver = Saver::new(sink, staged);
    let record = RunErrorRecord {
        kind: state.error_type().unwrap_or("Failed"),
        message: &message,
        timed_out: state == RunState::TimedOut,
        exit_code: None,
        started_at: None,
        finished_at: None,
        gpu_devices: &[],
        execution,
    };
    saver.json(ResultName::RunError, &record).await;
    let summary = RunSummary {
        state,
        exit_code: None,
        timed_out: state == RunState::TimedOut,
        error: Some(message),
        response: None,
        started_at: None,
        finished_at: None,
        duration_ms: None,
        stderr_tail: String::new(),
        results: Vec::new(),
        results_error: None,
        skipped: Vec::new(),
        gpu_devices: Vec::new(),
    };
    saver.finish(execution, summary).await
}

/// The artifacts directory's contents plus the two logs; agent files named like the logs give
/// way to the captured logs.
fn artifact_items(scratch: &ScratchDir) -> Result<Vec<PackItem>, ArchiveError> {
    const LOGS: [&str; 2] = ["stdout.log", "stderr.log"];
    let artifacts = scratch.artifacts_dir();
    let mut items = if artifacts.is_dir() {
        archive::list_dir(&artifacts)?
    } else {
        tracing::warn!(dir = %artifacts.display(), "the artifacts directory is gone; saving only the logs");
        Vec::new()
    };
    items.retain(|item| {
        let clash = LOGS.iter().any(|log| item.name == *log);
        if clash {
            tracing::warn!(name = ?item.name, "an artifact has the name of a captured log and is left out");
        }
        !clash
    });
    for (name, path) in LOGS
        .into_iter()
        .zip([scratch.stdout_log(), scratch.stderr_log()])
    {
        if path.exists() {
            items.push(PackItem {
                name: name.into(),
                path,
            });
        }
    }
    Ok(items)
}

/// Uploads `items` packed as result `name`; returns what was stored and what packing left
/// out. Once `stop` fires, packing ends its stream with an error within a chunk, which fails
/// the upload; an upload stuck on the network is dropped a second later.
pub(super) async fn put_archive<K: ResultSink>(
    sink: &K,
    name: ResultName,
    items: Vec<PackItem>,
    stop: &CancellationToken,
) -> Result<(StoredObject, PackStats), RunnerError> {
    let options = PackOptions {
        cancel: stop.clone(),
        ..PackOptions::default()
    };
    let (body, report) = ResultBody::packed(items, options);
    let put = tokio::select! {
        put = sink.put(name, body) => Some(put),
        () = async {
            stop.cancelled().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        } => None,
    };
    let stored = match put {
        Some(Ok(stored)) => stored,
        _ if stop.is_cancelled() => return Err(RunnerError::Stopped),
        None => return Err(RunnerError::Stopped),
        Some(Err(source)) => {
            return Err(RunnerError::Save {
                result: name,
                source,
            });
        }
    };
    // A stored body was read to its end, so its packing reported.
    Ok((stored, report.take().unwrap_or_default()))
}

/// Saves results one by one, remembering what was saved and what failed.
struct Saver<'a, K> {
    sink: &'a K,
    saved: Vec<ResultEntry>,
    skipped: Vec<SkippedResultEntry>,
    errors: Vec<String>,
}

impl<'a, K: ResultSink> Saver<'a, K> {
    fn new(sink: &'a K, staged: Vec<ResultEntry>) -> Self {
        Saver {
            sink,
            saved: staged,
            skipped: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Saves `items` packed as result `name`, and what packing left out.
    async fn archive(
        &mut self,
        name: ResultName,
        items: Result<Vec<PackItem>, ArchiveError>,
        stop: &CancellationToken,
    ) {
        let items = match items {
            Ok(items) => items,
            Err(e) => return self.failed(name, &e),
        };
        match put_archive(self.sink, name, items, stop).await {
            Ok((stored, stats)) => {
                for entry in stats.skipped_entries {
                    tracing::warn!(result = %name, path = entry.path, "left out: {}", entry.reason);
                    self.skipped.push(SkippedResultEntry {
                        result: name,
                        entry,
                    });
                }
                self.saved.push(result_entry(name, stored));
            }
            Err(e) => self.failed(name, &e),
        }
    }

    async fn json(&mut self, name: ResultName, value: &impl Serialize) {
        match serde_json::to_vec_pretty(value) {
            Ok(body) => self.put(name, ResultBody::bytes(body)).await,
            Err(e) => self.failed(name, &e),
        }
    }

    async fn put(&mut self, name: ResultName, body: ResultBody) {
        match self.sink.put(name, body).await {
            Ok(stored) => self.saved.push(result_entry(name, stored)),
            Err(e) => self.failed(name, &e),
        }
    }

    fn failed(&mut self, name: ResultName, error: &dyn std::error::Error) {
        tracing::warn!(result = %name, %error, "saving a result failed");
        self.errors.push(format!("{name}: {error}"));
    }

    /// Saves the manifest and completes `summary` with what was saved.
    async fn finish(mut self, execution: &ExecutionId, summary: RunSummary) -> RunSummary {
        let listed = self.saved.clone();
        self.json(
            ResultName::Manifest,
            &ResultsManifest {
                execution,
                results: &listed,
                skipped: &self.skipped.clone(),
            },
        )
        .await;
        self.summarize(summary)
    }

    /// Completes `summary` with what was saved, without a manifest.
    fn summarize(self, mut summary: RunSummary) -> RunSummary {
        summary.results = self.saved;
        summary.skipped = self.skipped;
        summary.results_error = (!self.errors.is_empty()).then(|| self.errors.join("; "));
        summary
    }
}
