//! The local backend behind the commands: records, catalog and store in the data directory, runs supervised by this process or a detached one.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

mod deployment_supervisor;
mod deployments;
mod detached;
pub mod gc;
mod schedule_supervisor;
mod schedules;

pub use deployment_supervisor::serve_deployment;
pub use schedule_supervisor::serve_schedule;

use crate::api::{Fileset, FilesetStatus, ResultEntry};
use crate::local::lifecycle::{self, LifecycleError};
use crate::local::{
    CheckedObject, DataDir, ExecutionRecord, LocalCatalog, ObjectKind, Records, RemoveError,
    SuperviseError, parse_document, prepare, remove_execution, results_of, run_prepared,
    spawn_detached,
};
use crate::ops::backend::{
    Applied, Backend, DeadlineChanged, Deployments, Document, LogStream, PushedFileset,
};
use crate::ops::excerpt::{ByteWindow, Excerpt, StreamOutput};
use crate::ops::execute::{CreateOptions, ExecutionRequest, RunInputs};
use crate::ops::notify::NotifyChange;
use crate::ops::{BackendConfig, Error, ErrorCode, Execution, download_from_store};
use crate::resolve::Catalog;
use crate::runner::StageSettings;
use crate::runner::outcome::Outcome;
use crate::runner::signals::cancel_on_stop_signal;
use crate::store::Store;
use crate::store::keys::AnyResult;

/// Why a local run takes no webhook: its signing key is a Kubernetes Secret, which only the
/// cluster's controller reads, and the local sinks already reach any endpoint.
const LOCAL_WEBHOOK_REFUSAL: &str = "spec.notify.webhook (--notify-webhook) is delivered by the cluster's controller, which signs it with a Kubernetes Secret; a local run notifies through --notify-command (for example curl to your endpoint) or --notify-file";
/// How often waiting commands look at a record again.
const POLL: Duration = Duration::from_millis(100);
/// How long `cancel` and `delete` wait for a supervisor to exit once its record is final.
const SUPERVISOR_EXIT: Duration = Duration::from_secs(10);
/// How long a restart of a running execution waits, once its run was stopped, for the run's
/// supervisor and agent processes to be gone (a group SIGKILLed goes in milliseconds).
const RESTART_WAIT: Duration = Duration::from_secs(10);
/// How long a restart of a finished execution waits for what still runs of its run (a
/// supervisor that wrote its last record and is exiting).
const FINISHED_RUN_WAIT: Duration = Duration::from_secs(1);

/// The local backend: the data directory, the store and the namespace.
pub struct Local {
    /// The data directory.
    pub data: DataDir,
    /// The store URL.
    pub store_url: String,
    /// The namespace.
    pub namespace: String,
}

impl Local {
    /// The local backend `config` describes, in the data directory the environment names.
    pub fn new(config: &BackendConfig) -> Result<Self, Error> {
        let namespace = config
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let data = DataDir::from_env();
        data.create().map_err(|e| {
            Error::new(
                ErrorCode::IoError,
                format!(
                    "cannot create the data directory {}: {e}",
                    data.root().display()
                ),
            )
        })?;
        let store_url = config
            .store
            .clone()
            .unwrap_or_else(|| data.default_store_url());
        Ok(Self {
            data,
            store_url,
            namespace,
        })
    }

    /// The execution records.
    pub fn records(&self) -> Records {
        Records::new(self.data.clone())
    }

    fn catalog(&self) -> LocalCatalog {
        LocalCatalog::new(self.data.clone())
    }

    /// The store.
    pub fn store(&self) -> Result<Store, Error> {
        Store::open(&self.store_url).map_err(Error::from)
    }

    fn log_path(&self, name: &str, stream: LogStream) -> PathBuf {
        let file = match stream {
            LogStream::Stdout => "stdout.log",
            LogStream::Stderr => "stderr.log",
        };
        self.records()
            .dir(&self.namespace, name)
            .join("scratch")
            .join(file)
    }

    /// Asks the supervisor of a running execution to stop and waits until it has saved its
    /// results and exited.
    async fn stop(&self, name: &str) -> Result<ExecutionRecord, Error> {
        let records = self.records();
        let mut record = records.read(&self.namespace, name).map_err(Error::from)?;
        if record.phase.is_terminal() {
            return Ok(record);
        }
        record.cancel_requested = true;
        records.write(&record).map_err(Error::from)?;
        let alive = records
            .supervisor_pid(&self.namespace, name)
            .is_some_and(|pid| {
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                )
                .is_ok()
            });
        if !alive {
            // Nobody is running it any more (never started, or the supervisor died): close it here.
            let outcome = match record.started_at {
                None => Outcome::cancelled_before_start(),
                Some(_) => Outcome::cancelled("cancelled after its supervisor had ended"),
            };
            record.set_outcome(&outcome);
            record.completed_at = Some(jiff::Timestamp::now());
            records.write(&record).map_err(Error::from)?;
            return Ok(record);
        }
        let record = loop {
            let record = records.read(&self.namespace, name).map_err(Error::from)?;
            if record.phase.is_terminal() {
                break record;
            }
            tokio::time::sleep(POLL).await;
        };
        // The record is the supervisor's last write; wait for it to be gone too, so that nothing
        // of the run is left when this returns.
        if let Some(pid) = records.supervisor_pid(&self.namespace, name) {
            let deadline = std::time::Instant::now() + SUPERVISOR_EXIT;
            while process_running(pid) && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        Ok(record)
    }

    /// The record on disk of the execution a command shows as `execution`.
    fn record_of(&self, execution: &Execution) -> Result<ExecutionRecord, Error> {
        self.records()
            .read(&self.namespace, &execution.name)
            .map_err(Error::from)
    }

    /// Hands the prepared execution `name` to a detached supervisor; its record once it has.
    fn spawn(&self, name: &str, staging: &StageSettings) -> Result<ExecutionRecord, Error> {
        spawn_detached(&self.data, &self.namespace, name, staging).map_err(supervise_error)?;
        self.records()
            .read(&self.namespace, name)
            .map_err(Error::from)
    }

    /// Keeps what the input flags gave a prepared execution: its standard input beside its
    /// record, its tags and shown variables in it.
    fn record_inputs(
        &self,
        mut record: ExecutionRecord,
        inputs: &RunInputs,
        notify: &NotifyChange,
    ) -> Result<ExecutionRecord, Error> {
        if inputs.stdin.is_none()
            && inputs.tags.is_empty()
            && inputs.env.is_empty()
            && !notify.given()
        {
            return Ok(record);
        }
        if notify.given() {
            record.notify = Some(notify.apply(Default::default(), (0, 0))?);
        }
        let records = self.records();
        if let Some(stdin) = &inputs.stdin {
            records
                .write_stdin(&self.namespace, &record.name, stdin)
                .map_err(Error::from)?;
            record.stdin_bytes = Some(stdin.len() as u64);
        }
        record.tags = inputs.tags.clone();
        record.env = inputs.shown_env();
        records.write(&record).map_err(Error::from)?;
        Ok(record)
    }

    /// A rerun keeps what the user set on the execution it reruns (tags, shown variables,
    /// notifications, standard input), except what this request sets itself.
    fn carry_from_rerun_source(
        &self,
        record: ExecutionRecord,
        source: &str,
        inputs: &RunInputs,
        notify: &NotifyChange,
    ) -> Result<ExecutionRecord, Error> {
        let records = self.records();
        let Ok(source) = records.read(&self.namespace, source) else {
            return Ok(record);
        };
        let mut carried = record.clone().with_user_settings_of(&source);
        if !inputs.tags.is_empty() {
            carried.tags = record.tags;
        }
        if !inputs.env.is_empty() {
            carried.env = record.env;
        }
        if notify.given() {
            carried.notify = record.notify;
        }
        if inputs.stdin.is_some() || source.stdin_bytes.is_none() {
            carried.stdin_bytes = record.stdin_bytes;
        } else {
            let from = records.stdin_file(&self.namespace, &source.name);
            let stdin = std::fs::read(&from)
                .map_err(|e| Error::new(ErrorCode::IoError, format!("{}: {e}", from.display())))?;
            records
                .write_stdin(&self.namespace, &carried.name, &stdin)
                .map_err(Error::from)?;
        }
        records.write(&carried).map_err(Error::from)?;
        Ok(carried)
    }

    /// Checks every document for the catalog: its schema, name, namespace and an Agent's
    /// immutability, also against the documents before it.
    fn check_all(&self, documents: &[Document]) -> Result<Vec<CheckedObject>, Error> {
        let catalog = self.catalog();
        let mut checked: Vec<CheckedObject> = Vec::new();
        for document in documents {
            let refused = |e: String| {
                Error::new(
                    ErrorCode::InvalidManifest,
                    format!("{}: {e}", document.source),
                )
            };
            let manifest =
                parse_document(document.object.clone()).map_err(|e| refused(e.to_string()))?;
            let object = catalog
                .check_apply(&manifest, &self.namespace, &checked)
                .map_err(|e| refused(e.to_string()))?;
            checked.push(object);
        }
        Ok(checked)
    }

    /// `errand __supervise NAME`: the detached process behind `execute --no-wait`.
    pub async fn supervise(&self, name: &str, settings: StageSettings) -> Result<(), Error> {
        run_prepared(
            &self.data,
            &self.namespace,
            name,
            true,
            &settings,
            cancel_on_stop_signal(),
        )
        .await
        .map(|_| ())
        .map_err(supervise_error)
    }
}

#[async_trait]
impl Backend for Local {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn execution_names(&self) -> Result<Vec<String>, Error> {
        Ok(self.records().names(&self.namespace))
    }

    async fn execution(&self, name: &str) -> Result<Execution, Error> {
        self.records()
            .read_current(&self.namespace, name)
            .map(Execution::from)
            .map_err(Error::from)
    }

    async fn executions(&self) -> Result<Vec<Execution>, Error> {
        let records = self.records();
        Ok(records
            .names(&self.namespace)
            .iter()
            .filter_map(|n| records.read_current(&self.namespace, n).ok())
            .map(Execution::from)
            .collect())
    }

    async fn set_notify(
        &self,
        record: &Execution,
        args: &NotifyChange,
    ) -> Result<Execution, Error> {
        let size =
            |stream| std::fs::metadata(self.log_path(&record.name, stream)).map_or(0, |m| m.len());
        let sizes = (size(LogStream::Stdout), size(LogStream::Stderr));
        let records = self.records();
        let mut current = records
            .read(&self.namespace, &record.name)
            .map_err(Error::from)?;
        current.notify = Some(args.apply(current.notify.clone().unwrap_or_default(), sizes)?);
        records.write(&current).map_err(Error::from)?;
        Ok(current.into())
    }

    async fn set_tags(&self, record: &Execution, tags: &[String]) -> Result<Execution, Error> {
        let records = self.records();
        let mut current = records
            .read(&self.namespace, &record.name)
            .map_err(Error::from)?;
        current.tags = tags.to_vec();
        records.write(&current).map_err(Error::from)?;
        Ok(current.into())
    }

    async fn create(
        &self,
        request: &ExecutionRequest,
        options: &CreateOptions,
    ) -> Result<Execution, Error> {
        if request.spec.notify.is_some() {
            return Err(Error::argument(LOCAL_WEBHOOK_REFUSAL));
        }
        gc::automatic(self, options.report_gc).await;
        let record = prepare(
            &self.data,
            &self.store_url,
            &self.namespace,
            request.name.as_deref(),
            &request.spec,
            options.inherit_env,
            options.otlp_endpoint.as_ref(),
        )
        .await
        .map_err(supervise_error)?;
        let record = self.record_inputs(record, &request.inputs, &options.notify)?;
        let record = match &request.spec.rerun_of {
            Some(source) => self.carry_from_rerun_source(
                record,
                &source.name,
                &request.inputs,
                &options.notify,
            )?,
            None => record,
        };
        if !request.spec.held {
            return Ok(record.into());
        }
        lifecycle::hold_created(&self.records(), record)
            .map(Execution::from)
            .map_err(Error::from)
    }

    async fn detach(
        &self,
        record: &Execution,
        options: &CreateOptions,
    ) -> Result<Execution, Error> {
        self.spawn(&record.name, &options.staging)
            .map(Execution::from)
    }

    async fn run(
        &self,
        record: &Execution,
        options: &CreateOptions,
        passthrough: bool,
    ) -> Result<Execution, Error> {
        run_prepared(
            &self.data,
            &self.namespace,
            &record.name,
            passthrough,
            &options.staging,
            cancel_on_stop_signal(),
        )
        .await
        .map(Execution::from)
        .map_err(supervise_error)
    }

    async fn watch(&self, record: &Execution, print: bool) -> Result<Execution, Error> {
        let mut offset = 0u64;
        loop {
            let record = self.execution(&record.name).await?;
            if print {
                offset = copy_new_output(&self.log_path(&record.name, LogStream::Stdout), offset);
            }
            if record.phase.is_terminal() {
                return Ok(record);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn logs(
        &self,
        record: &Execution,
        stream: LogStream,
        lines: usize,
    ) -> Result<(&'static str, Vec<String>), Error> {
        let text = std::fs::read_to_string(self.log_path(&record.name, stream)).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let last = all[all.len().saturating_sub(lines)..]
            .iter()
            .map(|l| (*l).to_owned())
            .collect();
        Ok((stream.label(), last))
    }

    async fn output(
        &self,
        record: &Execution,
        window: Option<ByteWindow>,
    ) -> Result<Vec<StreamOutput>, Error> {
        [LogStream::Stdout, LogStream::Stderr]
            .into_iter()
            .map(|stream| {
                let path = self.log_path(&record.name, stream);
                let (total, excerpt) = match window {
                    // A log not written yet is empty.
                    None => (std::fs::metadata(&path).map_or(0, |m| m.len()), None),
                    Some(window) => {
                        let (total, excerpt) = read_window(&path, window).map_err(|e| {
                            Error::new(ErrorCode::IoError, format!("{}: {e}", path.display()))
                        })?;
                        (total, Some(excerpt))
                    }
                };
                Ok(StreamOutput {
                    stream: stream.label().to_owned(),
                    total_bytes: Some(total),
                    excerpt,
                })
            })
            .collect()
    }

    async fn results(&self, record: &Execution) -> Result<Vec<ResultEntry>, Error> {
        Ok(record.results.clone())
    }

    async fn download(
        &self,
        record: &Execution,
        result: AnyResult,
        file: &Path,
    ) -> Result<u64, Error> {
        let (store, execution) = results_of(&self.record_of(record)?).map_err(Error::from)?;
        download_from_store(&store, &execution, &result, file).await
    }

    async fn cancel(&self, record: &Execution) -> Result<Execution, Error> {
        self.stop(&record.name).await.map(Execution::from)
    }

    async fn signal(
        &self,
        record: &Execution,
        signal: nix::sys::signal::Signal,
    ) -> Result<Execution, Error> {
        use nix::sys::signal::Signal;
        let (records, record) = (self.records(), self.record_of(record)?);
        if signal == Signal::SIGKILL {
            lifecycle::request_signal(&records, &record, None).map_err(lifecycle_error)?;
            return self.stop(&record.name).await.map(Execution::from);
        }
        lifecycle::request_signal(&records, &record, Some(signal.as_str()))
            .map_err(lifecycle_error)?;
        self.execution(&record.name).await
    }

    async fn change_deadline(
        &self,
        record: &Execution,
        in_seconds: Option<u64>,
    ) -> Result<DeadlineChanged, Error> {
        let (records, record) = (self.records(), self.record_of(record)?);
        let snapshot = records
            .snapshot(&self.namespace, &record.name)
            .map_err(Error::from)?;
        let accepted =
            lifecycle::change_deadline(&records, &record, snapshot.timeout_seconds, in_seconds)
                .map_err(lifecycle_error)?;
        Ok(DeadlineChanged {
            execution: record.name.clone(),
            accepted_at: accepted.accepted_at,
            deadline_at: accepted.deadline_at,
            cleared: in_seconds.is_none(),
        })
    }

    async fn start(&self, record: &Execution, staging: &StageSettings) -> Result<Execution, Error> {
        let records = self.records();
        lifecycle::release_created(&records, &self.namespace, &record.name)
            .map_err(lifecycle_error)?;
        self.spawn(&record.name, staging).map(Execution::from)
    }

    async fn restart(
        &self,
        record: &Execution,
        staging: &StageSettings,
    ) -> Result<Execution, Error> {
        let records = self.records();
        let current = records
            .read(&self.namespace, &record.name)
            .map_err(Error::from)?;
        // A running execution ends first, as a cancel would end it, and the restart waits for
        // its supervisor and agent's processes to be gone, so that it never stops one run
        // without starting the next. A finished one is not stopped: what still runs of its run
        // a moment after it ended refuses the restart, which then changes nothing.
        let (ended, bound) = if current.phase.is_terminal() {
            (current, FINISHED_RUN_WAIT)
        } else {
            (self.stop(&record.name).await?, RESTART_WAIT)
        };
        if let Some(left) = lifecycle::wait_until_gone(&records, &ended, bound).await {
            return Err(lifecycle_error(lifecycle::restart_refusal(
                &record.name,
                left,
            )));
        }
        lifecycle::reset_for_restart(&records, &ended)
            .await
            .map_err(lifecycle_error)?;
        self.spawn(&record.name, staging).map(Execution::from)
    }

    async fn delete(&self, record: &Execution) -> Result<Option<usize>, Error> {
        let record = self.stop(&record.name).await?;
        let removed = remove_execution(&self.records(), &record)
            .await
            .map_err(|e| match e {
                RemoveError::Store(e) => Error::from(e),
                RemoveError::Record(e) => Error::from(e),
            })?;
        Ok(Some(removed))
    }

    async fn apply(&self, documents: &[Document]) -> Result<Vec<Applied>, Error> {
        let checked = self.check_all(documents)?;
        let catalog = self.catalog();
        for object in &checked {
            catalog
                .store(object)
                .map_err(|e| Error::new(ErrorCode::IoError, e.to_string()))?;
        }
        Ok(checked
            .into_iter()
            .map(|o| Applied {
                kind: o.kind.kind().to_owned(),
                namespace: (!o.kind.is_cluster_scoped()).then_some(o.namespace),
                name: o.name,
            })
            .collect())
    }

    async fn objects(&self, kind: ObjectKind) -> Result<Vec<serde_json::Value>, Error> {
        let catalog = self.catalog();
        let cluster_scoped: Option<Vec<serde_json::Value>> = match kind {
            ObjectKind::Runtime => Some(json_objects(&catalog.runtime_objects())),
            ObjectKind::Extension => Some(json_objects(&catalog.extension_objects())),
            _ => None,
        };
        if let Some(objects) = cluster_scoped {
            return Ok(objects);
        }
        Ok(catalog
            .list(&self.namespace, kind)
            .iter()
            .filter_map(|name| match kind {
                ObjectKind::Agent => catalog
                    .agent_object(&self.namespace, name)
                    .and_then(|o| serde_json::to_value(o).ok()),
                _ => catalog
                    .environment_object(&self.namespace, name)
                    .and_then(|o| serde_json::to_value(o).ok()),
            })
            .collect())
    }

    async fn delete_object(&self, kind: ObjectKind, name: &str) -> Result<(), Error> {
        if self.catalog().delete(&self.namespace, kind, name) {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::NotFound,
            format!(
                "{} {name:?} not found in namespace {:?}",
                kind.kind(),
                self.namespace
            ),
        ))
    }

    async fn push_fileset(&self, name: Option<&str>, dir: &Path) -> Result<PushedFileset, Error> {
        let store = self.store()?;
        let pushed = store
            .push_fileset(&self.namespace, dir)
            .await
            .map_err(|e| Error::pushing(dir, e))?;
        let name = name.map_or_else(
            || format!("workdir-{}", &pushed.digest[..12]),
            str::to_owned,
        );
        let catalog = self.catalog();
        let entry = PushedFileset {
            new_fileset: catalog.fileset(&self.namespace, &name).is_none(),
            new_blob: pushed.created.then(|| pushed.digest.clone()),
            status: FilesetStatus {
                digest: Some(format!("sha256:{}", pushed.digest)),
                size: Some(pushed.size),
                file_count: Some(pushed.file_count),
                pushed_at: Some(Time(jiff::Timestamp::now())),
            },
            name,
        };
        if let Err(e) = catalog.set_fileset(&self.namespace, &entry.name, &entry.status) {
            self.undo_push(&entry).await;
            return Err(Error::new(ErrorCode::IoError, e.to_string()));
        }
        Ok(entry)
    }

    async fn undo_push(&self, pushed: &PushedFileset) {
        if pushed.new_fileset {
            self.catalog()
                .delete(&self.namespace, ObjectKind::Fileset, &pushed.name);
        }
        if let (Some(digest), Ok(store)) = (&pushed.new_blob, self.store()) {
            let _ = store.remove_pushed_fileset(&self.namespace, digest).await;
        }
    }

    async fn filesets(&self) -> Result<Vec<Fileset>, Error> {
        let catalog = self.catalog();
        Ok(catalog
            .list(&self.namespace, ObjectKind::Fileset)
            .iter()
            .filter_map(|n| catalog.fileset_object(&self.namespace, n))
            .collect())
    }

    fn deployments(&self) -> &dyn Deployments {
        self
    }

    fn schedules(&self) -> &dyn crate::ops::backend::Schedules {
        self
    }
}

/// Each of `objects` as JSON.
fn json_objects<T: serde::Serialize>(objects: &[T]) -> Vec<serde_json::Value> {
    objects
        .iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect()
}

/// The size of the file at `path` and the excerpt `window` selects of it (a file not written
/// yet is empty); reads only the bytes it shows.
fn read_window(path: &Path, window: ByteWindow) -> std::io::Result<(u64, Excerpt)> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((0, Excerpt::of(&[], 0, 0)));
        }
        Err(e) => return Err(e),
    };
    let total = file.metadata()?.len();
    let (start, end) = window.range(total);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(end - start).read_to_end(&mut bytes)?;
    Ok((total, Excerpt::of(&bytes, start, total)))
}

/// Prints what was appended to `path` since `offset`; returns the new offset.
fn copy_new_output(path: &Path, offset: u64) -> u64 {
    let Ok(mut file) = std::fs::File::open(path) else {
        return offset;
    };
    let mut fresh = Vec::new();
    if file.seek(SeekFrom::Start(offset)).is_err() || file.read_to_end(&mut fresh).is_err() {
        return offset;
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&fresh).and_then(|()| stdout.flush());
    offset + fresh.len() as u64
}

/// Whether process `pid` runs (a zombie, exited but not yet reaped, does not).
fn process_running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// A refused or failed lifecycle change as a CLI error.
fn lifecycle_error(error: LifecycleError) -> Error {
    match error {
        LifecycleError::InvalidState(message) => Error::new(ErrorCode::InvalidState, message),
        LifecycleError::Record(error) => Error::from(error),
        LifecycleError::Store(error) => Error::from(error),
        LifecycleError::Io(error) => Error::new(ErrorCode::IoError, error.to_string()),
    }
}

/// A supervision failure as a CLI error.
fn supervise_error(error: SuperviseError) -> Error {
    match error {
        SuperviseError::Invalid(invalid) => invalid.into(),
        SuperviseError::Record(error) => Error::from(error),
        SuperviseError::Store(error) => Error::from(error),
        other => Error::new(ErrorCode::IoError, other.to_string()),
    }
}
