//! errand's two processes in an execution's pod: `stage` (the init container) and `run-agent` (wrapping the agent's command in the agent's container).
//!
//! `stage` asks the controller for the execution's grants with the pod's projected token
//! ([`GrantRequest`]) and keeps them in the pod's in-memory grants volume; `run-agent` reads
//! them and removes the file before the agent starts, so the agent never finds them. Both reach
//! the store only through the grants' signed URLs, and report how they ended in the
//! container's termination message, which the controller copies into the execution's status.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::send_end_report;
use super::signals::cancel_on_stop_signal;
use super::termination::{StagedSummary, TerminationSummary};
use super::{
    Invocation, Provenance, RunState, RunSummary, ScratchDir, SkippedResultEntry, StageSettings,
    StopRequest, fail_before_run, plan, run_and_collect, stage, stage_failed, traced_stage,
};
use crate::api::ResultEntry;
use crate::api::contract::CONTROL_MOUNT_PATH;
use crate::resolve::Snapshot;
use crate::store::grant_request::{GrantRequest, GrantRequestError};
use crate::store::grants::Grants;
use crate::store::signed::SignedUrls;
use crate::telemetry::{ExecutionTelemetry, TelemetryTarget};

/// Time between SIGTERM and SIGKILL for the agent; well inside the pod's own grace period,
/// so that the results are uploaded before the kubelet kills errand itself.
pub const AGENT_GRACE: Duration = Duration::from_secs(10);
/// Where Kubernetes reads a container's termination message by default.
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// The file in the scratch directory where `stage` leaves what it saved for `run-agent`.
const STAGED_FILE: &str = "staged.json";
/// Name of the errand binary in the shared bin directory.
const BINARY_NAME: &str = "errand";
/// The CA roots of the errand image, which `stage` installs beside the binary for `run-agent`.
const IMAGE_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Name of the installed CA bundle in the shared bin directory.
const CA_BUNDLE_NAME: &str = "ca-certificates.crt";
/// Exit code when errand's own setup failed (its inputs or grants could not be had).
const SETUP_FAILED: i32 = 2;

/// Why a pod process could not start its work.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    /// A mounted file could not be read or parsed.
    #[error("reading {what} {path}: {reason}")]
    Read {
        /// Which file (snapshot, grants).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The errand binary could not be installed into the shared directory.
    #[error("installing errand into {dir}: {source}")]
    Install {
        /// The bin directory.
        dir: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The snapshot's Fileset digests do not form store keys.
    #[error("the snapshot's workdir plan: {0}")]
    Plan(#[from] crate::store::keys::KeyError),
    /// The signed-URL client could not be built.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The controller gave no grants.
    #[error("asking for the grants: {0}")]
    Grants(#[from] GrantRequestError),
    /// The grants could not be kept for `run-agent`, or removed before the agent starts.
    #[error("{action} the grants {path}: {source}")]
    GrantsFile {
        /// Keeping or removing.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// What staging saved could not be recorded for `run-agent`.
    #[error("recording the staged results in {path}: {source}")]
    Record {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// The mounted inputs both processes read.
#[derive(Debug, Clone)]
pub struct PodPaths {
    /// The snapshot document.
    pub snapshot: PathBuf,
    /// The grants document: written by `stage` when it asks the controller for the grants,
    /// removed by `run-agent` once read.
    pub grants: PathBuf,
    /// The working directory.
    pub workspace: PathBuf,
    /// The scratch directory (logs, artifacts, spooled uploads, what staging saved).
    pub scratch: PathBuf,
    /// Where to write the termination message.
    pub termination_log: PathBuf,
    /// Where `stage` keeps the extension's grants for its container, and `run-agent` says the
    /// run ended (in the handoff volume), when the execution has an extension.
    pub extension: Option<ExtensionPaths>,
}

/// The files an execution with an extension hands to its extension's container.
#[derive(Debug, Clone)]
pub struct ExtensionPaths {
    /// The extension's grants (in a volume only the stage and extension containers mount).
    pub grants: PathBuf,
    /// The agent's run summary, written by `run-agent` once its results are saved.
    pub handoff: PathBuf,
}

pub(super) fn read_json<T: serde::de::DeserializeOwned>(
    what: &'static str,
    path: &Path,
) -> Result<T, PodError> {
    let read_error = |reason: String| PodError::Read {
        what,
        path: path.to_owned(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| read_error(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| read_error(e.to_string()))
}

/// `errand stage`: obtains the grants (from the controller with `request`, which keeps them at
/// `paths.grants` for `run-agent`; without it, from that file), installs errand into
/// `bin_dir`, stages the workdir through the grants within `settings` and saves
/// `input_workdir`. SIGTERM stops staging within a chunk. Returns the process exit code.
pub async fn stage_in_pod(
    paths: &PodPaths,
    request: Option<&GrantRequest>,
    bin_dir: &Path,
    settings: &StageSettings,
    telemetry: Option<&TelemetryTarget>,
) -> i32 {
    let stop = cancel_on_stop_signal();
    let snapshot: Snapshot = match read_json("snapshot", &paths.snapshot) {
        Ok(snapshot) => snapshot,
        Err(e) => return report_unsaved(paths, RunState::StageFailed, &e),
    };
    let grants = match request {
        Some(request) => ask_for_grants(request, &snapshot, paths, &stop).await,
        None => read_json("grants", &paths.grants),
    };
    let grants: Grants = match grants {
        Ok(grants) => grants,
        Err(PodError::Grants(GrantRequestError::Stopped)) => {
            let e = PodError::Grants(GrantRequestError::Stopped);
            return report_unsaved(paths, RunState::Terminated, &e);
        }
        Err(e) => return report_unsaved(paths, RunState::StageFailed, &e),
    };
    // The errand image's own roots serve staging.
    let urls = match SignedUrls::new(grants.clone(), &paths.scratch, None) {
        Ok(urls) => urls,
        Err(e) => return report_unsaved(paths, RunState::StageFailed, &e.into()),
    };
    let fail = |state: RunState, message: String| {
        let urls = &urls;
        let grants = &grants;
        async move {
            tracing::error!("{message}");
            let summary =
                fail_before_run(&grants.execution, state, message, Vec::new(), urls).await;
            report(paths, &summary)
        }
    };
    if let Err(e) = install_binary(bin_dir) {
        return fail(RunState::StageFailed, e.to_string()).await;
    }
    let plan = match plan::stage_plan(&snapshot) {
        Ok(plan) => plan,
        Err(e) => return fail(RunState::StageFailed, PodError::from(e).to_string()).await,
    };
    let telemetry = ExecutionTelemetry::for_snapshot(telemetry, &snapshot, &grants.execution);
    let staging = stage(&plan, &paths.workspace, &urls, &urls, settings, &stop);
    let staged = traced_stage(&telemetry, staging).await;
    telemetry.shutdown().await;
    let saved = match staged {
        Ok(saved) => saved,
        Err(e) => {
            tracing::error!("{e}");
            let summary = stage_failed(&grants.execution, StopRequest::PodDeletion, e, &urls).await;
            return report(paths, &summary);
        }
    };
    let record = paths.scratch.join(STAGED_FILE);
    let staged = StagedSummary {
        staged: vec![saved],
    };
    let json = serde_json::to_vec(&staged.staged).expect("saved results always serialize");
    if let Err(source) = std::fs::write(&record, json) {
        let e = PodError::Record {
            path: record,
            source,
        };
        return fail(RunState::StageFailed, e.to_string()).await;
    }
    write_message(paths, &staged.to_termination_message());
    0
}

/// `errand run-agent`: runs `command` in the staged workdir with the snapshot's input,
/// environment and deadline, saves the results through the grants and writes the summary to
/// the termination message. SIGTERM stops the agent and saves what it left. Returns the
/// process exit code.
pub async fn run_agent_in_pod(
    paths: &PodPaths,
    agent_config: &Path,
    command: Vec<String>,
    telemetry: Option<&TelemetryTarget>,
) -> i32 {
    let (code, handoff) = run_agent(paths, agent_config, command, telemetry).await;
    if let Some(extension) = &paths.extension {
        hand_off(&extension.handoff, &handoff);
    }
    code
}

/// What `run-agent` hands to the extension's container once the run ended and its results are
/// saved (or nothing could be): how the run ended, and what its archives left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    /// How the run ended.
    pub state: RunState,
    /// Entries the run's archives left out, for the manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedResultEntry>,
}

impl Handoff {
    fn of(summary: &RunSummary) -> Self {
        Self {
            state: summary.state,
            skipped: summary.skipped.clone(),
        }
    }

    fn unsaved() -> Self {
        Self {
            state: RunState::StartFailed,
            skipped: Vec::new(),
        }
    }
}

/// [`run_agent_in_pod`] but for the handoff: the exit code and what the extension learns.
async fn run_agent(
    paths: &PodPaths,
    agent_config: &Path,
    command: Vec<String>,
    telemetry: Option<&TelemetryTarget>,
) -> (i32, Handoff) {
    let stop = cancel_on_stop_signal();
    let unsaved = |e: &PodError| {
        (
            report_unsaved(paths, RunState::StartFailed, e),
            Handoff::unsaved(),
        )
    };
    let (grants, snapshot) = match read_inputs(paths) {
        Ok(inputs) => inputs,
        Err(e) => return unsaved(&e),
    };
    // The agent runs as the same user in this container: it must not find the grants.
    if let Err(source) = std::fs::remove_file(&paths.grants) {
        return unsaved(&PodError::GrantsFile {
            action: "removing",
            path: paths.grants.clone(),
            source,
        });
    }
    let urls = match SignedUrls::new(
        grants.clone(),
        &paths.scratch,
        installed_ca_bundle().as_deref(),
    ) {
        Ok(urls) => urls,
        Err(e) => return unsaved(&e.into()),
    };
    let staged = read_staged(&paths.scratch.join(STAGED_FILE));
    let mut invocation = invocation(&grants, &snapshot, paths, agent_config, command);
    invocation.telemetry =
        ExecutionTelemetry::for_snapshot(telemetry, &snapshot, &grants.execution);
    invocation.extension_follows = snapshot.extension.is_some();
    let summary = run_and_collect(&invocation, staged, &urls, stop).await;
    invocation.telemetry.shutdown().await;
    let code = report(paths, &summary);
    // An extension's step saves the manifest after this: only its container's end says more.
    if !invocation.extension_follows {
        report_end(&grants, &summary, code).await;
    }
    (code, Handoff::of(&summary))
}

/// Tells the controller that the run ended, when its grants say where and its manifest is
/// saved; the pod's end says the same a little later if this does not get through.
async fn report_end(grants: &Grants, summary: &RunSummary, exit_code: i32) {
    let Some((grant, report)) = send_end_report::report_of(grants, summary, exit_code) else {
        return;
    };
    match send_end_report::send(&grant, &report).await {
        Ok(()) => tracing::info!("reported the run's end"),
        Err(e) => {
            tracing::warn!(error = %e, "the run's end was not reported; the pod's end will tell")
        }
    }
}

/// Tells the extension's container that the run ended: `handoff`, written whole under a
/// temporary name and then renamed.
fn hand_off(path: &Path, handoff: &Handoff) {
    let partial = path.with_extension("partial");
    let json = serde_json::to_vec(handoff).expect("a handoff always serializes");
    if let Err(e) = std::fs::write(&partial, json).and_then(|()| std::fs::rename(&partial, path)) {
        tracing::error!(path = %path.display(), error = %e, "handing the run over to the extension");
    }
}

/// Asks the controller for the grants, again and again until the run's start timeout from now
/// if it cannot answer, and keeps them (readable by this user only) for `run-agent`, and the
/// extension's apart for its container.
async fn ask_for_grants(
    request: &GrantRequest,
    snapshot: &Snapshot,
    paths: &PodPaths,
    stop: &tokio_util::sync::CancellationToken,
) -> Result<Grants, PodError> {
    let window = jiff::SignedDuration::from_secs(snapshot.start_timeout_seconds.max(1));
    let until = jiff::Timestamp::now()
        .checked_add(window)
        .unwrap_or(jiff::Timestamp::MAX);
    let mut grants = request.send(until, stop).await?;
    tracing::info!(expires_at = %grants.expires_at, "got the grants");
    if let Some(extension) = grants.extension.take()
        && let Some(to) = &paths.extension
    {
        keep_grants(&extension, &to.grants)?;
    }
    keep_grants(&grants, &paths.grants)?;
    Ok(grants)
}

/// Writes `grants` to `path`, readable by this user only.
fn keep_grants(grants: &Grants, path: &Path) -> Result<(), PodError> {
    let keep_error = |source| PodError::GrantsFile {
        action: "keeping",
        path: path.to_owned(),
        source,
    };
    let json = serde_json::to_vec(grants).expect("grants always serialize");
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(keep_error)?;
    file.write_all(&json).map_err(keep_error)
}

fn read_inputs(paths: &PodPaths) -> Result<(Grants, Snapshot), PodError> {
    Ok((
        read_json("grants", &paths.grants)?,
        read_json("snapshot", &paths.snapshot)?,
    ))
}

/// What staging saved; a missing record only leaves `input_workdir` out of the manifest.
fn read_staged(path: &Path) -> Vec<ResultEntry> {
    match read_json("staged results", path) {
        Ok(saved) => saved,
        Err(e) => {
            tracing::warn!("{e}; the manifest will not list input_workdir");
            Vec::new()
        }
    }
}

/// The run the snapshot describes, in the pod's directories.
pub(super) fn invocation(
    grants: &Grants,
    snapshot: &Snapshot,
    paths: &PodPaths,
    agent_config: &Path,
    command: Vec<String>,
) -> Invocation {
    Invocation {
        execution: grants.execution.clone(),
        command,
        input: snapshot.input.clone(),
        agent_config_path: agent_config.to_owned(),
        // Secrets are in the container's environment already (secretKeyRef), and the runner
        // passes its own environment on.
        env: plan::plain_agent_env(snapshot),
        timeout: Duration::from_secs(u64::try_from(snapshot.timeout_seconds).unwrap_or(0).max(1)),
        // The pod's control annotation as the downward API projects it (absent outside a pod).
        control: Some(super::control::ControlFile::projected(
            Path::new(CONTROL_MOUNT_PATH).join("control"),
        )),
        grace: AGENT_GRACE,
        workdir: paths.workspace.clone(),
        scratch: ScratchDir::new(&paths.scratch),
        stdin: None,
        passthrough: true,
        stop: StopRequest::PodDeletion,
        inherit_env: true,
        gpu_devices: visible_gpus(std::env::var(NVIDIA_VISIBLE_DEVICES).ok().as_deref()),
        provenance: Provenance {
            snapshot_digest: snapshot.digest(),
            image: Some(snapshot.agent.runtime.image.clone()),
        },
        telemetry: ExecutionTelemetry::off(),
        extension_follows: false,
    }
}

/// The variable through which NVIDIA's device plugin (and the test node's fake one) tells a
/// container which GPUs it was given.
pub const NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// The GPUs an `NVIDIA_VISIBLE_DEVICES` value names: its comma-separated ids (or `all`); none
/// for an unset or empty value and NVIDIA's `void` and `none`.
pub fn visible_gpus(value: Option<&str>) -> Vec<String> {
    value
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|id| !id.is_empty() && *id != "void" && *id != "none")
        .map(str::to_owned)
        .collect()
}

/// Copies this executable into `bin_dir`, with the errand image's CA roots when it has them
/// (the agent's image may have none), each through a temporary name so that the agent's
/// container never sees a half-written file.
fn install_binary(bin_dir: &Path) -> Result<(), PodError> {
    let exe = std::env::current_exe().map_err(|source| PodError::Install {
        dir: bin_dir.to_owned(),
        source,
    })?;
    install_file(&exe, bin_dir, BINARY_NAME, 0o755)?;
    let roots = Path::new(IMAGE_CA_BUNDLE);
    if roots.is_file() {
        install_file(roots, bin_dir, CA_BUNDLE_NAME, 0o444)?;
    }
    Ok(())
}

fn install_file(from: &Path, bin_dir: &Path, name: &str, mode: u32) -> Result<(), PodError> {
    use std::os::unix::fs::PermissionsExt;
    let install_error = |source| PodError::Install {
        dir: bin_dir.to_owned(),
        source,
    };
    let partial = bin_dir.join(format!(".{name}.partial"));
    std::fs::copy(from, &partial).map_err(install_error)?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(mode))
        .map_err(install_error)?;
    std::fs::rename(&partial, bin_dir.join(name)).map_err(install_error)
}

/// The CA bundle `stage` installed beside this executable, if it did.
pub(super) fn installed_ca_bundle() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bundle = exe.parent()?.join(CA_BUNDLE_NAME);
    bundle.is_file().then_some(bundle)
}

/// Writes the summary of a finished run (or staging) and returns the exit code that goes
/// with it.
fn report(paths: &PodPaths, summary: &RunSummary) -> i32 {
    let code = exit_code(summary);
    tracing::info!(state = ?summary.state, exit_code = code, results = summary.results.len(), "done");
    write_termination(paths, &TerminationSummary::from_run(summary));
    code
}

/// Reports a failure that happened before anything could be saved, with the error where the
/// controller shows the agent's stderr.
fn report_unsaved(paths: &PodPaths, state: RunState, error: &PodError) -> i32 {
    tracing::error!("{error}");
    let summary = TerminationSummary {
        state,
        exit_code: None,
        timed_out: false,
        stderr_tail: error.to_string(),
        results: Vec::new(),
        results_error: Some("nothing was saved: errand could not set up the run".into()),
        gpu_devices: Vec::new(),
    };
    write_termination(paths, &summary);
    SETUP_FAILED
}

fn write_termination(paths: &PodPaths, summary: &TerminationSummary) {
    write_message(paths, &summary.to_termination_message());
}

fn write_message(paths: &PodPaths, message: &str) {
    write_termination_log(&paths.termination_log, message);
}

/// Writes the container's termination message.
pub(super) fn write_termination_log(path: &Path, message: &str) {
    if let Err(e) = std::fs::write(path, message) {
        tracing::warn!(path = %path.display(), error = %e, "writing the termination message");
    }
}

/// The exit code that reflects a run: 0 only for a success whose results were all saved; the
/// agent's own code when it failed; the shell's conventions for the other endings.
pub fn exit_code(summary: &RunSummary) -> i32 {
    match summary.state {
        RunState::Succeeded if summary.results_error.is_none() => 0,
        RunState::Succeeded => 1,
        RunState::Failed => summary
            .exit_code
            .filter(|code| (1..=255).contains(code))
            .unwrap_or(1),
        // As timeout(1) reports a deadline.
        RunState::TimedOut => 124,
        // 128 + SIGTERM, as a process stopped by the signal would report.
        RunState::Cancelled | RunState::Terminated => 143,
        // As a shell reports a command it could not run.
        RunState::StartFailed => 127,
        RunState::StageFailed => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(state: RunState, exit: Option<i32>, results_error: Option<&str>) -> RunSummary {
        RunSummary {
            state,
            exit_code: exit,
            timed_out: state == RunState::TimedOut,
            error: None,
            response: None,
            started_at: None,
            finished_at: None,
            duration_ms: None,
            stderr_tail: String::new(),
            results: Vec::new(),
            results_error: results_error.map(str::to_owned),
            skipped: Vec::new(),
            gpu_devices: Vec::new(),
        }
    }

    #[test]
    fn the_visible_gpus_are_the_ids_the_device_plugin_set() {
        assert_eq!(visible_gpus(Some("fake-gpu-2")), ["fake-gpu-2"]);
        assert_eq!(
            visible_gpus(Some("GPU-a1b2, GPU-c3d4")),
            ["GPU-a1b2", "GPU-c3d4"]
        );
        assert_eq!(visible_gpus(Some("all")), ["all"]);
        for none in [None, Some(""), Some("void"), Some("none")] {
            assert!(visible_gpus(none).is_empty(), "{none:?}");
        }
    }

    #[test]
    fn the_exit_code_reflects_how_the_run_ended() {
        let cases = [
            (summary(RunState::Succeeded, Some(0), None), 0),
            (summary(RunState::Succeeded, Some(0), Some("put failed")), 1),
            (summary(RunState::Failed, Some(3), None), 3),
            (summary(RunState::Failed, Some(-1), None), 1),
            (summary(RunState::Failed, None, None), 1),
            (summary(RunState::TimedOut, Some(143), None), 124),
            (summary(RunState::Cancelled, Some(143), None), 143),
            (summary(RunState::Terminated, Some(143), None), 143),
            (summary(RunState::StartFailed, None, None), 127),
            (summary(RunState::StageFailed, None, None), 1),
        ];
        for (run, expected) in cases {
            assert_eq!(exit_code(&run), expected, "{:?}", run.state);
        }
    }

    #[test]
    fn the_staged_record_round_trips_and_its_absence_is_tolerated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STAGED_FILE);
        assert!(read_staged(&path).is_empty());
        let saved = ResultEntry {
            name: "input_workdir".into(),
            size: 42,
            sha256: "a".repeat(64),
        };
        std::fs::write(
            &path,
            serde_json::to_vec(std::slice::from_ref(&saved)).unwrap(),
        )
        .unwrap();
        assert_eq!(read_staged(&path), [saved]);
    }
}
