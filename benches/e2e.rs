//! Benchmark: end to end on the real test cluster, what a user waits for: an AgentExecution
//! from create until `Succeeded` with its results saved, against what they would pick instead,
//! a plain Job (create → `Complete`) and a one-step Argo Workflow that saves the same file as
//! an output artifact (create → `Succeeded`); and the same execution in the sandboxed tier
//! (RuntimeClass `gvisor`, the test node's gVisor) against errand under runc.
//!
//! Runs only under `cargo bench --bench e2e` with the test cluster up (`hack/bench/e2e.sh`
//! brings it up and down around it). All three run the same command in the same busybox image
//! on the same node, interleaved, [`RUNS`] times each; errand and Argo save their artifacts to
//! the same S3 server (s3s-fs on the pod bridge, as the store tests use). Argo Workflows (the
//! release pinned in `hack/bench/tools/argo`) is built by `hack/bench/argo.sh` when this
//! benchmark starts, never by `hack/test.sh`; its workflow-controller runs on the host as
//! errand's controller does (in this process), both watching only the benchmark's namespace.
//!
//! errand's controller has the signing key, so its runners report their runs' ends and an
//! execution ends once its results are saved, without waiting for the kubelet (the early
//! finish). It prints the median and p90 of each, the ratios errand / Job and errand / Argo
//! against their targets, gVisor / runc, and a per-phase breakdown of the medians from the pods' own status as the
//! watches saw it and errand's run record (agent start and end).

#[path = "../tests/support/mod.rs"]
mod support;

mod shared;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};

use errand::api::contract::ConditionType;
use errand::api::{AgentExecution, Phase};
use errand::controller::names::job_name;
use errand::resolve::conditions;
use errand::store::Store;
use errand::store::keys::ResultName;
use shared::percentile;
use support::cluster::{self, BUSYBOX_IMAGE, POD_GATEWAY, TestNamespace};

/// Runs of each kind.
const RUNS: usize = 30;
/// The longest one run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// What every run executes: it writes a small file, the result each of them keeps (errand in
/// its artifacts directory, the others in /tmp).
const COMMAND: &str = "echo 'the answer is 42' > ${ERRAND_ARTIFACTS_DIR:-/tmp}/answer.txt";
/// The Service account Argo's pods run as, with the executor's permissions.
const ARGO_SERVICE_ACCOUNT: &str = "argo-executor";

/// When each object, by name, was first seen in each state that matters here.
type Seen = Arc<Mutex<HashMap<String, Timeline>>>;

/// First-seen wall clock times of one run (its object and its pod), as the watches saw them.
#[derive(Clone, Debug, Default)]
struct Timeline {
    /// The create request was sent.
    submitted: Option<Timestamp>,
    /// The create request returned.
    created: Option<Timestamp>,
    /// errand's Job appeared.
    job: Option<Timestamp>,
    /// The pod appeared.
    pod: Option<Timestamp>,
    /// The pod was bound to the node.
    scheduled: Option<Timestamp>,
    /// Its init containers finished (condition Initialized).
    initialized: Option<Timestamp>,
    /// Its main containers started (phase Running).
    running: Option<Timestamp>,
    /// It ended (phase Succeeded).
    pod_done: Option<Timestamp>,
    /// The object showed its successful end: errand `Succeeded` with `ResultsSaved`, the Job
    /// `Complete`, the Workflow `Succeeded`.
    done: Option<Timestamp>,
    /// It ended otherwise, and how.
    failed: Option<String>,
}

/// Which of the three a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Errand,
    /// errand with its environment naming RuntimeClass `gvisor`.
    ErrandGvisor,
    Job,
    Argo,
}

impl Kind {
    fn name(self, i: usize) -> String {
        match self {
            Kind::Errand => format!("exec-{i}"),
            Kind::ErrandGvisor => format!("gvisor-{i}"),
            Kind::Job => format!("job-{i}"),
            Kind::Argo => format!("argo-{i}"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Errand => "errand AgentExecution → Succeeded, results saved",
            Kind::ErrandGvisor => "errand AgentExecution under gVisor → Succeeded, results saved",
            Kind::Job => "plain Job → Complete",
            Kind::Argo => "Argo Workflow → Succeeded, artifact saved",
        }
    }
}

fn main() {
    shared::run_async("e2e", || async {
        bench().await;
        true
    });
}

/// What `hack/bench/argo.sh` built: binaries, the module's source (CRDs) and the image.
struct Argo {
    bin: PathBuf,
    module: PathBuf,
    image: String,
}

/// Builds (or finds cached) and imports Argo Workflows with `hack/bench/argo.sh --import`.
fn build_argo() -> Argo {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/bench/argo.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg("--import")
        .stderr(Stdio::inherit())
        .output()
        .expect("running hack/bench/argo.sh");
    assert!(output.status.success(), "hack/bench/argo.sh failed");
    let text = String::from_utf8(output.stdout).expect("its output is UTF-8");
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("hack/bench/argo.sh printed no {name}: {text}"))
            .to_owned()
    };
    Argo {
        bin: value("ARGO_BIN_DIR").into(),
        module: value("ARGO_MODULE_DIR").into(),
        image: value("ARGO_IMAGE"),
    }
}

async fn bench() {
    let argo = build_argo();
    let client = support::cluster::client_for(&support::cluster::kubeconfig_path(), true)
        .await
        .expect("the test cluster is reachable");
    support::errand::install_crds(&client).await;
    support::errand::apply_crds(&client, argo_crds(&argo.module)).await;
    let namespace = TestNamespace::create(&client, "e2e").await;
    let ns = namespace.name().to_owned();
    let s3 = support::s3::server_on(POD_GATEWAY)
        .await
        .expect("s3s-fs is installed (hack/test.sh installs it)");

    // errand: its controller in this process, results in the S3 server under errand/.
    let options = s3.options();
    let options: Vec<(&str, &str)> = options.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let store_url = format!("s3://{}/errand", support::s3::BUCKET);
    let store = Store::open_with_options(&store_url, &options).expect("an S3 store");
    let controller = support::harness::spawn_controller(
        client.clone(),
        &ns,
        store.clone(),
        support::errand::ERRAND_IMAGE,
        Some(cluster::free_pod_gateway_address()),
    );
    support::errand::create(
        &client,
        &ns,
        json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "writer"},
            "spec": {"runtime": {"image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", COMMAND]},
                     "config": {"config_format": "agents-spec-v1", "name": "writer"}}
        }),
    )
    .await;

    // Argo: its controller on the host, artifacts in the same S3 server under argo/.
    setup_argo(&client, &ns, &s3).await;
    let mut workflow_controller = start_workflow_controller(&argo, &ns);

    let seen: Seen = Arc::default();
    watch_pods(&client, &ns, &seen);
    watch_executions(&client, &ns, &seen);
    watch_jobs(&client, &ns, &seen);
    watch_workflows(&client, &ns, &seen);

    // One warm-up run of each (images into the page cache, informers synced), not counted.
    let kinds = [Kind::Errand, Kind::ErrandGvisor, Kind::Job, Kind::Argo];
    for kind in kinds {
        run(&client, &ns, kind, &kind.name(0), &seen).await;
    }
    let mut totals: HashMap<&str, Vec<f64>> = HashMap::new();
    for i in 1..=RUNS {
        // Interleaved, in a rotating order, so drift on the shared machine hits all three.
        for k in 0..kinds.len() {
            let kind = kinds[(i + k) % kinds.len()];
            let name = kind.name(i);
            let timeline = run(&client, &ns, kind, &name, &seen).await;
            totals
                .entry(kind.label())
                .or_default()
                .push(ms(timeline.submitted, timeline.done));
        }
    }
    let records = run_records(&client, &ns, &store).await;
    check_artifacts(&s3, &client, &ns).await;
    let _ = workflow_controller.kill();
    let _ = workflow_controller.wait();
    controller.abort();

    report(&totals, &seen.lock().unwrap(), &records);
    namespace.delete().await;
}

/// Milliseconds from `from` to `to`.
fn ms(from: Option<Timestamp>, to: Option<Timestamp>) -> f64 {
    span(from, to).expect("a start and an end")
}

/// Milliseconds from `from` to `to`, when both were seen.
fn span(from: Option<Timestamp>, to: Option<Timestamp>) -> Option<f64> {
    Some(to?.duration_since(from?).as_secs_f64() * 1000.0)
}

/// Creates one run of `kind` named `name` and waits for its successful end.
async fn run(client: &Client, ns: &str, kind: Kind, name: &str, seen: &Seen) -> Timeline {
    let submitted = Timestamp::now();
    seen.lock()
        .unwrap()
        .entry(name.to_owned())
        .or_default()
        .submitted = Some(submitted);
    match kind {
        Kind::Errand | Kind::ErrandGvisor => {
            let mut spec = json!({"agentRef": {"name": "writer"}, "input": "x"});
            if kind == Kind::ErrandGvisor {
                spec["environment"] = json!({"compute": {"runtimeClassName": "gvisor"}});
            }
            support::errand::create(
                client,
                ns,
                json!({"apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution",
                       "metadata": {"name": name}, "spec": spec}),
            )
            .await
        }
        Kind::Job => {
            support::errand::create(
                client,
                ns,
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                       "spec": {"backoffLimit": 0, "template": {"spec": {
                           "restartPolicy": "Never",
                           "containers": [{"name": "main", "image": BUSYBOX_IMAGE,
                                           "imagePullPolicy": "Never",
                                           "command": ["sh", "-c", COMMAND]}]}}}}),
            )
            .await
        }
        Kind::Argo => {
            let workflow: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                "metadata": {"name": name},
                "spec": {"entrypoint": "main", "serviceAccountName": ARGO_SERVICE_ACCOUNT,
                         "templates": [{"name": "main",
                             "container": {"image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                                           "command": ["sh", "-c", COMMAND]},
                             "outputs": {"artifacts": [{"name": "answer", "path": "/tmp/answer.txt"}]}}]}
            }))
            .expect("a Workflow");
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &workflows())
                .create(&PostParams::default(), &workflow)
                .await
                .expect("the Workflow is created");
        }
    }
    seen.lock()
        .unwrap()
        .get_mut(name)
        .expect("submitted")
        .created = Some(Timestamp::now());
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    loop {
        {
            let seen = seen.lock().unwrap();
            let timeline = &seen[name];
            if let Some(failure) = &timeline.failed {
                panic!("{name} failed: {failure}");
            }
            if timeline.done.is_some() {
                return timeline.clone();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} did not succeed within {RUN_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Records `at` into `field` of `name`'s timeline unless something was recorded there first.
fn record(
    seen: &Seen,
    name: &str,
    at: Timestamp,
    field: fn(&mut Timeline) -> &mut Option<Timestamp>,
) {
    let mut seen = seen.lock().unwrap();
    field(seen.entry(name.to_owned()).or_default()).get_or_insert(at);
}

fn fail(seen: &Seen, name: &str, how: String) {
    let mut seen = seen.lock().unwrap();
    seen.entry(name.to_owned())
        .or_default()
        .failed
        .get_or_insert(how);
}

/// Spawns a task that feeds every applied object of `api` to `on` with the time it was seen.
fn watch<K>(api: Api<K>, on: impl Fn(&K, Timestamp) + Send + 'static)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(object)) = events.try_next().await {
            on(&object, Timestamp::now());
        }
    });
}

/// The pods of all three, by the run they belong to: errand's and the Jobs' by their Job
/// (errand's Job is named after its execution), Argo's by their Workflow.
fn watch_pods(client: &Client, ns: &str, seen: &Seen) {
    let seen = seen.clone();
    watch(
        Api::<Pod>::namespaced(client.clone(), ns),
        move |pod, at| {
            let labels = pod.labels();
            let Some(run) = labels
                .get("workflows.argoproj.io/workflow")
                .cloned()
                .or_else(|| {
                    let job = labels.get("batch.kubernetes.io/job-name")?;
                    Some(execution_of(job).unwrap_or(job).to_owned())
                })
            else {
                return;
            };
            let run = run.as_str();
            record(&seen, run, at, |t| &mut t.pod);
            let spec = pod.spec.as_ref();
            if spec.and_then(|s| s.node_name.as_ref()).is_some() {
                record(&seen, run, at, |t| &mut t.scheduled);
            }
            let status = pod.status.as_ref();
            let initialized = status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Initialized" && c.status == "True")
            });
            if initialized {
                record(&seen, run, at, |t| &mut t.initialized);
            }
            match status.and_then(|s| s.phase.as_deref()) {
                Some("Running") => record(&seen, run, at, |t| &mut t.running),
                Some("Succeeded") => {
                    record(&seen, run, at, |t| &mut t.running);
                    record(&seen, run, at, |t| &mut t.pod_done);
                }
                Some("Failed") => fail(
                    &seen,
                    run,
                    format!("pod {} failed: {:?}", pod.name_any(), pod.status),
                ),
                _ => {}
            }
        },
    );
}

fn watch_executions(client: &Client, ns: &str, seen: &Seen) {
    let seen = seen.clone();
    watch(
        Api::<AgentExecution>::namespaced(client.clone(), ns),
        move |execution, at| {
            let name = execution.name_any();
            let Some(status) = execution.status.as_ref() else {
                return;
            };
            if status.job_name.is_some() {
                record(&seen, &name, at, |t| &mut t.job);
            }
            let saved = conditions::get(&status.conditions, ConditionType::ResultsSaved)
                .is_some_and(|c| c.status == "True");
            match status.phase {
                Some(Phase::Succeeded) if saved => record(&seen, &name, at, |t| &mut t.done),
                Some(phase) if phase.is_terminal() => {
                    fail(&seen, &name, format!("{phase:?}: {:?}", status.message))
                }
                _ => {}
            }
        },
    );
}

/// The execution whose Job `job` is, for errand's Jobs.
fn execution_of(job: &str) -> Option<&str> {
    job.strip_prefix("errand-")
        .filter(|execution| job_name(execution) == job)
}

fn watch_jobs(client: &Client, ns: &str, seen: &Seen) {
    let seen = seen.clone();
    watch(
        Api::<Job>::namespaced(client.clone(), ns),
        move |job, at| {
            let name = job.name_any();
            if let Some(execution) = execution_of(&name) {
                record(&seen, execution, at, |t| &mut t.job);
                return;
            }
            let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
            let has = |type_: &str| {
                conditions.is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
            };
            if has("Complete") {
                record(&seen, &name, at, |t| &mut t.done);
            } else if has("Failed") {
                fail(&seen, &name, format!("{:?}", job.status));
            }
        },
    );
}

fn workflows() -> ApiResource {
    ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "Workflow".into(),
        plural: "workflows".into(),
    }
}

fn watch_workflows(client: &Client, ns: &str, seen: &Seen) {
    let seen = seen.clone();
    watch(
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &workflows()),
        move |workflow, at| {
            let name = workflow.name_any();
            let status = &workflow.data["status"];
            match status["phase"].as_str() {
                Some("Succeeded") => record(&seen, &name, at, |t| &mut t.done),
                Some(phase @ ("Failed" | "Error")) => {
                    fail(&seen, &name, format!("{phase}: {}", status["message"]))
                }
                _ => {}
            }
        },
    );
}

/// Argo's CRDs from its release (the minimal ones of its quick start).
fn argo_crds(module: &Path) -> Vec<CustomResourceDefinition> {
    let dir = module.join("manifests/base/crds/minimal");
    let mut crds = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("argoproj.io_") && name.ends_with(".yaml") {
            let text = std::fs::read_to_string(&path).expect("a CRD file");
            crds.push(
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            );
        }
    }
    assert!(!crds.is_empty(), "no CRDs in {}", dir.display());
    crds
}

/// What Argo needs in the namespace: the executor's Role for its pods' ServiceAccount, the
/// S3 credentials, and the controller's ConfigMap naming the S3 server as the artifact
/// repository, with errand's store beside it in the same bucket.
async fn setup_argo(client: &Client, ns: &str, s3: &support::s3::S3Server) {
    let (access_key, secret_key) = support::s3::credentials();
    let endpoint = s3.endpoint.trim_start_matches("http://");
    let repository = format!(
        "s3:\n  bucket: {bucket}\n  endpoint: {endpoint}\n  insecure: true\n  region: {region}\n  \
         keyFormat: argo/{{{{workflow.name}}}}/{{{{pod.name}}}}\n  \
         accessKeySecret: {{name: argo-s3, key: accessKey}}\n  \
         secretKeySecret: {{name: argo-s3, key: secretKey}}\n",
        bucket = support::s3::BUCKET,
        region = support::s3::REGION,
    );
    let rbac = "rbac.authorization.k8s.io";
    for object in [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": ARGO_SERVICE_ACCOUNT}}),
        // The quick start's minimum for the emissary executor.
        json!({"apiVersion": format!("{rbac}/v1"), "kind": "Role", "metadata": {"name": "executor"},
               "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"],
                          "verbs": ["create", "patch"]}]}),
        json!({"apiVersion": format!("{rbac}/v1"), "kind": "RoleBinding",
               "metadata": {"name": "executor"},
               "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "executor"},
               "subjects": [{"kind": "ServiceAccount", "name": ARGO_SERVICE_ACCOUNT}]}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "argo-s3"},
               "stringData": {"accessKey": access_key, "secretKey": secret_key}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "workflow-controller-configmap"},
               "data": {"artifactRepository": repository}}),
    ] {
        support::errand::create(client, ns, object).await;
    }
}

/// Argo's workflow-controller for `ns` only, with its executor image from the node, as
/// errand's controller runs: on the host, with the admin kubeconfig, no leader election.
fn start_workflow_controller(argo: &Argo, ns: &str) -> Child {
    let log = std::env::temp_dir().join(format!("{ns}-workflow-controller.log"));
    eprintln!("Argo's workflow-controller logs to {}", log.display());
    Command::new(argo.bin.join("workflow-controller"))
        .arg("--kubeconfig")
        .arg(support::cluster::kubeconfig_path())
        .args(["--namespace", ns, "--namespaced", "--managed-namespace", ns])
        .args([
            "--executor-image",
            &argo.image,
            "--executor-image-pull-policy",
            "Never",
        ])
        .args(["--loglevel", "warn"])
        .env("LEADER_ELECTION_DISABLE", "true")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("a log file"))
        .stderr(Stdio::from(
            std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .expect("the log file"),
        ))
        .spawn()
        .expect("starting Argo's workflow-controller")
}

/// errand's run record (`run_result`) of each execution, by name: when the agent started and
/// ended by the pod's clock.
async fn run_records(client: &Client, ns: &str, store: &Store) -> HashMap<String, Value> {
    let executions = Api::<AgentExecution>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .expect("listing the executions");
    let mut records = HashMap::new();
    for execution in executions.items {
        let id = support::harness::execution_id(ns, &execution);
        let key = errand::store::keys::result(&id, ResultName::RunResult).expect("a result key");
        let record = support::store::read_all(store, &key).await;
        records.insert(
            execution.name_any(),
            serde_json::from_slice(&record).expect("run_result is JSON"),
        );
    }
    records
}

/// Both kept the file: errand's output_artifacts and Argo's artifact of every run are objects
/// in the bucket, and the file is in them.
async fn check_artifacts(s3: &support::s3::S3Server, client: &Client, ns: &str) {
    let workflows = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &workflows())
        .list(&Default::default())
        .await
        .expect("listing the Workflows");
    for workflow in workflows.items {
        let nodes = workflow.data["status"]["nodes"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let key = nodes
            .values()
            .find_map(|node| {
                node["outputs"]["artifacts"][0]["s3"]["key"]
                    .as_str()
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("{} recorded no artifact: {nodes:?}", workflow.name_any()));
        let object = s3.bucket_dir().join(&key);
        let bytes = std::fs::read(&object)
            .unwrap_or_else(|e| panic!("Argo's artifact {}: {e}", object.display()));
        let files = support::store::tar_files(&bytes);
        assert!(
            files.values().any(|f| f.contains("the answer is 42")),
            "{key} holds the file: {files:?}"
        );
    }
}

fn report(
    totals: &HashMap<&str, Vec<f64>>,
    seen: &HashMap<String, Timeline>,
    records: &HashMap<String, Value>,
) {
    let stats = |kind: Kind| {
        let runs = &totals[kind.label()];
        (percentile(runs, 50.0), percentile(runs, 90.0))
    };
    let (errand, job, argo) = (stats(Kind::Errand), stats(Kind::Job), stats(Kind::Argo));
    let gvisor = stats(Kind::ErrandGvisor);
    println!("| end to end, {RUNS} interleaved runs each | median | p90 |");
    println!("|---|---|---|");
    for (kind, (median, p90)) in [
        (Kind::Errand, errand),
        (Kind::ErrandGvisor, gvisor),
        (Kind::Job, job),
        (Kind::Argo, argo),
    ] {
        println!("| {} | {median:.0} ms | {p90:.0} ms |", kind.label());
    }
    println!();
    println!("| ratio | median | p90 | target |");
    println!("|---|---|---|---|");
    println!(
        "| errand / plain Job | {:.3} | {:.3} | <= 1.25; <= 0.5 with the early finish (issue 36) |",
        errand.0 / job.0,
        errand.1 / job.1
    );
    println!(
        "| errand / Argo Workflow | {:.3} | {:.3} | <= 0.6 |",
        errand.0 / argo.0,
        errand.1 / argo.1
    );
    println!(
        "| errand under gVisor / errand under runc | {:.3} | {:.3} | (the sandbox's cost) |",
        gvisor.0 / errand.0,
        gvisor.1 / errand.1
    );
    println!();
    // Per phase: the median of each step's duration over the counted runs.
    type Step = Box<dyn Fn(&Timeline, Option<&Value>) -> Option<f64>>;
    let started = |r: Option<&Value>| time_of(r?, "started_at");
    let finished = |r: Option<&Value>| time_of(r?, "finished_at");
    let steps: Vec<(&str, Step)> = vec![
        (
            "create request (admission)",
            Box::new(|t, _| span(t.submitted, t.created)),
        ),
        (
            "created → errand's Job seen",
            Box::new(|t, _| span(t.created, t.job)),
        ),
        (
            "created (errand: Job seen) → pod seen",
            Box::new(|t, _| span(t.job.or(t.created), t.pod)),
        ),
        (
            "pod seen → scheduled",
            Box::new(|t, _| span(t.pod, t.scheduled)),
        ),
        (
            "scheduled → initialized (init containers done)",
            Box::new(|t, _| span(t.scheduled, t.initialized)),
        ),
        (
            "initialized → Running seen",
            Box::new(|t, _| span(t.initialized, t.running)),
        ),
        (
            "initialized → agent started (run record)",
            Box::new(move |t, r| span(t.initialized, started(r))),
        ),
        (
            "agent ran (run record)",
            Box::new(move |_, r| span(started(r), finished(r))),
        ),
        (
            "agent ended → pod Succeeded seen (upload, exit, kubelet)",
            Box::new(move |t, r| span(finished(r), t.pod_done)),
        ),
        (
            "Running seen → pod Succeeded seen",
            Box::new(|t, _| span(t.running, t.pod_done)),
        ),
        (
            "pod Succeeded seen → object done seen (status; negative: done first)",
            Box::new(|t, _| span(t.pod_done, t.done)),
        ),
        (
            "agent ended → object done seen (status)",
            Box::new(move |t, r| span(finished(r), t.done)),
        ),
        ("total", Box::new(|t, _| span(t.submitted, t.done))),
    ];
    println!("| step (median ms) | errand | errand, gVisor | plain Job | Argo |");
    println!("|---|---|---|---|---|");
    for (step, measure) in &steps {
        let column = |kind: Kind| {
            let values: Vec<f64> = (1..=RUNS)
                .filter_map(|i| {
                    let name = kind.name(i);
                    measure(&seen[&name], records.get(&name))
                })
                .collect();
            if values.is_empty() {
                "".to_owned()
            } else {
                format!("{:.0}", percentile(&values, 50.0))
            }
        };
        println!(
            "| {step} | {} | {} | {} | {} |",
            column(Kind::Errand),
            column(Kind::ErrandGvisor),
            column(Kind::Job),
            column(Kind::Argo)
        );
    }
}

/// A time the run record holds.
fn time_of(record: &Value, field: &str) -> Option<Timestamp> {
    record[field].as_str()?.parse().ok()
}
