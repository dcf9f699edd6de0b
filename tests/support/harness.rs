//! One cluster test's namespace, `file://` store and controller, and what the tests do with
//! them: create objects and executions, crash and restart the controller, wait for a phase,
//! and read the results.
//!
//! Two modes, by whether pods run:
//! - [`Mode::WithoutPods`]: the controller runs in this process and names an errand image the
//!   node does not have, so every pod stops at `ErrImageNeverPull` before any agent runs.
//!   For what the controller does on its own: specs, children, snapshots, timeouts, deletion.
//! - [`Mode::WithPods`]: the `errand controller` binary runs as a process with the errand image
//!   the node has, serving the store's signed-URL blob endpoint on the pod bridge, so every
//!   execution stages, runs and uploads in a real pod. Its log is kept.
//!
//! Either way the controller acts as a ServiceAccount bound by the Helm chart's own RBAC
//! ([`chart_rbac`]), so a call the chart grants no rule for fails the test.
//!
//! ```ignore
//! let Some(harness) = Harness::start("e2e-calc", Mode::WithPods).await else { return };
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use errand::api::contract::{ConditionType, Reason};
use errand::api::{AgentExecution, Fileset, Phase};
use errand::controller::config::ControllerConfig;
use errand::controller::names::job_name;
use errand::resolve::conditions;
use errand::serve::{ServeOptions, run};
use errand::store::Store;
use errand::store::grants::{HmacSigner, UrlSigner};
use errand::store::keys::{ExecutionId, ResultName};

use super::chart_rbac;
use super::cluster::{self, TestNamespace};
use super::errand::{self as errand_support, ERRAND_IMAGE, WAIT, install_crds, wait_for};
use super::store::{read_all, tar_files};

/// How long a run with a real pod may take to be scheduled, staged and run on the 2-core CI
/// machine.
pub const RUN_WAIT: Duration = Duration::from_secs(180);
/// An errand image the node does not have.
const ABSENT_IMAGE: &str = "errand.local/errand:absent";
/// The base of the signed URLs of a controller that serves none: no pod of
/// [`Mode::WithoutPods`] gets as far as fetching one.
const UNSERVED_BLOB_URL: &str = "http://errand-controller.errand-system.svc:8080";
/// The key the harness's controllers sign store URLs with (a test signs its own with it).
pub const SIGNING_KEY: &str = "test-signing-key-0123456789abcdef0123";

/// Whether the test's executions run in real pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The controller in this process, its Jobs on an image the node does not have.
    WithoutPods,
    /// `errand controller` as a process serving the blob endpoint, pods on the errand image.
    WithPods,
}

/// One test's namespace, file store and controller.
pub struct Harness {
    pub client: Client,
    pub namespace: TestNamespace,
    mode: Mode,
    dir: tempfile::TempDir,
    /// Where a [`Mode::WithPods`] controller serves, kept across restarts so that the URLs
    /// pods already have stay valid.
    address: Option<SocketAddr>,
    /// Arguments added to the [`Mode::WithPods`] controller's command line.
    controller_args: Vec<String>,
    /// The ServiceAccount user a [`Mode::WithPods`] controller acts as.
    acts_as: String,
    /// Where a [`Mode::WithoutPods`] controller serves the gateway, if it does; kept across
    /// restarts.
    gateway: Option<SocketAddr>,
    controller: Option<Controller>,
}

/// A running controller; dropping it kills it as a crash would, so that a failing test leaves
/// none behind.
enum Controller {
    Task(tokio::task::JoinHandle<()>),
    Process(Child),
}

impl Drop for Controller {
    fn drop(&mut self) {
        match self {
            Controller::Task(task) => task.abort(),
            Controller::Process(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Harness {
    /// Installs the CRDs, creates the namespace and starts the controller; `None` when the test
    /// cluster is not there (see [`cluster::client`]).
    pub async fn start(prefix: &str, mode: Mode) -> Option<Self> {
        Self::start_with_labels(prefix, &[], mode).await
    }

    /// [`Harness::start`] in a namespace with these labels.
    pub async fn start_with_labels(
        prefix: &str,
        labels: &[(&str, &str)],
        mode: Mode,
    ) -> Option<Self> {
        Self::start_with(prefix, labels, mode, &[]).await
    }

    /// A [`Mode::WithPods`] harness whose controller gets `args` (for example a staging budget
    /// and a grant lifetime).
    pub async fn start_with_controller_args(prefix: &str, args: &[&str]) -> Option<Self> {
        Self::start_with(prefix, &[], Mode::WithPods, args).await
    }

    /// [`Harness::start`] in a namespace with these labels, a [`Mode::WithPods`] controller
    /// getting these extra arguments (e.g. `--default-queue-name q`; a staging budget of 120 s
    /// unless they name one).
    pub async fn start_with(
        prefix: &str,
        labels: &[(&str, &str)],
        mode: Mode,
        controller_args: &[&str],
    ) -> Option<Self> {
        Self::launch(prefix, labels, mode, controller_args, None).await
    }

    /// A [`Mode::WithPods`] harness whose controller serves only its own namespace and `also`,
    /// acting as a ServiceAccount with only the chart's RBAC for those namespaces (release
    /// `release`, whose cluster-scoped part [`chart_rbac::revoke_opted_in`] removes).
    pub async fn start_opted_in(prefix: &str, release: &str, also: &[&str]) -> Option<Self> {
        let client = cluster::client().await?;
        install_crds(&client).await;
        let namespace = TestNamespace::create(&client, prefix).await;
        let served: Vec<&str> = std::iter::once(namespace.name())
            .chain(also.iter().copied())
            .collect();
        let acts_as = chart_rbac::grant_opted_in(&client, release, &served).await;
        let controller_args = also
            .iter()
            .flat_map(|n| ["--watch-namespace".to_owned(), (*n).to_owned()])
            .collect();
        Some(
            Self::with_controller(
                client,
                namespace,
                Mode::WithPods,
                controller_args,
                acts_as,
                None,
            )
            .await,
        )
    }

    async fn launch(
        prefix: &str,
        labels: &[(&str, &str)],
        mode: Mode,
        controller_args: &[&str],
        gateway: Option<SocketAddr>,
    ) -> Option<Self> {
        assert!(
            controller_args.is_empty() || mode == Mode::WithPods,
            "only the controller process takes arguments"
        );
        let client = cluster::client().await?;
        install_crds(&client).await;
        chart_rbac::grant(&client).await;
        let namespace = TestNamespace::create_with_labels(&client, prefix, labels).await;
        let controller_args = controller_args.iter().map(|a| (*a).to_owned()).collect();
        let acts_as = chart_rbac::USER.to_owned();
        Some(
            Self::with_controller(client, namespace, mode, controller_args, acts_as, gateway).await,
        )
    }

    async fn with_controller(
        client: Client,
        namespace: TestNamespace,
        mode: Mode,
        controller_args: Vec<String>,
        acts_as: String,
        gateway: Option<SocketAddr>,
    ) -> Self {
        let address = (mode == Mode::WithPods).then(cluster::free_pod_gateway_address);
        let mut harness = Self {
            client,
            namespace,
            mode,
            dir: tempfile::tempdir().expect("a temporary directory"),
            address,
            controller_args,
            acts_as,
            gateway,
            controller: None,
        };
        harness.start_controller().await;
        harness
    }

    /// A [`Mode::WithoutPods`] harness whose controller also serves the gateway (plain HTTP on
    /// a free local port, [`Harness::gateway_url`]).
    pub async fn start_with_gateway(prefix: &str) -> Option<Self> {
        let gateway = super::ports::free_local_address();
        Self::launch(prefix, &[], Mode::WithoutPods, &[], Some(gateway)).await
    }

    /// The ServiceAccount user the controller acts as.
    pub fn acts_as(&self) -> &str {
        &self.acts_as
    }

    /// The gateway's base URL.
    ///
    /// # Panics
    /// Unless started by [`Harness::start_with_gateway`].
    pub fn gateway_url(&self) -> String {
        format!("http://{}", self.gateway.expect("a harness with a gateway"))
    }

    /// The URL of a [`Mode::WithPods`] controller's HTTP endpoint, as pods reach it.
    ///
    /// # Panics
    /// In [`Mode::WithoutPods`], whose controller serves nothing.
    pub fn controller_url(&self) -> String {
        let address = self.address.expect("only a WithPods controller serves");
        format!("http://{address}")
    }

    /// The directory of the controller's `file://` store.
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    fn store_url(&self) -> String {
        format!("file://{}", self.store_dir().display())
    }

    /// The controller's store.
    pub fn store(&self) -> Store {
        Store::open(&self.store_url()).expect("a file store opens")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("controller.log")
    }

    /// Starts a controller for this test's namespace, acting as the chart's ServiceAccount; a
    /// [`Mode::WithPods`] one appends to its log and is ready when this returns.
    pub async fn start_controller(&mut self) {
        let Some(address) = self.address else {
            self.controller = Some(Controller::Task(spawn_controller_with(
                chart_rbac::client().await,
                self.namespace.name(),
                self.store(),
                ABSENT_IMAGE,
                None,
                self.gateway,
            )));
            return;
        };
        // The controller runs as the chart's ServiceAccount (impersonated), so a call the
        // chart's RBAC does not grant fails the test.
        let kubeconfig = self.dir.path().join("controller.kubeconfig");
        chart_rbac::write_kubeconfig(&kubeconfig, &self.acts_as);
        let child = controller_command(
            self.namespace.name(),
            &self.store_url(),
            &format!("http://{address}"),
            address,
            &self.log_path(),
        )
        .args(["--leader-elect", "false"])
        .args(
            (!self
                .controller_args
                .iter()
                .any(|a| a == "--staging-budget-seconds"))
            .then_some(["--staging-budget-seconds", "120"])
            .into_iter()
            .flatten(),
        )
        .args(&self.controller_args)
        .env("KUBECONFIG", &kubeconfig)
        .spawn()
        .expect("the errand binary starts");
        self.controller = Some(Controller::Process(child));
        wait_until_ready(address, "the controller", RUN_WAIT).await;
    }

    /// Kills the controller as a crash would: no graceful shutdown. Returns once its gateway's
    /// port is free again: the tasks that serve it are aborted after the controller's own, so
    /// a restart right away could find the port still bound.
    pub async fn kill_controller(&mut self) {
        if let Some(Controller::Task(task)) = &mut self.controller {
            task.abort();
            let _ = task.await;
        }
        self.controller = None;
        if let Some(gateway) = self.gateway {
            wait_for(
                "the killed controller's gateway port to be free",
                RUN_WAIT,
                || async move { std::net::TcpListener::bind(gateway).ok().map(drop) },
            )
            .await;
        }
    }

    /// The log of the [`Mode::WithPods`] controller, across its restarts.
    ///
    /// # Panics
    /// In [`Mode::WithoutPods`], whose controller has no log of its own.
    pub fn controller_log(&self) -> String {
        assert_eq!(
            self.mode,
            Mode::WithPods,
            "only the controller process writes a log"
        );
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// An `Api` for a namespaced kind in this test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        self.namespace.api()
    }

    /// Creates a Secret or an errand object from its JSON form in this test's namespace.
    pub async fn create(&self, object: Value) {
        errand_support::create(&self.client, self.namespace.name(), object).await;
    }

    /// Creates an Agent named `name` on `image` (never pulled) running `sh -c script`.
    pub async fn create_agent(&self, name: &str, image: &str, script: &str) {
        self.create_agent_in(self.namespace.name(), name, image, script)
            .await;
    }

    /// [`Harness::create_agent`] in `namespace`.
    pub async fn create_agent_in(&self, namespace: &str, name: &str, image: &str, script: &str) {
        errand_support::create(&self.client, namespace, json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name},
            "spec": {
                "runtime": {"image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", script]},
                "config": {"config_format": "agents-spec-v1", "name": name},
            },
        }))
        .await;
    }

    /// Creates an execution of Agent `agent` asked "What is 12 multiplied by 8?", with the
    /// fields of `extra` added to (or replacing those of) its spec.
    pub async fn create_execution(&self, name: &str, agent: &str, extra: Value) {
        self.create_execution_in(self.namespace.name(), name, agent, extra)
            .await;
    }

    /// [`Harness::create_execution`] in `namespace`.
    pub async fn create_execution_in(
        &self,
        namespace: &str,
        name: &str,
        agent: &str,
        extra: Value,
    ) {
        let mut spec = json!({"agentRef": {"name": agent}, "input": "What is 12 multiplied by 8?"});
        spec.as_object_mut().unwrap().extend(
            extra
                .as_object()
                .expect("the extra fields are an object")
                .clone(),
        );
        let execution = json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution",
            "metadata": {"name": name},
            "spec": spec,
        });
        errand_support::create(&self.client, namespace, execution).await;
    }

    /// `errand ARGS` against this test's namespace as its operator: the admin's kubeconfig, and
    /// the controller's store named with `--store`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_errand"));
        command
            .arg("--kubeconfig")
            .arg(cluster::kubeconfig_path())
            .args(["--namespace", self.namespace.name()])
            .args(["--store", &self.store_url()])
            .args(args)
            .env_remove("ERRAND_BACKEND")
            .env_remove("ERRAND_NAMESPACE");
        command
    }

    /// `errand ARGS -o json` as [`Harness::command`] runs it: the exit code and the one JSON
    /// answer.
    pub fn cli(&self, args: &[&str]) -> (i32, Value) {
        let output = self
            .command(args)
            .args(["-o", "json"])
            .output()
            .expect("errand runs");
        super::errand::one_json_answer(args, &output)
    }

    /// Applies a JSON merge patch to object `name` of kind `K`.
    pub async fn merge_patch<K>(&self, name: &str, patch: Value)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        <K as kube::Resource>::DynamicType: Default,
    {
        self.api::<K>()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|e| panic!("patching {name}: {e}"));
    }

    /// `errand filesets push NAME DIR` as the operator, straight into the controller's store
    /// (`--store`): the CLI creates Fileset `name` when missing and records the content in its
    /// status, which must be what it answered. `dir` is absolute or relative to the repository.
    /// Returns the digest's hex.
    pub async fn push_fileset(&self, name: &str, dir: &str) -> String {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let (code, answer) = self.cli(&["filesets", "push", name, dir.to_str().unwrap()]);
        assert_eq!(code, 0, "{answer}");
        let status = self
            .api::<Fileset>()
            .get(name)
            .await
            .unwrap()
            .status
            .unwrap();
        let answered = &answer["fileset"]["status"];
        assert_eq!(
            (status.digest.as_deref(), status.size, status.file_count),
            (
                answered["digest"].as_str(),
                answered["size"].as_u64(),
                answered["fileCount"].as_u64()
            ),
            "the answer is what the Fileset's status records: {answer}"
        );
        let digest = status.digest.expect("a pushed Fileset has a digest");
        digest
            .strip_prefix("sha256:")
            .expect("a sha256 digest")
            .to_owned()
    }

    /// Asks for the execution to be cancelled, as `errand cancel` does.
    pub async fn cancel(&self, name: &str) {
        self.merge_patch::<AgentExecution>(name, json!({"spec": {"cancel": true}}))
            .await;
    }

    /// How long a wait for an execution lasts in this mode.
    pub fn wait_limit(&self) -> Duration {
        match self.mode {
            Mode::WithoutPods => WAIT,
            Mode::WithPods => RUN_WAIT,
        }
    }

    /// Waits until the execution is in `phase`, failing early if it ends in another one.
    ///
    /// # Panics
    /// After [`Harness::wait_limit`] or on another terminal phase, with a report of the
    /// execution, its Job and the controller.
    pub async fn wait_for_phase(&self, name: &str, phase: Phase) -> AgentExecution {
        self.wait_for_phase_in(self.namespace.name(), name, phase)
            .await
    }

    /// [`Harness::wait_for_phase`] of an execution in `namespace`.
    pub async fn wait_for_phase_in(
        &self,
        namespace: &str,
        name: &str,
        phase: Phase,
    ) -> AgentExecution {
        let ended = |e: &AgentExecution| phase_of(e).is_some_and(|p| p.is_terminal());
        self.wait_until(
            namespace,
            name,
            &format!("to be {phase:?}"),
            |e| phase_of(e) == Some(phase),
            ended,
        )
        .await
    }

    /// Waits until the execution ended in `phase` (`Failed` or `Cancelled`) and checks that
    /// its `Failed` condition gives `reason`.
    pub async fn wait_for_failure(
        &self,
        name: &str,
        phase: Phase,
        reason: Reason,
    ) -> AgentExecution {
        let execution = self.wait_for_phase(name, phase).await;
        assert_eq!(
            reason_of(&execution, ConditionType::Failed),
            Some(reason.as_str()),
            "execution {name}: {}",
            message_of(&execution)
        );
        execution
    }

    /// Waits until the execution satisfies `accept`; `what` says what that is, for the report.
    pub async fn wait_for_execution(
        &self,
        name: &str,
        what: &str,
        accept: impl Fn(&AgentExecution) -> bool,
    ) -> AgentExecution {
        self.wait_until(self.namespace.name(), name, what, accept, |_| false)
            .await
    }

    async fn wait_until(
        &self,
        namespace: &str,
        name: &str,
        what: &str,
        accept: impl Fn(&AgentExecution) -> bool,
        hopeless: impl Fn(&AgentExecution) -> bool,
    ) -> AgentExecution {
        let api = Api::<AgentExecution>::namespaced(self.client.clone(), namespace);
        let limit = self.wait_limit();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let current = api.get_opt(name).await.ok().flatten();
            if let Some(execution) = current.as_ref().filter(|e| accept(e)) {
                return execution.clone();
            }
            let failure = if current.as_ref().is_some_and(&hopeless) {
                "it ended otherwise".to_owned()
            } else if tokio::time::Instant::now() >= deadline {
                format!("timed out after {}s", limit.as_secs())
            } else {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            };
            let status = current.map(|e| e.status);
            let job = cluster::describe_job(&self.client, namespace, &job_name(name)).await;
            let log = match self.mode {
                Mode::WithPods => tail(&self.controller_log(), 30),
                Mode::WithoutPods => "(in this process)".to_owned(),
            };
            panic!(
                "execution {name} {what}: {failure}; status {}\n{job}\ncontroller log tail:\n{log}",
                serde_json::to_string_pretty(&status).unwrap(),
            );
        }
    }

    /// The Events in this test's namespace.
    pub async fn events(&self) -> Vec<Event> {
        self.api::<Event>()
            .list(&ListParams::default())
            .await
            .expect("listing events")
            .items
    }

    /// Whether none of errand's children (Jobs, ConfigMaps, Secrets) is in the namespace.
    pub async fn has_no_children(&self) -> bool {
        self.namespace.managed::<Job>().await.is_empty()
            && self.namespace.managed::<ConfigMap>().await.is_empty()
            && self.namespace.managed::<Secret>().await.is_empty()
    }

    /// Waits until the garbage collector has removed all of errand's children.
    pub async fn wait_for_no_children(&self) {
        wait_for(
            "the children to be garbage-collected",
            self.wait_limit(),
            || async { self.has_no_children().await.then_some(()) },
        )
        .await;
    }

    /// Waits until no Job of errand's is left in the namespace.
    pub async fn wait_for_no_jobs(&self) {
        wait_for("the Job to be deleted", self.wait_limit(), || async {
            self.namespace
                .managed::<Job>()
                .await
                .is_empty()
                .then_some(())
        })
        .await;
    }

    /// Deletes the test's namespace with the controller running, and waits until it is gone.
    pub async fn delete_namespace(&self) {
        let namespaces = Api::<Namespace>::all(self.client.clone());
        let name = self.namespace.name();
        namespaces
            .delete(name, &DeleteParams::background())
            .await
            .unwrap_or_else(|e| panic!("deleting namespace {name}: {e}"));
        wait_for("the namespace to be gone", self.wait_limit(), || async {
            let gone = namespaces
                .get_opt(name)
                .await
                .expect("reading the namespace")
                .is_none();
            gone.then_some(())
        })
        .await;
    }

    /// Waits until the execution is gone, its deletion finished.
    pub async fn wait_until_gone(&self, name: &str) {
        let api = self.api::<AgentExecution>();
        wait_for("the execution to be gone", self.wait_limit(), || async {
            let gone = api
                .get_opt(name)
                .await
                .expect("reading the execution")
                .is_none();
            gone.then_some(())
        })
        .await;
    }

    /// The pod of execution `name` (it must have one).
    pub async fn pod_of(&self, name: &str) -> Pod {
        let uid = self
            .api::<AgentExecution>()
            .get(name)
            .await
            .unwrap()
            .uid()
            .unwrap();
        let label = format!("{}={uid}", errand::api::contract::EXECUTION_UID_LABEL);
        let pods = self
            .api::<Pod>()
            .list(&ListParams::default().labels(&label))
            .await
            .unwrap();
        pods.items.into_iter().next().expect("the execution's pod")
    }

    /// Where the execution's results are kept.
    pub fn execution_id(&self, execution: &AgentExecution) -> ExecutionId {
        execution_id(self.namespace.name(), execution)
    }

    /// A saved result of the execution.
    pub async fn result(&self, execution: &AgentExecution, name: ResultName) -> Vec<u8> {
        let key = errand::store::keys::result(&self.execution_id(execution), name).unwrap();
        read_all(&self.store(), &key).await
    }

    /// A saved JSON record of the execution.
    pub async fn result_json(&self, execution: &AgentExecution, name: ResultName) -> Value {
        serde_json::from_slice(&self.result(execution, name).await).unwrap()
    }

    /// The regular files of a saved tarball of the execution, by path.
    pub async fn result_files(
        &self,
        execution: &AgentExecution,
        name: ResultName,
    ) -> std::collections::BTreeMap<String, String> {
        tar_files(&self.result(execution, name).await)
    }

    /// Stops the controller and deletes the namespace.
    pub async fn finish(mut self) {
        self.kill_controller().await;
        self.namespace.delete().await;
    }
}

/// Runs the controller in this process for `namespace` until the task is aborted: its Jobs use
/// `image` and never pull it; with `blobs`, it listens there (the pods' grant endpoint) and,
/// for a `file://` store, serves the store's signed URLs there; without, it signs URLs nothing
/// serves. A store that presigns (`s3://`) gets its own presigned URLs, as in `errand
/// controller`.
pub fn spawn_controller(
    client: Client,
    namespace: &str,
    store: Store,
    image: &str,
    blobs: Option<SocketAddr>,
) -> tokio::task::JoinHandle<()> {
    spawn_controller_with(client, namespace, store, image, blobs, None)
}

/// [`spawn_controller`], also serving the gateway at `gateway` (plain HTTP) when given.
pub fn spawn_controller_with(
    client: Client,
    namespace: &str,
    store: Store,
    image: &str,
    blobs: Option<SocketAddr>,
    gateway: Option<SocketAddr>,
) -> tokio::task::JoinHandle<()> {
    let base_url = blobs.map_or_else(|| UNSERVED_BLOB_URL.to_owned(), |a| format!("http://{a}"));
    let hmac = Arc::new(HmacSigner::new(&base_url, SIGNING_KEY.as_bytes()));
    let (signer, serve_blobs): (Arc<dyn UrlSigner>, _) = match store.presigned_signer() {
        Some(presigned) => (Arc::new(presigned), None),
        None => (hmac.clone(), blobs.map(|_| hmac)),
    };
    let mut config = ControllerConfig::new(image);
    config.controller_url = base_url;
    // As `errand controller` with a signing key: runners report their runs' ends.
    config.run_end_tokens = Some(errand::resolve::run_tokens::RunTokens::run_ended(
        SIGNING_KEY.as_bytes(),
    ));
    // Never pulled: an image the node lacks fails at once with `ErrImageNeverPull`.
    config.errand_image_pull_policy = Some("Never".into());
    let options = ServeOptions {
        server_limits: errand::cluster::listener::ServerLimits::DEFAULT,
        max_result_bytes: errand::serve::blobs::DEFAULT_MAX_PUT_BYTES,
        config,
        namespaces: errand::cluster::scope::Namespaces::only([namespace]),
        results: store,
        signer,
        serve_blobs,
        listen: blobs,
        certificates: None,
        webhook: None,
        data_api: None,
        gateway: gateway.map(|listen| errand::gateway::GatewayOptions {
            listen,
            sessions: errand::gateway::sessions::SessionLimits::default(),
        }),
        egress_proxy: None,
        leader_election: None,
        instance: format!("test-{namespace}"),
    };
    tokio::spawn(async move {
        run(client, options, std::future::pending())
            .await
            .expect("the controller runs");
    })
}

/// `errand controller` for `namespace` as the cluster tests run it, to be completed with its
/// leader election and staging budget: Jobs on the errand image the node has (never pulled),
/// results in the store at `store_url`, signed URLs for `blob_url`, serving at `listen`, its
/// output appended to `log`.
pub fn controller_command(
    namespace: &str,
    store_url: &str,
    blob_url: &str,
    listen: SocketAddr,
    log: &Path,
) -> Command {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("opening {}: {e}", log.display()));
    let mut command = Command::new(env!("CARGO_BIN_EXE_errand"));
    command
        .args(["controller", "--errand-image", ERRAND_IMAGE])
        .args(["--errand-image-pull-policy", "Never"])
        .args(["--store", store_url])
        .args(["--blob-url", blob_url])
        .args(["--listen", &listen.to_string()])
        .args(["--watch-namespace", namespace])
        .args(["--termination-grace-seconds", "30"])
        .env("KUBECONFIG", cluster::kubeconfig_path())
        .env("ERRAND_SIGNING_KEY", SIGNING_KEY)
        .env("RUST_LOG", "info,errand=debug")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    command
}

/// Waits until the controller process serving at `address` (`who`, for the report) is ready.
pub async fn wait_until_ready(address: SocketAddr, who: &str, limit: Duration) {
    let ready = format!("http://{address}/readyz");
    wait_for(&format!("{who} to be ready"), limit, || {
        let ready = ready.clone();
        async move {
            let response = reqwest::get(&ready).await.ok()?;
            response.status().is_success().then_some(())
        }
    })
    .await;
}

/// The uids of the objects that ever existed, by name.
pub type UidsSeen = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

/// Records the uid of every object of `api` that ever appears, by name, until the returned
/// task is aborted: how a test counts the Jobs or pods that ever existed (a recreated one
/// has a new uid under the same name).
pub fn record_uids<K>(api: Api<K>) -> (UidsSeen, tokio::task::JoinHandle<()>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let seen = UidsSeen::default();
    let record = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        let mut objects = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(object) = objects.next().await {
            if let Ok(object) = object {
                let uid = object.uid().unwrap_or_default();
                record
                    .lock()
                    .unwrap()
                    .entry(object.name_any())
                    .or_default()
                    .insert(uid);
            }
        }
    });
    (seen, task)
}

/// Where an execution's results are kept.
pub fn execution_id(namespace: &str, execution: &AgentExecution) -> ExecutionId {
    ExecutionId {
        namespace: namespace.to_owned(),
        name: execution.name_any(),
        uid: execution.uid().expect("a created execution has a uid"),
    }
}

/// The execution's phase.
pub fn phase_of(execution: &AgentExecution) -> Option<Phase> {
    execution.status.as_ref()?.phase
}

/// The reason of the execution's condition `type_`.
pub fn reason_of(execution: &AgentExecution, type_: ConditionType) -> Option<&str> {
    let status = execution.status.as_ref()?;
    Some(conditions::get(&status.conditions, type_)?.reason.as_str())
}

/// The execution's status message, empty when there is none.
pub fn message_of(execution: &AgentExecution) -> String {
    execution
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default()
}

/// The names of the results the execution's status lists.
pub fn result_names(execution: &AgentExecution) -> Vec<String> {
    execution
        .status
        .as_ref()
        .map(|s| s.results.iter().map(|r| r.name.clone()).collect())
        .unwrap_or_default()
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
