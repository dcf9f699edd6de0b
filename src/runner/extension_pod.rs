//! `errand run-extension`: an execution's extension step in its own container (`errand-extension`), run once the agent's container handed over a successful run.
//!
//! The container starts beside the agent's and waits for `run-agent`'s handoff file. The file
//! only wakes it: the agent's process could write it too, so how the run ended is read back
//! from the store (`run_result`, which only errand's runner can write), and the step runs only
//! after a success. It reads the run's results and saves its declared results and the manifest
//! through its own grants, which `stage` kept in a volume the agent's container never mounts,
//! and which it removes before the step starts. Its [`ExtensionSummary`] is the container's
//! termination message, which the controller turns into condition `ExtensionSucceeded`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::TryStreamExt;
use tokio_util::sync::CancellationToken;

use super::RunState;
use super::extension::{ExtensionSummary, SavedRun, run_extension};
use super::pod::{Handoff, installed_ca_bundle, invocation, read_json, write_termination_log};
use super::signals::cancel_on_stop_signal;
use super::termination::fitted_json;
use crate::resolve::Snapshot;
use crate::store::grants::{EXTENSION_READS, Grants};
use crate::store::keys::ResultName;
use crate::store::signed::SignedUrls;
use crate::store::{ExtensionResults, StoreError};

/// How often the handoff file is looked for while the agent runs.
const HANDOFF_POLL: Duration = Duration::from_millis(500);
/// Exit code when the step failed, or errand could not set it up.
const STEP_FAILED: i32 = 1;

/// The files the extension's container reads and writes.
#[derive(Debug, Clone)]
pub struct ExtensionPodPaths {
    /// The snapshot document.
    pub snapshot: PathBuf,
    /// The merged agent config (`AGENT_CONFIG_PATH` of the step, as of the agent).
    pub agent_config: PathBuf,
    /// The extension's grants, removed once read.
    pub grants: PathBuf,
    /// Where `run-agent` writes its summary when the run ended.
    pub handoff: PathBuf,
    /// The step's own directory (results, output, working directory, spooled uploads).
    pub dir: PathBuf,
    /// Where to write the termination message.
    pub termination_log: PathBuf,
}

/// `errand run-extension`: waits for the agent's run, runs the snapshot's extension after a
/// success and reports how it ended. Returns the process exit code: 0 when the step succeeded
/// or had nothing to do (the agent's run did not succeed, or the pod is being deleted).
pub async fn run_extension_in_pod(paths: &ExtensionPodPaths) -> i32 {
    let stop = cancel_on_stop_signal();
    let setup = match set_up(paths) {
        Ok(setup) => setup,
        Err(failure) => return report_failure(paths, None, failure),
    };
    let Setup {
        snapshot,
        grants,
        urls,
    } = setup;
    let Some(extension) = snapshot.extension.as_ref() else {
        return report_failure(paths, None, "the snapshot has no extension".into());
    };
    let run = match wait_for_handoff(&paths.handoff, &grants, &stop).await {
        Some(run) => run,
        None => {
            return skip(paths, "the pod was stopped before the agent's run ended");
        }
    };
    if run.state != RunState::Succeeded {
        return skip(paths, &format!("the agent's run ended {:?}", run.state));
    }
    match stored_state(&urls).await {
        Ok(RunState::Succeeded) => {}
        Ok(state) => return skip(paths, &format!("run_result says the run ended {state:?}")),
        Err(e) => {
            let failure = format!(
                "the agent's container handed over a successful run, but its run_result \
                 cannot be read: {e}"
            );
            return report_failure(paths, Some(extension), failure);
        }
    }
    let agent_config = paths.agent_config.clone();
    let agent = invocation(
        &grants,
        &snapshot,
        &agent_paths(paths),
        &agent_config,
        Vec::new(),
    );
    // The container's own environment (its image's PATH): it holds no secrets.
    let env = std::env::vars().collect();
    let saved = SavedRun {
        results: EXTENSION_READS.to_vec(),
        skipped: &run.skipped,
    };
    let step = run_extension(extension, &agent, saved, &urls, env, &paths.dir, stop).await;
    report(paths, step)
}

struct Setup {
    snapshot: Snapshot,
    grants: Grants,
    urls: SignedUrls,
}

/// Reads the snapshot and the grants, removes the grants (the step runs as the same user) and
/// builds the signed-URL client.
fn set_up(paths: &ExtensionPodPaths) -> Result<Setup, String> {
    let snapshot: Snapshot = read_json("snapshot", &paths.snapshot).map_err(|e| e.to_string())?;
    let grants: Grants = read_json("extension grants", &paths.grants).map_err(|e| e.to_string())?;
    std::fs::remove_file(&paths.grants)
        .map_err(|e| format!("removing the grants {}: {e}", paths.grants.display()))?;
    std::fs::create_dir_all(&paths.dir)
        .map_err(|e| format!("preparing {}: {e}", paths.dir.display()))?;
    let urls = SignedUrls::new(grants.clone(), &paths.dir, installed_ca_bundle().as_deref())
        .map_err(|e| e.to_string())?;
    Ok(Setup {
        snapshot,
        grants,
        urls,
    })
}

/// The agent's run as `run-agent` handed it over; `None` when the pod was stopped first or the
/// grants expired (the Job's deadline ends the pod by then).
async fn wait_for_handoff(
    path: &Path,
    grants: &Grants,
    stop: &CancellationToken,
) -> Option<Handoff> {
    loop {
        if let Ok(bytes) = std::fs::read(path)
            && let Ok(run) = serde_json::from_slice::<Handoff>(&bytes)
        {
            return Some(run);
        }
        if stop.is_cancelled() || jiff::Timestamp::now() >= grants.expires_at {
            return None;
        }
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(HANDOFF_POLL) => {}
        }
    }
}

/// How the run ended as its `run_result` in the store says.
async fn stored_state(urls: &SignedUrls) -> Result<RunState, StoreError> {
    let body = urls.read(ResultName::RunResult).await?;
    let bytes: Vec<u8> = body
        .into_stream()
        .try_fold(Vec::new(), |mut all, chunk| async move {
            all.extend_from_slice(&chunk);
            Ok(all)
        })
        .await
        .map_err(|e| StoreError::Body {
            key: ResultName::RunResult.to_string(),
            source: e,
        })?;
    #[derive(serde::Deserialize)]
    struct Recorded {
        state: RunState,
    }
    serde_json::from_slice::<Recorded>(&bytes)
        .map(|r| r.state)
        .map_err(|e| StoreError::Body {
            key: ResultName::RunResult.to_string(),
            source: std::io::Error::other(e),
        })
}

/// The agent's pod paths, as far as the step's invocation uses them (its scratch and working
/// directories are its own, under `dir`).
fn agent_paths(paths: &ExtensionPodPaths) -> super::pod::PodPaths {
    super::pod::PodPaths {
        snapshot: paths.snapshot.clone(),
        grants: paths.grants.clone(),
        workspace: paths.dir.clone(),
        scratch: paths.dir.clone(),
        termination_log: paths.termination_log.clone(),
        extension: None,
    }
}

/// Writes how the step ended and returns the exit code that goes with it.
fn report(paths: &ExtensionPodPaths, mut step: ExtensionSummary) -> i32 {
    let code = if step.succeeded() { 0 } else { STEP_FAILED };
    tracing::info!(state = ?step.state, failure = ?step.failure, results = step.results.len(), "extension done");
    let message = fitted_json(&mut step, |s| &mut s.stderr_tail);
    write_termination_log(&paths.termination_log, &message);
    code
}

/// Reports a step errand could not set up or start.
fn report_failure(
    paths: &ExtensionPodPaths,
    extension: Option<&crate::resolve::ResolvedExtension>,
    failure: String,
) -> i32 {
    tracing::error!("{failure}");
    let step = ExtensionSummary {
        kind: extension.map(|e| e.kind.clone()).unwrap_or_default(),
        name: extension.map(|e| e.name.clone()).unwrap_or_default(),
        state: RunState::StartFailed,
        exit_code: None,
        failure: Some(failure),
        stderr_tail: String::new(),
        results: Vec::new(),
    };
    report(paths, step)
}

/// The step has nothing to do: says why in the termination message (not a summary, so the
/// controller knows it did not run).
fn skip(paths: &ExtensionPodPaths, why: &str) -> i32 {
    tracing::info!("the extension does not run: {why}");
    write_termination_log(
        &paths.termination_log,
        &format!("the extension did not run: {why}"),
    );
    0
}
