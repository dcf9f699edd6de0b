//! What a backend is to the commands: the [`Backend`] trait the local and cluster backends implement, and what both share (finding an execution by prefix).
//!
//! The commands (`cli/commands/`) are written once against this trait; a backend holds only
//! what differs between running on this machine and running through a Kubernetes API server.

use std::path::Path;

use async_trait::async_trait;
use serde::Serialize;

use super::Error;
use super::excerpt::{ByteWindow, StreamOutput};
pub use super::execute::PushedFileset;
use super::execute::{CreateOptions, ExecutionRequest};
use super::gateway_client::{GatewayClient, GatewayEndpoint};
use super::notify::NotifyChange;
use crate::api::tags::TagPattern;
use crate::api::{AgentDeployment, AgentSchedule, Fileset, Phase, ResultEntry};
use crate::local::ObjectKind;
use crate::ops::Execution;
use crate::runner::StageSettings;
use crate::store::keys::AnyResult;

/// Which of the agent's output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl LogStream {
    /// Its name in answers.
    pub fn label(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

/// One manifest document to apply, with where it came from (`FILE: document N`).
#[derive(Clone, Debug)]
pub struct Document {
    /// `FILE: document N`, for messages.
    pub source: String,
    /// The object as written.
    pub object: serde_json::Value,
}

/// One object `apply` stored.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct Applied {
    /// Its kind (`Agent`, `Secret`, ...).
    pub kind: String,
    /// Its namespace; none for a cluster-scoped kind (AgentRuntime).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// A deadline change the backend accepted.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct DeadlineChanged {
    /// The execution.
    pub execution: String,
    /// When the change was accepted (written locally, recorded by the controller on a
    /// cluster): the moment `--in` counts from.
    pub accepted_at: jiff::Timestamp,
    /// The deadline in effect now; none when it was cleared before the agent started (then
    /// `timeoutSeconds` counts from the start).
    pub deadline_at: Option<jiff::Timestamp>,
    /// Whether the change cleared the deadline back to the one `timeoutSeconds` gives.
    pub cleared: bool,
}

/// Which executions a listing shows.
#[derive(Clone, Debug, Default)]
pub struct ExecutionFilter {
    /// Any of these phases; every phase when empty.
    pub phases: Vec<Phase>,
    /// All of these tag patterns.
    pub tags: Vec<TagPattern>,
}

impl ExecutionFilter {
    /// Whether `record` is shown.
    pub fn matches(&self, record: &Execution) -> bool {
        (self.phases.is_empty() || self.phases.contains(&record.phase))
            && self.tags.iter().all(|p| p.matches(&record.tags))
    }
}

/// Where executions run and objects live: this machine, or a cluster.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The namespace the commands act in.
    fn namespace(&self) -> &str;

    /// The names of the executions in the namespace.
    async fn execution_names(&self) -> Result<Vec<String>, Error>;

    /// The record of the execution named exactly `name`, as it stands.
    async fn execution(&self, name: &str) -> Result<Execution, Error>;

    /// The records of every execution in the namespace.
    async fn executions(&self) -> Result<Vec<Execution>, Error>;

    /// The records of the executions `filter` selects.
    async fn find_executions(&self, filter: &ExecutionFilter) -> Result<Vec<Execution>, Error> {
        let mut records = self.executions().await?;
        records.retain(|r| filter.matches(r));
        Ok(records)
    }

    /// Replaces an execution's tags (checked and sorted) and returns its record.
    async fn set_tags(&self, record: &Execution, tags: &[String]) -> Result<Execution, Error>;

    /// Applies `notify set`'s flags to a running execution's notification settings.
    async fn set_notify(
        &self,
        record: &Execution,
        change: &NotifyChange,
    ) -> Result<Execution, Error>;

    /// Creates the execution `request` describes, checked as the API server would check it
    /// (callers go through [`ExecutionRequest::create`], which also removes the workdir a
    /// refused request pushed).
    async fn create(
        &self,
        request: &ExecutionRequest,
        options: &CreateOptions,
    ) -> Result<Execution, Error>;

    /// Lets a created execution run without this process, and returns its record.
    async fn detach(&self, record: &Execution, options: &CreateOptions)
    -> Result<Execution, Error>;

    /// Runs (or follows) a created execution until it ends, its output passed through when
    /// `passthrough`.
    async fn run(
        &self,
        record: &Execution,
        options: &CreateOptions,
        passthrough: bool,
    ) -> Result<Execution, Error>;

    /// Follows an execution something else runs until it ends, printing its stdout as it grows
    /// when `print`; the final record carries the agent's response.
    async fn watch(&self, record: &Execution, print: bool) -> Result<Execution, Error>;

    /// The last `lines` lines of the agent's `stream`, and which stream they are really from
    /// (`stdout`, `stderr`, or `stdout+stderr` where the two cannot be told apart).
    async fn logs(
        &self,
        record: &Execution,
        stream: LogStream,
        lines: usize,
    ) -> Result<(&'static str, Vec<String>), Error>;

    /// The agent's output streams: their sizes as far as known without reading them, and with
    /// `window` the excerpt of each it selects.
    async fn output(
        &self,
        record: &Execution,
        window: Option<ByteWindow>,
    ) -> Result<Vec<StreamOutput>, Error>;

    /// The results saved so far, with size and sha256.
    async fn results(&self, record: &Execution) -> Result<Vec<ResultEntry>, Error>;

    /// Streams one result into `file`; returns its size.
    async fn download(
        &self,
        record: &Execution,
        result: AnyResult,
        file: &Path,
    ) -> Result<u64, Error>;

    /// Asks a running execution to stop and waits until it has saved its results.
    async fn cancel(&self, record: &Execution) -> Result<Execution, Error>;

    /// Sends `signal` to a running execution: `SIGKILL` stops it without the agent's grace
    /// period and waits until its results are saved; any other signal but `SIGTERM` (which is
    /// [`Backend::cancel`]) goes to the agent's process group where the backend can send it.
    async fn signal(
        &self,
        record: &Execution,
        signal: nix::sys::signal::Signal,
    ) -> Result<Execution, Error>;

    /// Sets the deadline of an execution that has not ended to `in_seconds` from the moment the
    /// change is accepted, or with `None` back to the one `timeoutSeconds` gives.
    async fn change_deadline(
        &self,
        record: &Execution,
        in_seconds: Option<u64>,
    ) -> Result<DeadlineChanged, Error>;

    /// Starts an execution `create` defined (phase `Created`).
    async fn start(&self, record: &Execution, staging: &StageSettings) -> Result<Execution, Error>;

    /// Runs a finished execution again in place, from the same snapshot (local only: on a
    /// cluster a run happens at most once, and `rerun` makes a new execution).
    async fn restart(
        &self,
        record: &Execution,
        staging: &StageSettings,
    ) -> Result<Execution, Error>;

    /// Deletes an execution with its results (stopping it first); returns how many stored
    /// results were removed, when the backend knows.
    async fn delete(&self, record: &Execution) -> Result<Option<usize>, Error>;

    /// Applies every document, all or nothing: each is checked before the first is stored.
    async fn apply(&self, documents: &[Document]) -> Result<Vec<Applied>, Error>;

    /// The Agents or AgentEnvironments of the namespace, or every AgentRuntime (cluster-scoped),
    /// as objects.
    async fn objects(&self, kind: ObjectKind) -> Result<Vec<serde_json::Value>, Error>;

    /// Deletes one Agent, AgentEnvironment, AgentRuntime or Fileset.
    async fn delete_object(&self, kind: ObjectKind, name: &str) -> Result<(), Error>;

    /// Packs `dir` and stores it as the content of Fileset `name` (by default
    /// `workdir-<digest prefix>`), creating the Fileset when it does not exist.
    async fn push_fileset(&self, name: Option<&str>, dir: &Path) -> Result<PushedFileset, Error>;

    /// Takes back what a push of this command added, for a command that fails after pushing.
    async fn undo_push(&self, pushed: &PushedFileset);

    /// The Filesets of the namespace.
    async fn filesets(&self) -> Result<Vec<Fileset>, Error>;

    /// Where AgentDeployments live.
    fn deployments(&self) -> &dyn Deployments;

    /// Its AgentSchedules.
    fn schedules(&self) -> &dyn Schedules;
}

/// AgentDeployments as a backend keeps them. The commands (`deploy.rs`) wait, redeploy and
/// talk to the gateway the same way over any backend that has them.
#[async_trait]
pub trait Deployments: Send + Sync {
    /// Creates `deployment` (checked at admission as the API server checks it).
    async fn create_deployment(
        &self,
        deployment: &AgentDeployment,
    ) -> Result<AgentDeployment, Error>;

    /// The deployment named `name`.
    async fn deployment(&self, name: &str) -> Result<AgentDeployment, Error>;

    /// Every deployment of the namespace.
    async fn deployments(&self) -> Result<Vec<AgentDeployment>, Error>;

    /// Points deployment `name` at Agent `agent`, recording `replaced` as the Agent it
    /// replaces; with `dry_run` only checks that admission would accept it.
    async fn point_at_agent(
        &self,
        name: &str,
        agent: &str,
        replaced: &str,
        dry_run: bool,
    ) -> Result<(), Error>;

    /// Forgets the replaced Agent a redeploy recorded on deployment `name`.
    async fn forget_replaced_agent(&self, name: &str) -> Result<(), Error>;

    /// Deletes deployment `name` with its children and waits until they are gone.
    async fn delete_deployment(&self, name: &str) -> Result<(), Error>;

    /// A client of the gateway that reaches this backend's deployments: errand's gateway
    /// where `endpoint` says (cluster), or one served in this process (local).
    async fn gateway(&self, endpoint: &GatewayEndpoint) -> Result<GatewayClient, Error>;

    /// Follows the output of deployment `name`'s agent servers: the last `lines` lines, then
    /// (with `follow`) what they write until they stop or the command is interrupted.
    async fn logs(&self, name: &str, lines: usize, follow: bool) -> Result<(), Error>;
}

/// A schedule with, locally, whether its supervisor runs.
#[derive(Clone, Debug)]
pub struct ScheduleEntry {
    /// The schedule with its status.
    pub schedule: AgentSchedule,
    /// Whether its local supervisor process runs; none on a cluster, where the controller
    /// runs every schedule.
    pub supervisor_running: Option<bool>,
}

/// The AgentSchedules of the namespace, run by the controller on a cluster and by a detached
/// supervisor per schedule on this machine.
#[async_trait]
pub trait Schedules: Send + Sync {
    /// Creates `schedule` (checked at admission as the API server checks it) and, locally,
    /// starts its supervisor.
    async fn create_schedule(&self, schedule: &AgentSchedule) -> Result<ScheduleEntry, Error>;

    /// The schedule named `name`.
    async fn schedule(&self, name: &str) -> Result<ScheduleEntry, Error>;

    /// Every schedule of the namespace, by name.
    async fn schedules(&self) -> Result<Vec<ScheduleEntry>, Error>;

    /// Suspends (`true`) or resumes schedule `name`; resuming a local schedule also starts its
    /// supervisor when none runs.
    async fn set_suspend(&self, name: &str, suspend: bool) -> Result<ScheduleEntry, Error>;

    /// Creates one execution of schedule `name` now, as its next run would be (counted by its
    /// concurrency policy and history limits), and returns its record.
    async fn trigger(&self, name: &str) -> Result<Execution, Error>;

    /// Deletes schedule `name` with its executions (as the cluster's garbage collector
    /// deletes what it owns) and, locally, stops its supervisor.
    async fn delete_schedule(&self, name: &str) -> Result<(), Error>;
}

impl ExecutionRequest {
    /// Drops what building the request left behind (the workdir it pushed), for a request that
    /// will not be created.
    pub async fn abandon(&self, backend: &dyn Backend) {
        undo_push(backend, self.pushed.as_ref()).await;
    }

    /// Creates the execution on `backend`; a refused one leaves nothing behind, not even the
    /// workdir the request pushed.
    pub async fn create(
        &self,
        backend: &dyn Backend,
        options: &CreateOptions,
    ) -> Result<Execution, Error> {
        let created = backend.create(self, options).await;
        if created.is_err() {
            self.abandon(backend).await;
        }
        created
    }
}

pub async fn undo_push(backend: &dyn Backend, pushed: Option<&PushedFileset>) {
    if let Some(pushed) = pushed {
        backend.undo_push(pushed).await;
    }
}
