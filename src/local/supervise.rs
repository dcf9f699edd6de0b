//! Running one local execution: resolve and record it, then stage, run and collect with the runner.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::catalog::LocalCatalog;
use super::environment::{base_environment, caller_environment};
use super::files::{create_private_file, write_private};
use super::notify;
use super::paths::DataDir;
use super::process::ProcessIdentity;
use super::record::{ExecutionRecord, RecordError, Records, generate_name};
use crate::api::{AgentExecutionSpec, Phase};
use crate::resolve::{
    InvalidSpec, RunLimits, Snapshot, WithFilesetPaths, admit_creation, check_execution_spec,
    resolve_execution, subpath_digests,
};
use crate::runner::control::ControlFile;
use crate::runner::outcome::{RunReport, extension_outcome, run_outcome};
use crate::runner::{
    self, ExtensionSummary, Invocation, Provenance, RunState, RunSummary, ScratchDir,
    StageSettings, StopRequest,
};
use crate::store::keys::ExecutionId;
use crate::store::{Store, StoreError, StoreResults};
use crate::telemetry::{ExecutionTelemetry, TelemetryTarget};

/// Time between SIGTERM and SIGKILL when a local run is stopped.
pub const GRACE: Duration = Duration::from_secs(5);

/// Why a local execution could not be prepared or run.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// The spec breaks admission rules; nothing was created.
    #[error(transparent)]
    Invalid(#[from] InvalidSpec),
    /// The record could not be created, read or written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The store could not be opened or used.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A local file could not be written.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A Secret vanished between admission and start.
    #[error("Secret {0:?} (bound to {1}) no longer exists")]
    SecretGone(String, String),
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), SuperviseError> {
    write_private(path, bytes).map_err(|e| SuperviseError::File {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// Resolves `spec` against the local catalog and records a new execution with its snapshot.
/// An invalid spec creates nothing.
pub async fn prepare(
    data: &DataDir,
    store_url: &str,
    namespace: &str,
    name: Option<&str>,
    spec: &AgentExecutionSpec,
    inherit_env: bool,
    telemetry: Option<&TelemetryTarget>,
) -> Result<ExecutionRecord, SuperviseError> {
    // What the API server checks first: the CRD's schema and CEL rules.
    let problems = check_execution_spec(&serde_json::to_value(spec).expect("a spec serializes"));
    if !problems.is_empty() {
        return Err(InvalidSpec { problems }.into());
    }
    let catalog = LocalCatalog::new(data.clone());
    // The paths of the Filesets a subpath is taken from, as the webhook reads them.
    let digests = subpath_digests(namespace, spec, &catalog);
    let paths = if digests.is_empty() {
        Vec::new()
    } else {
        Store::open(store_url)?
            .fileset_path_indexes(namespace, digests)
            .await
    };
    let resolution = resolve_execution(namespace, spec, &WithFilesetPaths::new(&catalog, paths));
    let snapshot = admit_creation(spec, resolution)?;
    // The cluster's limits that apply on this machine: somewhere to send auto telemetry.
    RunLimits {
        telemetry_configured: telemetry.is_some(),
        // This machine holds a run to no egress: its host names, like its ranges, are not
        // refused for want of the cluster's proxy.
        egress_proxy: true,
        ..RunLimits::default()
    }
    .check(&snapshot)?;
    if let Some(name) = name {
        crate::resolve::object_name(name).map_err(|message| InvalidSpec {
            problems: vec![crate::resolve::Problem::new("metadata.name", message)],
        })?;
    }
    let name = name.map_or_else(|| generate_name(&snapshot.agent.name), str::to_owned);
    let mut record = ExecutionRecord::pending(
        name,
        namespace,
        &snapshot.agent.name,
        snapshot.digest(),
        store_url,
        inherit_env,
    );
    record.rerun_of = spec.rerun_of.as_ref().map(|r| r.name.clone());
    record.otlp_endpoint = telemetry
        .filter(|_| snapshot.auto_telemetry)
        .map(|t| t.endpoint.clone());
    let records = Records::new(data.clone());
    records.create(&record)?;
    let dir = records.dir(namespace, &record.name);
    write_file(
        &records.snapshot_file(namespace, &record.name),
        &snapshot.canonical_json(),
    )?;
    let config = serde_json::to_vec_pretty(&snapshot.config).expect("a config always serializes");
    write_file(&dir.join("agent-config.json"), &config)?;
    Ok(record)
}

/// Runs a prepared execution in this process until it ends, updating its record as it goes.
/// Cancelling `cancel` stops the agent (SIGTERM, grace, SIGKILL) and saves partial results.
pub async fn run_prepared(
    data: &DataDir,
    namespace: &str,
    name: &str,
    passthrough: bool,
    settings: &StageSettings,
    cancel: CancellationToken,
) -> Result<ExecutionRecord, SuperviseError> {
    let records = Records::new(data.clone());
    let mut record = records.read(namespace, name)?;
    let dir = records.dir(namespace, name);
    let snapshot = records.snapshot(namespace, name)?;
    let store = Store::open(&record.store)?;
    let execution = ExecutionId {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: record.uid.clone(),
    };
    let sink = StoreResults::new(store.clone(), execution.clone())?;
    let mut invocation = Invocation {
        execution,
        command: snapshot.command(),
        input: snapshot.input.clone(),
        agent_config_path: dir.join("agent-config.json"),
        env: agent_env(data, &snapshot, record.inherit_env)?,
        timeout: Duration::from_secs(u64::try_from(snapshot.timeout_seconds).unwrap_or(1)),
        control: Some(ControlFile::local(&dir)),
        grace: GRACE,
        workdir: dir.join("workspace"),
        scratch: ScratchDir::new(dir.join("scratch")),
        stdin: record
            .stdin_bytes
            .map(|_| records.stdin_file(namespace, name)),
        passthrough,
        stop: StopRequest::Cancel,
        inherit_env: false,
        gpu_devices: Vec::new(),
        provenance: Provenance {
            snapshot_digest: record.snapshot_digest.clone(),
            image: None,
        },
        telemetry: ExecutionTelemetry::off(),
        extension_follows: snapshot.extension.is_some(),
    };
    invocation.telemetry = ExecutionTelemetry::for_snapshot(
        record_telemetry(&record).as_ref(),
        &snapshot,
        &invocation.execution,
    );
    let plan = runner::plan::stage_plan(&snapshot).map_err(StoreError::from)?;

    record.supervisor = ProcessIdentity::current();
    record.phase = Phase::Running;
    record.started_at = Some(jiff::Timestamp::now());
    records.write(&record)?;

    let watcher = tokio::spawn(super::output_watch::watch_output(
        records.clone(),
        namespace.to_owned(),
        name.to_owned(),
        [
            invocation.scratch.stdout_log(),
            invocation.scratch.stderr_log(),
        ],
    ));
    let mut summary =
        runner::execute(&invocation, &plan, &store, &sink, settings, cancel.clone()).await;
    watcher.abort();
    invocation.telemetry.shutdown().await;
    for skipped in &summary.skipped {
        eprintln!(
            "warning: {} left out {}: {}",
            skipped.result, skipped.entry.path, skipped.entry.reason
        );
    }
    // The extension runs only after the agent succeeded (and then saves the manifest).
    let extension = match &snapshot.extension {
        Some(extension) if summary.state == RunState::Succeeded => {
            let env = base_environment(&caller_environment(), false);
            let step = runner::run_extension(
                extension,
                &invocation,
                runner::extension::SavedRun::of(&summary),
                &sink,
                env,
                &dir.join("extension"),
                cancel,
            )
            .await;
            summary.results.extend(step.results.iter().cloned());
            Some(step)
        }
        _ => None,
    };
    // Re-read: a cancel request may have been recorded while the agent ran.
    let mut record = records.read(namespace, name).unwrap_or(record);
    let changed_deadline = ControlFile::local(&dir).read().deadline;
    apply_summary(
        &mut record,
        &summary,
        snapshot.timeout_seconds,
        changed_deadline,
    );
    if let Some(step) = extension {
        apply_extension(&mut record, step);
    }
    notify_finished(&records, &mut record).await;
    records.write(&record)?;
    Ok(record)
}

/// Sends the `execution.finished` event to the record's sinks (best effort: a failed delivery
/// is recorded with the event, never in the run's outcome) and puts every event sent in it.
async fn notify_finished(records: &Records, record: &mut ExecutionRecord) {
    if let Some(settings) = record.notify.clone().filter(notify::NotifySettings::armed) {
        let mut event = record.notification(notify::EXECUTION_FINISHED, None);
        notify::deliver(&settings, &mut event).await;
        let _ = records.append_event(&record.namespace, &record.name, &event);
    }
    record.notifications = records.events(&record.namespace, &record.name);
}

/// Where the record says the run's telemetry goes; an endpoint that no longer parses (a
/// hand-edited record) turns telemetry off rather than failing the run.
fn record_telemetry(record: &ExecutionRecord) -> Option<TelemetryTarget> {
    let endpoint = record.otlp_endpoint.as_deref()?;
    TelemetryTarget::parse("otlp_endpoint", endpoint)
        .inspect_err(|e| tracing::warn!("{e}"))
        .ok()
}

/// The agent's environment: what the machine gives it ([`base_environment`]), the merged
/// plain env, then the bound Secret values.
pub fn agent_env(
    data: &DataDir,
    snapshot: &Snapshot,
    inherit_env: bool,
) -> Result<Vec<(String, String)>, SuperviseError> {
    let mut env = base_environment(&caller_environment(), inherit_env);
    env.extend(runner::plan::plain_agent_env(snapshot));
    let catalog = LocalCatalog::new(data.clone());
    for binding in &snapshot.secrets {
        let value = catalog
            .secret_values(&snapshot.namespace, &binding.secret)
            .and_then(|mut values| values.remove(&binding.key))
            .ok_or_else(|| {
                SuperviseError::SecretGone(binding.secret.clone(), binding.env.clone())
            })?;
        env.push((binding.env.clone(), value));
    }
    Ok(env)
}

/// Copies how the run ended into the record, decided as for a pod ([`run_outcome`]); a
/// deadline `errand deadline set` gave it (`changed_deadline`) is the one a timeout names.
fn apply_summary(
    record: &mut ExecutionRecord,
    summary: &RunSummary,
    timeout_seconds: i64,
    changed_deadline: Option<jiff::Timestamp>,
) {
    let outcome = run_outcome(&RunReport {
        state: Some(summary.state),
        exit_code: summary.exit_code,
        timed_out: summary.timed_out,
        error: summary.error.as_deref(),
        stderr_tail: &summary.stderr_tail,
        results_error: summary.results_error.as_deref(),
        results_saved: summary.results.len(),
        timeout_seconds,
        changed_deadline,
        cancel_requested: record.cancel_requested,
    });
    record.set_outcome(&outcome);
    record.response = summary.response.clone();
    record.exit_code = summary.exit_code;
    record.timed_out = summary.timed_out;
    record.started_at = summary.started_at.or(record.started_at);
    record.completed_at = Some(summary.finished_at.unwrap_or_else(jiff::Timestamp::now));
    record.results = summary.results.clone();
}

/// Copies how the extension's step ended into the record of a run whose agent succeeded
/// ([`extension_outcome`]); the results it saved so far stay listed.
fn apply_extension(record: &mut ExecutionRecord, step: ExtensionSummary) {
    if record.phase == Phase::Succeeded
        && let Some(outcome) = extension_outcome(&step)
    {
        record.set_outcome(&outcome);
    }
    record.extension = Some(step);
}

/// The flags that hand `settings` to a supervisor process.
fn staging_args(settings: &StageSettings) -> [String; 6] {
    [
        "--max-extract-bytes".to_owned(),
        settings.limits.max_bytes.to_string(),
        "--max-extract-entries".to_owned(),
        settings.limits.max_entries.to_string(),
        "--staging-budget-seconds".to_owned(),
        settings.budget.as_secs().to_string(),
    ]
}

/// Starts a detached supervisor process (`errand __supervise`) for a prepared execution and
/// returns its pid once it has recorded itself. It keeps running after this process exits;
/// its own output goes to `supervisor.log` in the execution directory.
pub fn spawn_detached(
    data: &DataDir,
    namespace: &str,
    name: &str,
    settings: &StageSettings,
) -> Result<u32, SuperviseError> {
    let records = Records::new(data.clone());
    let log_path = records.dir(namespace, name).join("supervisor.log");
    let file_error = |e: std::io::Error| SuperviseError::File {
        path: log_path.clone(),
        message: e.to_string(),
    };
    let log = create_private_file(&log_path).map_err(file_error)?;
    let exe = std::env::current_exe().map_err(file_error)?;
    let child = std::process::Command::new(exe)
        .args(["__supervise", "--namespace", namespace, name])
        .args(staging_args(settings))
        .env("ERRAND_HOME", data.root())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(file_error)?)
        .stderr(log)
        // Its own process group: a Ctrl-C in the submitting terminal does not reach it.
        .process_group(0)
        .spawn()
        .map_err(file_error)?;
    let pid = child.id();
    wait_until_supervised(&records, namespace, name, child)?;
    Ok(pid)
}

/// How long a detached supervisor may take to record itself.
const SUPERVISOR_START: Duration = Duration::from_secs(10);

/// Waits until the detached supervisor has recorded itself as the run's supervisor, so that
/// this process (recorded until then) may exit without the run looking lost.
fn wait_until_supervised(
    records: &Records,
    namespace: &str,
    name: &str,
    mut child: std::process::Child,
) -> Result<(), SuperviseError> {
    let deadline = std::time::Instant::now() + SUPERVISOR_START;
    loop {
        let record = records.read(namespace, name)?;
        let recorded = record.supervisor.is_some_and(|s| s.pid == child.id());
        // A supervisor that already ended has written its last record.
        let ended = matches!(child.try_wait(), Ok(Some(_)));
        if recorded || ended || record.phase.is_terminal() {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(SuperviseError::File {
                path: records.dir(namespace, name).join("supervisor.log"),
                message: format!(
                    "the detached supervisor (pid {}) did not start within {}s",
                    child.id(),
                    SUPERVISOR_START.as_secs()
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
