//! The cluster backend behind the commands: AgentExecutions and the catalog through the API server, logs from the agent's pod, results and Fileset content through errand's `data.errand.dev` API.
//!
//! It needs what a tenant has: RBAC in a namespace. An operator may name the cluster's store
//! with `--store` to read results from it directly instead.

mod apply;
mod control;
mod data;
mod deployments;
mod inputs;
mod schedules;

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;

use crate::api::contract::{
    AGENT_CONTAINER, EXECUTION_UID_LABEL, SHOWN_ENV_ANNOTATION, STDIN_BYTES_ANNOTATION,
};
use crate::api::{
    Agent, AgentEnvironment, AgentExecution, AgentExtension, AgentRuntime, Fileset, FilesetSpec,
    FilesetStatus, Phase, ResultEntry, SnapshotRef,
};
use crate::archive::{PackOptions, pack_dir};
use crate::local::{ObjectKind, generate_name};
use crate::ops::Execution;
use crate::ops::backend::{
    Applied, Backend, DeadlineChanged, Document, ExecutionFilter, LogStream, PushedFileset,
};
use crate::ops::download_from_store;
use crate::ops::excerpt::{ByteWindow, StreamOutput};
use crate::ops::execute::{CreateOptions, ExecutionRequest};
use crate::ops::notify::NotifyChange;
use crate::ops::{BackendConfig, Error, ErrorCode};
use crate::retention::sweep::References;
use crate::runner::outcome::Outcome;
use crate::store::Store;
use crate::store::keys::{AnyResult, ExecutionId, ResultName};

pub use apply::FIELD_MANAGER;
use data::DataApi;
use inputs::{label_inputs, retag_patch, stdin_as_input, tag_selector};

/// The one log a pod keeps of the agent's stdout and stderr together.
const COMBINED_LOG: &str = "stdout+stderr";

/// How often waiting commands look at an execution again.
const POLL: Duration = Duration::from_millis(500);

/// A connection to a cluster, in one namespace.
pub struct Cluster {
    client: Client,
    namespace: String,
    data: DataApi,
    /// The store an operator named to read results from directly.
    store_url: Option<String>,
    /// The bearer token of the kubeconfig's user, if it has one (the gateway's default).
    token: Option<String>,
}

impl Cluster {
    /// Connects as `wanted` says: its kubeconfig and context, else the current kube context
    /// (or the in-cluster config).
    pub async fn connect(wanted: &BackendConfig) -> Result<Self, Error> {
        let unreachable = |e: String| {
            Error::new(
                ErrorCode::ClusterUnreachable,
                format!("no Kubernetes configuration: {e}; use --local to run on this machine"),
            )
        };
        let options = KubeConfigOptions {
            context: wanted.context.clone(),
            ..KubeConfigOptions::default()
        };
        let config = match (&wanted.kubeconfig, &wanted.context) {
            (Some(path), _) => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                    Error::argument(format!("--kubeconfig {}: {e}", path.display()))
                })?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| Error::argument(format!("--kubeconfig {}: {e}", path.display())))?
            }
            (None, Some(context)) => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| Error::argument(format!("--context {context}: {e}")))?,
            (None, None) => kube::Config::infer()
                .await
                .map_err(|e| unreachable(e.to_string()))?,
        };
        let namespace = wanted
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config.clone()).map_err(|e| unreachable(e.to_string()))?;
        let token = config
            .auth_info
            .token
            .as_ref()
            .map(|t| secrecy::ExposeSecret::expose_secret(t).to_owned());
        Ok(Self {
            token,
            data: DataApi::new(client.clone(), config, namespace.clone()),
            client,
            namespace,
            store_url: wanted.store.clone(),
        })
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn executions(&self) -> Api<AgentExecution> {
        self.api()
    }

    /// Waits until the execution reaches a terminal phase.
    async fn wait(&self, name: &str) -> Result<AgentExecution, Error> {
        loop {
            let execution = self.executions().get(name).await.map_err(api_error)?;
            if phase(&execution).is_some_and(Phase::is_terminal) {
                return Ok(execution);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The record of `execution`, with the agent's response once its run record is saved.
    async fn record(&self, execution: &AgentExecution) -> Execution {
        let mut record = execution_of(execution, self.store_url.as_deref());
        let has_run_result = record
            .results
            .iter()
            .any(|r| r.name == ResultName::RunResult.as_str());
        if record.phase.is_terminal() && has_run_result {
            match self.response(&record.name).await {
                Ok(response) => record.response = response,
                Err(e) => eprintln!(
                    "warning: the response of execution {} could not be read: {}",
                    record.name, e.message
                ),
            }
        }
        record
    }

    /// The agent's response, from the execution's `run_result`.
    async fn response(&self, name: &str) -> Result<Option<String>, Error> {
        let bytes = self.data.result_bytes(name, ResultName::RunResult).await?;
        let run: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            Error::new(
                ErrorCode::ClusterError,
                format!("run_result of execution {name} is not JSON: {e}"),
            )
        })?;
        Ok(run["response"].as_str().map(str::to_owned))
    }

    /// The agent pod of the execution with this uid, if one exists.
    async fn pod(&self, uid: &str) -> Result<Option<Pod>, Error> {
        let selector = format!("{EXECUTION_UID_LABEL}={uid}");
        let list = self
            .api::<Pod>()
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_error)?;
        Ok(list.items.into_iter().next())
    }

    /// Prints the agent container's log as it grows, until the container ends or the
    /// execution ends without one.
    async fn follow_log(&self, name: &str, uid: &str) {
        loop {
            let execution = self.executions().get(name).await.ok();
            if execution
                .as_ref()
                .and_then(phase)
                .is_none_or(Phase::is_terminal)
            {
                return;
            }
            if let Ok(Some(pod)) = self.pod(uid).await {
                let params = LogParams {
                    container: Some(AGENT_CONTAINER.into()),
                    follow: true,
                    ..Default::default()
                };
                if let Ok(stream) = self
                    .api::<Pod>()
                    .log_stream(&pod.metadata.name.unwrap_or_default(), &params)
                    .await
                {
                    let mut lines = stream.lines();
                    while let Some(Ok(line)) = lines.next().await {
                        crate::ops::stdout::write_line(line);
                    }
                    return;
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Creates Fileset `name` unless it exists; whether it created it.
    async fn ensure_fileset(&self, name: &str) -> Result<bool, Error> {
        let filesets = self.api::<Fileset>();
        if filesets.get_opt(name).await.map_err(api_error)?.is_some() {
            return Ok(false);
        }
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match filesets
            .create(&params, &Fileset::new(name, FilesetSpec::default()))
            .await
        {
            Ok(_) => Ok(true),
            // Created meanwhile by another push: push to it all the same.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(api_error(e)),
        }
    }

    /// Streams `dir` packed to the data API as Fileset `name`'s content, which the server
    /// checks, stores and records in the Fileset's status.
    async fn push_through_api(&self, name: &str, dir: &Path) -> Result<FilesetStatus, Error> {
        let packing = pack_dir(dir, push_options()).map_err(|e| Error::packing(dir, e))?;
        let answer = self.data.push(name, packing.stream).await;
        // A packing failure reaches the server as a broken body: report its cause.
        packing
            .done
            .wait()
            .await
            .map_err(|e| Error::packing(dir, e))?;
        Ok(answer?.content)
    }

    /// An operator's push straight into the cluster's store (`--store`), recorded in the
    /// Fileset's status as the data API records it.
    async fn push_to_store(
        &self,
        store: &Store,
        name: &str,
        dir: &Path,
    ) -> Result<FilesetStatus, Error> {
        let pushed = store
            .push_fileset(&self.namespace, dir)
            .await
            .map_err(|e| Error::pushing(dir, e))?;
        let status = FilesetStatus {
            digest: Some(format!("sha256:{}", pushed.digest)),
            size: Some(pushed.size),
            file_count: Some(pushed.file_count),
            pushed_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::now(),
            )),
        };
        self.api::<Fileset>()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map_err(api_error)?;
        Ok(status)
    }

    fn operator_store(&self) -> Option<Result<Store, Error>> {
        self.store_url
            .as_deref()
            .map(|url| Store::open(url).map_err(Error::from))
    }

    fn kind_api(&self, kind: ObjectKind) -> kube::Api<kube::core::DynamicObject> {
        let resource = match kind {
            ObjectKind::Agent => kube::core::ApiResource::erase::<Agent>(&()),
            ObjectKind::Environment => kube::core::ApiResource::erase::<AgentEnvironment>(&()),
            ObjectKind::Fileset => kube::core::ApiResource::erase::<Fileset>(&()),
            ObjectKind::Secret => {
                kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
            }
            ObjectKind::Runtime => {
                let resource = kube::core::ApiResource::erase::<AgentRuntime>(&());
                return Api::all_with(self.client.clone(), &resource);
            }
            ObjectKind::Extension => {
                let resource = kube::core::ApiResource::erase::<AgentExtension>(&());
                return Api::all_with(self.client.clone(), &resource);
            }
        };
        Api::namespaced_with(self.client.clone(), &self.namespace, &resource)
    }
}

#[async_trait]
impl Backend for Cluster {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn execution_names(&self) -> Result<Vec<String>, Error> {
        let list = self
            .executions()
            .list_metadata(&ListParams::default())
            .await
            .map_err(api_error)?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|e| e.metadata.name)
            .collect())
    }

    async fn execution(&self, name: &str) -> Result<Execution, Error> {
        let execution = self.executions().get(name).await.map_err(api_error)?;
        Ok(self.record(&execution).await)
    }

    async fn executions(&self) -> Result<Vec<Execution>, Error> {
        self.find_executions(&ExecutionFilter::default()).await
    }

    async fn find_executions(&self, filter: &ExecutionFilter) -> Result<Vec<Execution>, Error> {
        let mut params = ListParams::default();
        if let Some(selector) = tag_selector(&filter.tags) {
            params = params.labels(&selector);
        }
        let items = self
            .executions()
            .list(&params)
            .await
            .map_err(api_error)?
            .items;
        Ok(items
            .iter()
            .map(|e| execution_of(e, self.store_url.as_deref()))
            .filter(|r| filter.matches(r))
            .collect())
    }

    async fn set_notify(
        &self,
        _record: &Execution,
        _change: &NotifyChange,
    ) -> Result<Execution, Error> {
        Err(Error::argument(
            "notify set applies to local runs only; a cluster execution reports its end as a Kubernetes Event, and to the webhook it was created with (--notify-webhook)",
        ))
    }

    async fn set_tags(&self, record: &Execution, tags: &[String]) -> Result<Execution, Error> {
        let current = self
            .executions()
            .get(&record.name)
            .await
            .map_err(api_error)?;
        let patch = retag_patch(&current.metadata.labels.unwrap_or_default(), tags);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let patched = self
            .executions()
            .patch(&record.name, &params, &Patch::Merge(&patch))
            .await
            .map_err(api_error)?;
        Ok(self.record(&patched).await)
    }

    async fn create(
        &self,
        request: &ExecutionRequest,
        options: &CreateOptions,
    ) -> Result<Execution, Error> {
        if options.inherit_env {
            return Err(Error::argument(
                "--inherit-env applies to local runs only; a pod gets its environment from the cluster",
            ));
        }
        if options.notify.given() {
            return Err(Error::argument(
                "--notify-command, --notify-file and --notify-on-output apply to local runs only; a cluster execution reports its end as a Kubernetes Event, and to a webhook with --notify-webhook URL --notify-webhook-secret NAME:KEY",
            ));
        }
        let mut spec = request.spec.clone();
        let inputs = &request.inputs;
        if let Some(stdin) = &inputs.stdin {
            spec.input = stdin_as_input(stdin, &spec.input)?;
        }
        let agent = spec
            .agent_ref
            .as_ref()
            .map(|r| r.name.clone())
            .or_else(|| {
                spec.agent
                    .as_ref()
                    .and_then(|a| a.config.name().map(str::to_owned))
            })
            .or_else(|| spec.rerun_of.as_ref().map(|r| format!("{}-rerun", r.name)))
            .unwrap_or_else(|| "run".into());
        let name = request
            .name
            .clone()
            .unwrap_or_else(|| generate_name(&agent));
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let mut execution = AgentExecution::new(&name, spec);
        label_inputs(&mut execution.metadata, inputs);
        let created = self
            .executions()
            .create(&params, &execution)
            .await
            .map_err(api_error)?;
        Ok(execution_of(&created, self.store_url.as_deref()))
    }

    async fn detach(
        &self,
        record: &Execution,
        _options: &CreateOptions,
    ) -> Result<Execution, Error> {
        // The controller runs it; nothing of it depends on this process.
        Ok(record.clone())
    }

    async fn run(
        &self,
        record: &Execution,
        _options: &CreateOptions,
        passthrough: bool,
    ) -> Result<Execution, Error> {
        self.watch(record, passthrough).await
    }

    async fn watch(&self, record: &Execution, print: bool) -> Result<Execution, Error> {
        if print {
            self.follow_log(&record.name, &record.uid).await;
        }
        let done = self.wait(&record.name).await?;
        Ok(self.record(&done).await)
    }

    async fn logs(
        &self,
        record: &Execution,
        stream: LogStream,
        lines: usize,
    ) -> Result<(&'static str, Vec<String>), Error> {
        if stream == LogStream::Stderr {
            return Err(Error::argument(
                "--stderr: on a cluster the agent's stdout and stderr reach one container log, \
                 which cannot be split; `errand tail` shows both, and stderr.log in the \
                 output_artifacts result holds stderr alone",
            ));
        }
        let name = &record.name;
        let pod = self.pod(&record.uid).await?.ok_or_else(|| {
            Error::new(
                ErrorCode::NotFound,
                format!("execution {name} has no pod (yet, or any more); its logs are saved in output_artifacts"),
            )
        })?;
        let params = LogParams {
            container: Some(AGENT_CONTAINER.into()),
            tail_lines: Some(i64::try_from(lines).unwrap_or(i64::MAX)),
            ..Default::default()
        };
        let text = self
            .api::<Pod>()
            .logs(&pod.metadata.name.unwrap_or_default(), &params)
            .await
            .map_err(api_error)?;
        Ok((COMBINED_LOG, text.lines().map(str::to_owned).collect()))
    }

    async fn output(
        &self,
        record: &Execution,
        window: Option<ByteWindow>,
    ) -> Result<Vec<StreamOutput>, Error> {
        // A pod's log has no size the API reports: without reading it, its size is unknown.
        let unknown = StreamOutput {
            stream: COMBINED_LOG.to_owned(),
            total_bytes: None,
            excerpt: None,
        };
        let Some(window) = window else {
            return Ok(vec![unknown]);
        };
        // The kubelet keeps a bounded log (containerLogMaxSize, 10 MiB by default), so it is read
        // whole and cut here. Without a pod, or before the agent's container starts, there is none.
        let Some(pod) = self.pod(&record.uid).await? else {
            return Ok(vec![unknown]);
        };
        let params = LogParams {
            container: Some(AGENT_CONTAINER.into()),
            ..Default::default()
        };
        let pods = self.api::<Pod>();
        let mut bytes = Vec::new();
        match pods
            .log_stream(&pod.metadata.name.unwrap_or_default(), &params)
            .await
        {
            Ok(stream) => {
                futures::AsyncReadExt::read_to_end(&mut std::pin::pin!(stream), &mut bytes)
                    .await
                    .map_err(|e| {
                        Error::new(
                            ErrorCode::ClusterError,
                            format!("reading the agent's log: {e}"),
                        )
                    })?;
            }
            Err(kube::Error::Api(status)) if status.code == 400 => return Ok(vec![unknown]),
            Err(e) => return Err(api_error(e)),
        }
        Ok(vec![StreamOutput::from_bytes(COMBINED_LOG, &bytes, window)])
    }

    async fn results(&self, record: &Execution) -> Result<Vec<ResultEntry>, Error> {
        if self.store_url.is_some() {
            return Ok(record.results.clone());
        }
        let listing = self.data.results(&record.name).await?;
        Ok(listing
            .results
            .into_iter()
            .map(|r| ResultEntry {
                name: r.name,
                size: r.size,
                sha256: r.sha256.unwrap_or_default(),
            })
            .collect())
    }

    async fn download(
        &self,
        record: &Execution,
        result: AnyResult,
        file: &Path,
    ) -> Result<u64, Error> {
        match self.operator_store() {
            Some(store) => {
                let execution = ExecutionId {
                    namespace: record.namespace.clone(),
                    name: record.name.clone(),
                    uid: record.uid.clone(),
                };
                download_from_store(&store?, &execution, &result, file).await
            }
            None => self.data.download(&record.name, &result, file).await,
        }
    }

    async fn cancel(&self, record: &Execution) -> Result<Execution, Error> {
        let patch = Patch::Merge(json!({"spec": {"cancel": true}}));
        self.executions()
            .patch(&record.name, &PatchParams::default(), &patch)
            .await
            .map_err(api_error)?;
        let done = self.wait(&record.name).await?;
        Ok(self.record(&done).await)
    }

    async fn signal(
        &self,
        record: &Execution,
        signal: nix::sys::signal::Signal,
    ) -> Result<Execution, Error> {
        self.kill(record, signal).await
    }

    async fn change_deadline(
        &self,
        record: &Execution,
        in_seconds: Option<u64>,
    ) -> Result<DeadlineChanged, Error> {
        Cluster::change_deadline(self, record, in_seconds).await
    }

    async fn start(
        &self,
        record: &Execution,
        _staging: &crate::runner::StageSettings,
    ) -> Result<Execution, Error> {
        self.start_held(record).await
    }

    async fn restart(
        &self,
        record: &Execution,
        _staging: &crate::runner::StageSettings,
    ) -> Result<Execution, Error> {
        Err(control::restart_refused(&record.name))
    }

    async fn delete(&self, record: &Execution) -> Result<Option<usize>, Error> {
        let name = &record.name;
        self.executions()
            .delete(name, &DeleteParams::foreground())
            .await
            .map_err(api_error)?;
        while self
            .executions()
            .get_opt(name)
            .await
            .map_err(api_error)?
            .is_some()
        {
            tokio::time::sleep(POLL).await;
        }
        Ok(None)
    }

    async fn apply(&self, documents: &[Document]) -> Result<Vec<Applied>, Error> {
        apply::apply(&self.client, &self.namespace, documents).await
    }

    async fn objects(&self, kind: ObjectKind) -> Result<Vec<serde_json::Value>, Error> {
        let list = self
            .kind_api(kind)
            .list(&ListParams::default())
            .await
            .map_err(api_error)?;
        Ok(list
            .items
            .iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect())
    }

    async fn delete_object(&self, kind: ObjectKind, name: &str) -> Result<(), Error> {
        self.kind_api(kind)
            .delete(name, &DeleteParams::default())
            .await
            .map_err(api_error)?;
        Ok(())
    }

    async fn push_fileset(&self, name: Option<&str>, dir: &Path) -> Result<PushedFileset, Error> {
        let name = match name {
            Some(name) => name.to_owned(),
            None => format!("workdir-{}", &content_digest(dir).await?[..12]),
        };
        let new_fileset = self.ensure_fileset(&name).await?;
        let pushed = PushedFileset {
            name: name.clone(),
            status: FilesetStatus::default(),
            new_fileset,
            new_blob: None,
        };
        let status = match self.operator_store() {
            Some(store) => self.push_to_store(&store?, &name, dir).await,
            None => self.push_through_api(&name, dir).await,
        };
        match status {
            Ok(status) => Ok(PushedFileset { status, ..pushed }),
            Err(e) => {
                self.undo_push(&pushed).await;
                Err(e)
            }
        }
    }

    async fn undo_push(&self, pushed: &PushedFileset) {
        if pushed.new_fileset {
            let _ = self
                .api::<Fileset>()
                .delete(&pushed.name, &DeleteParams::default())
                .await;
        }
    }

    async fn filesets(&self) -> Result<Vec<Fileset>, Error> {
        Ok(self
            .api::<Fileset>()
            .list(&ListParams::default())
            .await
            .map_err(api_error)?
            .items)
    }

    fn deployments(&self) -> &dyn crate::ops::Deployments {
        self
    }

    fn schedules(&self) -> &dyn crate::ops::backend::Schedules {
        self
    }
}

/// The operator's store (`--store`, which the sweep needs) and what the cluster still
/// references in it, for the store sweep.
pub async fn store_references(config: &BackendConfig) -> Result<(Store, References), Error> {
    let cluster = Cluster::connect(config).await?;
    let store = cluster.operator_store().unwrap_or_else(|| {
        Err(Error::argument(
            "sweeping a cluster's store needs --store (or ERRAND_STORE): the store URL the operator configured",
        ))
    })?;
    let namespaces = crate::cluster::scope::Namespaces::only(config.namespace.clone());
    let references = crate::cluster::references::references(&cluster.client, &namespaces)
        .await
        .map_err(|e| Error::new(ErrorCode::ClusterError, e.to_string()))?;
    Ok((store, references))
}

/// How a push packs a directory: refusing what staging would refuse, naming the file.
fn push_options() -> PackOptions {
    PackOptions {
        stageable: true,
        ..PackOptions::default()
    }
}

/// The sha256 of `dir` packed, which names a workdir pushed without a name: packing is
/// deterministic, so the same tree always gets the same Fileset.
async fn content_digest(dir: &Path) -> Result<String, Error> {
    use sha2::Digest;
    let packing = pack_dir(dir, push_options()).map_err(|e| Error::packing(dir, e))?;
    let mut hasher = sha2::Sha256::new();
    let mut stream = packing.stream;
    while let Some(chunk) = stream.next().await {
        if let Ok(chunk) = chunk {
            hasher.update(&chunk);
        }
    }
    packing
        .done
        .wait()
        .await
        .map_err(|e| Error::packing(dir, e))?;
    Ok(hex::encode(hasher.finalize()))
}

/// An API error as a CLI error, with the API server's words and, for a refused object, the
/// `Status` with the fields it names.
pub fn api_error(error: kube::Error) -> Error {
    let kube::Error::Api(status) = &error else {
        return Error::new(ErrorCode::ClusterError, error.to_string());
    };
    let code = match status.code {
        401 => ErrorCode::Unauthorized,
        404 => ErrorCode::NotFound,
        409 => ErrorCode::AlreadyExists,
        413 => ErrorCode::TooLarge,
        // An admission webhook's refusal arrives as 403 too, but it is about the object.
        403 if status.message.contains("admission webhook") => ErrorCode::InvalidSpec,
        403 => ErrorCode::Forbidden,
        400 | 422 => ErrorCode::InvalidSpec,
        _ => ErrorCode::ClusterError,
    };
    let details = status
        .details
        .as_ref()
        .filter(|d| !d.causes.is_empty())
        .and_then(|d| serde_json::to_value(&d.causes).ok())
        .map(|causes| ("causes", causes));
    Error {
        code,
        message: status.message.clone(),
        details,
    }
}

fn phase(execution: &AgentExecution) -> Option<Phase> {
    execution.status.as_ref().and_then(|s| s.phase)
}

/// The execution as the commands show it, read off the AgentExecution and its status, so that
/// both backends answer alike.
pub fn execution_of(execution: &AgentExecution, store: Option<&str>) -> Execution {
    let status = execution.status.clone().unwrap_or_default();
    let outcome = Outcome::of_status(&status);
    Execution {
        schema_version: crate::local::RECORD_SCHEMA_VERSION,
        name: execution.metadata.name.clone().unwrap_or_default(),
        namespace: execution.metadata.namespace.clone().unwrap_or_default(),
        uid: execution.metadata.uid.clone().unwrap_or_default(),
        agent: status.agent.clone().unwrap_or_default(),
        phase: status.phase.unwrap_or(Phase::Pending),
        reason: outcome.as_ref().map(|o| o.reason.as_str().to_owned()),
        message: status.message.clone(),
        response: None,
        exit_code: status.exit_code,
        timed_out: outcome
            .as_ref()
            .is_some_and(|o| o.reason == crate::api::contract::Reason::DeadlineExceeded),
        created_at: execution
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(jiff::Timestamp::now, |t| t.0),
        started_at: status.start_time.as_ref().map(|t| t.0),
        completed_at: status.completion_time.as_ref().map(|t| t.0),
        results: status.results.clone(),
        snapshot_digest: status
            .snapshot
            .map(|SnapshotRef { digest, .. }| digest)
            .unwrap_or_default(),
        image_id: status.image_id,
        rerun_of: execution.spec.rerun_of.as_ref().map(|r| r.name.clone()),
        store: store.unwrap_or_default().to_owned(),
        cancel_requested: execution.spec.cancel,
        inherit_env: false,
        otlp_endpoint: None,
        supervisor: None,
        extension: None,
        tags: execution
            .metadata
            .labels
            .as_ref()
            .map(crate::api::tags::tags_of_labels)
            .unwrap_or_default(),
        env: annotation(execution, SHOWN_ENV_ANNOTATION)
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default(),
        stdin_bytes: annotation(execution, STDIN_BYTES_ANNOTATION).and_then(|n| n.parse().ok()),
        notify: execution
            .spec
            .notify
            .as_ref()
            .and_then(|n| n.webhook.as_ref())
            .map(|webhook| crate::local::notify::NotifySettings {
                webhook: Some(webhook.url.clone().unwrap_or_else(|| {
                    webhook.url_from.as_ref().map_or_else(String::new, |from| {
                        format!("(from Secret {:?} key {:?})", from.name, from.key)
                    })
                })),
                ..Default::default()
            }),
        notifications: Vec::new(),
    }
}

fn annotation<'a>(execution: &'a AgentExecution, key: &str) -> Option<&'a str> {
    execution
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::api_error;

    fn refused(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, "").with_code(code).boxed())
    }

    #[test]
    fn api_refusals_keep_their_meaning_in_the_error_code() {
        let cases = [
            (
                403,
                "agentexecutions.data.errand.dev \"calc\" is forbidden: User \"bob\" cannot get resource \"agentexecutions/results\"",
                "forbidden",
            ),
            (
                403,
                "admission webhook \"agentexecutions.errand.dev\" denied the request: invalid AgentExecution",
                "invalid_spec",
            ),
            (
                422,
                "AgentExecution.errand.dev \"x\" is invalid: spec.timeoutSeconds: Invalid value: 0",
                "invalid_spec",
            ),
            (401, "Unauthorized", "unauthorized"),
            (
                404,
                "agentexecutions.errand.dev \"x\" not found",
                "not_found",
            ),
            (409, "already exists", "already_exists"),
            (413, "the upload is larger than 1 bytes", "too_large"),
            (500, "boom", "cluster_error"),
        ];
        for (code, message, expected) in cases {
            let error = api_error(refused(code, message));
            assert_eq!(
                (error.code.as_str(), error.message.as_str()),
                (expected, message)
            );
        }
    }
}
