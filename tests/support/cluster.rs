//! Access to the real single-node test cluster that `hack/testenv/up.sh`
//! starts, for tests that need Kubernetes.
//!
//! The cluster is found through its admin kubeconfig: `ERRAND_KUBECONFIG`, else
//! `$ERRAND_TESTENV_DIR/admin.kubeconfig`, else
//! `/var/tmp/errand-testenv/admin.kubeconfig` (where `up.sh` writes it). The
//! tests use it only with `ERRAND_CLUSTER_TESTS=1` (CI and `hack/test.sh` set
//! it), and then an unreachable cluster fails the test with the command that
//! starts it; without it, the test prints a loud line and skips, so `cargo test`
//! on a laptop runs everything else, and never touches a cluster that another
//! checkout on a shared machine started for its own run.
//!
//! ```ignore
//! let Some(client) = cluster::client().await else { return };
//! let ns = cluster::TestNamespace::create(&client, "mytest").await;
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{DeleteParams, ListParams, LogParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::await_condition;
use kube::{Api, Client, Config};

/// Environment variable naming the admin kubeconfig of the test cluster.
pub const KUBECONFIG_ENV: &str = "ERRAND_KUBECONFIG";
/// Environment variable that turns an unreachable cluster into a failure.
pub const REQUIRED_ENV: &str = "ERRAND_CLUSTER_TESTS";
/// Where `hack/testenv/up.sh` keeps its state when `ERRAND_TESTENV_DIR` is unset.
pub const DEFAULT_TESTENV_DIR: &str = "/var/tmp/errand-testenv";
/// The busybox image `hack/images/test-images.sh` imports into the node.
pub const BUSYBOX_IMAGE: &str = "errand.local/busybox:test";
/// The node's address on the pod bridge (`POD_GATEWAY` in hack/testenv/lib.sh): the one
/// address of this machine that pods can reach, where tests serve what pods must fetch.
pub const POD_GATEWAY: &str = "10.88.0.1";
/// A free port on [`POD_GATEWAY`], for a server that pods must reach.
///
/// # Panics
/// When the address is not this machine's, i.e. the test cluster's bridge is not up.
pub fn free_pod_gateway_address() -> std::net::SocketAddr {
    let host = POD_GATEWAY.parse().expect("an IP address");
    if let Err(e) = std::net::TcpListener::bind((host, 0)) {
        panic!("binding {POD_GATEWAY}: {e} (is the test cluster up?)");
    }
    super::ports::free_address(host)
}
/// Label put on every namespace `TestNamespace` creates.
pub const TEST_NAMESPACE_LABEL: &str = "errand.dev/test-namespace";

/// How long helpers wait for the cluster to answer or act by default. Generous:
/// CI runs the whole cluster and the build on 2 cores.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

const START_HINT: &str = "start it with `bash hack/testenv/build.sh && bash hack/testenv/up.sh` \
     (or run the whole suite with `bash hack/test.sh`)";

/// The admin kubeconfig of the test cluster.
pub fn kubeconfig_path() -> PathBuf {
    if let Some(path) = std::env::var_os(KUBECONFIG_ENV) {
        return PathBuf::from(path);
    }
    let dir = std::env::var_os("ERRAND_TESTENV_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_TESTENV_DIR));
    dir.join("admin.kubeconfig")
}

/// Whether this run must have the cluster (`ERRAND_CLUSTER_TESTS=1`).
pub fn cluster_required() -> bool {
    std::env::var(REQUIRED_ENV).is_ok_and(|v| v == "1")
}

/// The test cluster as the cluster tests hold it. They run at once, on libtest's threads of
/// one binary, each holding a share ([`client`] takes it). A test that disturbs every other
/// one holds it alone ([`alone`]): freezing the kubelet stops every pod on the node, and the
/// Helm chart's release watches every namespace and admits (or, scaled to zero, refuses) every
/// execution through its cluster-wide webhook. Fair: once a test waits to be alone, no other
/// test starts until it is done.
static CLUSTER: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A test's hold on [`CLUSTER`].
enum Hold {
    Shared(tokio::sync::RwLockReadGuard<'static, ()>),
    Alone(tokio::sync::RwLockWriteGuard<'static, ()>),
}

thread_local! {
    /// This test's hold. libtest runs each test on a thread of its own, so the hold lasts until
    /// the test ends, passed or failed; helpers that ask again (a test's [`client`], then its
    /// `Harness::start`) keep the one they have. Taking a second share could wait forever
    /// behind a test waiting to be alone, which waits for the first.
    static HOLD: RefCell<Option<Hold>> = const { RefCell::new(None) };
}

async fn hold(alone: bool) {
    if HOLD.with_borrow(Option::is_some) {
        return;
    }
    let hold = if alone {
        Hold::Alone(CLUSTER.write().await)
    } else {
        Hold::Shared(CLUSTER.read().await)
    };
    HOLD.set(Some(hold));
}

/// Holds the test cluster alone for the rest of this test: waits until the tests running
/// now end, and keeps the others from starting. Call it first, before anything that takes a
/// share (a [`client`], a `Harness`). Nothing without `ERRAND_CLUSTER_TESTS=1`.
///
/// # Panics
/// When this test already holds a share.
pub async fn alone() {
    if !cluster_required() {
        return;
    }
    assert!(
        HOLD.with_borrow(Option::is_none),
        "cluster::alone() must come before the test's first client"
    );
    hold(true).await;
}

/// The cluster DNS Service's address (kube-system's `kube-dns`).
pub async fn dns_service_ip(client: &Client) -> String {
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), "kube-system")
        .get("kube-dns")
        .await
        .expect("the cluster DNS Service")
        .spec
        .and_then(|spec| spec.cluster_ip)
        .expect("kube-dns has a cluster IP")
}

/// A client for the test cluster, holding a share of it for the rest of the test ([`alone`]
/// tests wait for it), or `None` (after a loud message) unless `ERRAND_CLUSTER_TESTS=1`.
///
/// # Panics
/// When `ERRAND_CLUSTER_TESTS=1` and the cluster cannot be reached.
pub async fn client() -> Option<Client> {
    if !cluster_required() {
        // A cluster that answers may be another checkout's, in the middle of its own run.
        let _ = writeln!(
            std::io::stderr(),
            "!!!!!!!! SKIPPING CLUSTER TEST: {REQUIRED_ENV}=1 is not set; {START_HINT}, \
             then run the tests with {REQUIRED_ENV}=1 (hack/test.sh does) !!!!!!!!"
        );
        return None;
    }
    hold(false).await;
    client_for(&kubeconfig_path(), true).await
}

/// [`client`] with the kubeconfig path and the "required" switch given.
pub async fn client_for(kubeconfig: &Path, required: bool) -> Option<Client> {
    match connect(kubeconfig).await {
        Ok(client) => Some(client),
        Err(reason) if required => panic!(
            "{REQUIRED_ENV}=1 but the test cluster is not reachable through {}: {reason}; {START_HINT}",
            kubeconfig.display()
        ),
        Err(reason) => {
            // Straight to stderr, not eprintln!: the test harness captures
            // the macros' output of passing tests, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "!!!!!!!! SKIPPING CLUSTER TEST: no test cluster through {} ({reason}); {START_HINT}. \
                 Set {REQUIRED_ENV}=1 to make this a failure (CI does). !!!!!!!!",
                kubeconfig.display()
            );
            None
        }
    }
}

/// A client of the test cluster acting as `user` (in `system:authenticated` only), by the
/// admin's impersonation, as `kubectl --as` does: what that user's RBAC allows and nothing more.
pub async fn client_as(user: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig_path()).expect("the admin kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("the admin kubeconfig loads");
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(vec!["system:authenticated".to_owned()]);
    Client::try_from(config).expect("a client")
}

async fn connect(path: &Path) -> Result<Client, String> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| format!("reading kubeconfig: {e}"))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("loading kubeconfig: {e}"))?;
    let client = Client::try_from(config).map_err(|e| format!("building client: {e}"))?;
    match tokio::time::timeout(Duration::from_secs(15), client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(client),
        Ok(Err(e)) => Err(format!("GET /version failed: {e}")),
        Err(_) => Err("GET /version timed out after 15s".to_owned()),
    }
}

/// A namespace created for one test, with a unique generated name.
///
/// Delete it with [`TestNamespace::delete`] at the end of the test. A test
/// that panics leaves it behind (labelled [`TEST_NAMESPACE_LABEL`]) for a
/// post-mortem; `hack/testenv/down.sh` removes the whole cluster anyway.
pub struct TestNamespace {
    client: Client,
    name: String,
}

impl TestNamespace {
    /// Creates `errand-<prefix>-<random>` with no Pod Security labels (the
    /// cluster default, `privileged`).
    pub async fn create(client: &Client, prefix: &str) -> Self {
        Self::create_with_labels(client, prefix, &[]).await
    }

    /// Creates a namespace with extra labels, e.g.
    /// `("pod-security.kubernetes.io/enforce", "restricted")`.
    pub async fn create_with_labels(
        client: &Client,
        prefix: &str,
        labels: &[(&str, &str)],
    ) -> Self {
        let mut all_labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        all_labels.insert(TEST_NAMESPACE_LABEL.to_owned(), "true".to_owned());
        let namespace = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("errand-{prefix}-")),
                labels: Some(all_labels),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let created = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating a test namespace errand-{prefix}-*: {e}"));
        let name = created
            .metadata
            .name
            .expect("the apiserver names a generateName namespace");
        Self {
            client: client.clone(),
            name,
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An `Api` for a namespaced kind in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// The objects of kind `K` errand created in this namespace.
    pub async fn managed<K>(&self) -> Vec<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.api::<K>()
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=errand"))
            .await
            .expect("listing")
            .items
    }

    /// Starts deleting the namespace (and everything in it); does not wait. One already gone
    /// is fine.
    pub async fn delete(self) {
        match Api::<Namespace>::all(self.client)
            .delete(&self.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(e) => panic!("deleting test namespace {}: {e}", self.name),
        }
    }
}

/// Creates a Job from its JSON form (handy with `serde_json::json!`).
pub async fn create_job(client: &Client, namespace: &str, job: serde_json::Value) -> Job {
    let job: Job =
        serde_json::from_value(job).expect("the test's Job JSON is a valid batch/v1 Job");
    Api::<Job>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &job)
        .await
        .unwrap_or_else(|e| panic!("creating Job in {namespace}: {e}"))
}

/// The Job's condition of `type_` with status "True", if it has one.
pub fn job_condition<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// Waits until the Job has condition `type_` (e.g. "Complete", "Failed") with
/// status "True" and returns it.
///
/// # Panics
/// After `timeout`, or if the Job reaches the opposite terminal condition
/// first ("Failed" while waiting for "Complete" or the other way round); the
/// message carries the Job's status, its pods and the namespace's events.
pub async fn wait_for_job_condition(
    client: &Client,
    namespace: &str,
    name: &str,
    type_: &str,
    timeout: Duration,
) -> Job {
    let opposite = match type_ {
        "Complete" => Some("Failed"),
        "Failed" => Some("Complete"),
        _ => None,
    };
    let api = Api::<Job>::namespaced(client.clone(), namespace);
    let terminal = |job: Option<&Job>| {
        job.is_some_and(|j| {
            job_condition(j, type_).is_some()
                || opposite.is_some_and(|o| job_condition(j, o).is_some())
        })
    };
    let failure = match tokio::time::timeout(timeout, await_condition(api, name, terminal)).await {
        Ok(Ok(Some(job))) if job_condition(&job, type_).is_some() => return job,
        Ok(Ok(Some(_))) => format!("reached {} instead of {type_}", opposite.unwrap_or("?")),
        Ok(Ok(None)) => "deleted while waiting".to_owned(),
        Ok(Err(e)) => format!("watch failed: {e}"),
        Err(_) => format!("no {type_} condition after {}s", timeout.as_secs()),
    };
    let report = describe_job(client, namespace, name).await;
    panic!("Job {namespace}/{name}: {failure}\n{report}")
}

/// The Job's pods (by the `batch.kubernetes.io/job-name` label).
pub async fn job_pods(client: &Client, namespace: &str, job_name: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job_name}")))
        .await
        .unwrap_or_else(|e| panic!("listing pods of Job {namespace}/{job_name}: {e}"))
        .items
}

/// Waits until one of the Job's pods is in `phase` ("Running", "Succeeded",
/// ...) and returns it.
///
/// # Panics
/// After `timeout`, with the Job's report.
pub async fn wait_for_job_pod_phase(
    client: &Client,
    namespace: &str,
    job_name: &str,
    phase: &str,
    timeout: Duration,
) -> Pod {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let pods = job_pods(client, namespace, job_name).await;
        if let Some(pod) = pods
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase))
        {
            return pod;
        }
        if tokio::time::Instant::now() >= deadline {
            let report = describe_job(client, namespace, job_name).await;
            panic!(
                "Job {namespace}/{job_name}: no pod in phase {phase} after {}s\n{report}",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The logs of one container of a pod (`None`: the pod's only container).
pub async fn pod_logs(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
) -> String {
    let params = LogParams {
        container: container.map(str::to_owned),
        ..LogParams::default()
    };
    Api::<Pod>::namespaced(client.clone(), namespace)
        .logs(pod, &params)
        .await
        .unwrap_or_else(|e| panic!("reading logs of pod {namespace}/{pod}: {e}"))
}

/// The logs of the Job's single pod (its only container).
///
/// # Panics
/// If the Job has no pod or more than one.
pub async fn job_logs(client: &Client, namespace: &str, job_name: &str) -> String {
    let pods = job_pods(client, namespace, job_name).await;
    let [pod] = pods.as_slice() else {
        panic!(
            "Job {namespace}/{job_name} has {} pods, expected exactly one",
            pods.len()
        );
    };
    let pod_name = pod
        .metadata
        .name
        .as_deref()
        .expect("listed pods have names");
    pod_logs(client, namespace, pod_name, None).await
}

/// A human-readable report of a Job, its pods and the namespace's events, for
/// failure messages.
pub async fn describe_job(client: &Client, namespace: &str, name: &str) -> String {
    let mut report = String::new();
    match Api::<Job>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
    {
        Ok(Some(job)) => report.push_str(&format!(
            "job status: {}\n",
            serde_json::to_string(&job.status).unwrap_or_default()
        )),
        Ok(None) => report.push_str("job: not found\n"),
        Err(e) => report.push_str(&format!("job: {e}\n")),
    }
    match Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
        .await
    {
        Ok(pods) => {
            for pod in pods {
                report.push_str(&format!(
                    "pod {}: node {:?}, status {}\n",
                    pod.metadata.name.unwrap_or_default(),
                    pod.spec.and_then(|s| s.node_name),
                    serde_json::to_string(&pod.status).unwrap_or_default()
                ));
            }
        }
        Err(e) => report.push_str(&format!("pods: {e}\n")),
    }
    match Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
    {
        Ok(events) => {
            for event in events {
                report.push_str(&format!(
                    "event {} {}/{}: {} {}\n",
                    event.type_.unwrap_or_default(),
                    event.involved_object.kind.unwrap_or_default(),
                    event.involved_object.name.unwrap_or_default(),
                    event.reason.unwrap_or_default(),
                    event.message.unwrap_or_default()
                ));
            }
        }
        Err(e) => report.push_str(&format!("events: {e}\n")),
    }
    report
}

/// Installs Kueue into the test cluster and waits until it admits work
/// (`hack/testenv/kueue.sh`: idempotent, serialized across test processes,
/// about 20 s the first time). Tests that need Kueue call this first; the
/// cluster does not run it otherwise.
///
/// # Panics
/// When the script fails; its output is in the test's output.
pub async fn ensure_kueue() {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/testenv/kueue.sh");
            let status = tokio::process::Command::new("bash")
                .arg(&script)
                .status()
                .await
                .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
            assert!(status.success(), "{} failed: {status}", script.display());
        })
        .await;
}

/// `kubectl ARGS` as the admin; fails the test unless it succeeds; its stdout.
pub fn kubectl(args: &[&str]) -> String {
    let output = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .expect("kubectl runs (hack/test.sh puts it on PATH)");
    assert!(
        output.status.success(),
        "kubectl {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
