//! Benchmark: 10,000 executions on 1,000 nodes simulated by kwok, on the real test control plane.
//!
//! Runs only under `cargo bench --bench scale` with the test cluster up and `KWOK_BIN` naming
//! a kwok binary (`bash hack/bench/on-cluster.sh scale` does both). kwok simulates the nodes
//! and, with the Stages of `hack/bench/kwok-stages.yaml`, what the pods of errand's Jobs do:
//! staging ends with errand's staged summary, the agent with errand's run summary in its
//! termination message, one run in ten failing. The controller runs in a process of its own
//! (this binary, started again in controller mode), so its CPU time and memory are its own.
//! The bench creates the executions at a steady rate and prints, against the targets:
//! - create → Job seen, p50 and p99;
//! - the time until every execution is terminal, and whether each ended as its agent did;
//! - the controller's CPU seconds and peak RSS growth per execution;
//! - the controller's API writes per execution and its reconcile errors;
//! - its work-queue depth over time (the `work_queue_depth` metric, sampled every second);
//! - after a restart with every execution present: the time until `/readyz` answers and the
//!   writes in the next 30 s;
//! - where the machine's time went meanwhile: CPU seconds of every control-plane process and
//!   of kwok, and kube-apiserver's own request latency by verb and resource;
//! - side by side, the same load as plain Jobs with errand's pod, run first (their namespace
//!   deleted and gone before errand's run): create → first pod, time until all ended, CPU and
//!   API requests, and the ratios errand / Jobs.
//!
//! `ERRAND_SCALE_EXECUTIONS` (10000), `ERRAND_SCALE_NODES` (1000), `ERRAND_SCALE_RATE` (100 per
//! second) and `ERRAND_SCALE_DEADLINE` (900 s from the first create) size a smaller run;
//! `ERRAND_SCALE_CONTROLLER_WRAPPER` runs the controller under a profiler (a command the
//! controller's command line is appended to, e.g. a script running `exec heaptrack -o FILE "$@"`).

#[path = "../tests/support/mod.rs"]
mod support;

mod shared;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;

use errand::api::contract::ConditionType;
use errand::api::{AgentExecution, AgentExecutionSpec, Phase, Reference};
use errand::controller::names::job_name;
use errand::store::Store;
use shared::cluster::{Seen, watch_jobs, watch_pods};
use shared::{control_plane, env_or, percentile};
use support::writes::{Tally, Writes};

/// The tolerations of every pod of the benchmark, errand's and the plain Jobs': kwok's nodes,
/// and, with no time limit, a node that stops answering. On a loaded machine kwok renews some
/// nodes' heartbeats late; with the default 20 s (`up.sh`) the taint manager then evicts
/// their pods, and kwok leaves an evicted pod terminating for ever, which measured kwok and
/// kept the benchmark's namespace from ever going away.
fn kwok_tolerations() -> serde_json::Value {
    json!([
        {"key": KWOK_TAINT, "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
    ])
}

/// Every tenth execution runs the Agent whose pods kwok fails.
const FAIL_EVERY: usize = 10;
/// The label that puts pods on kwok's nodes, and the taint that keeps everything else off.
const KWOK_LABEL: (&str, &str) = ("type", "kwok");
const KWOK_TAINT: &str = "kwok.x-k8s.io/node";
/// How many creates may be in flight at once while keeping the rate.
const IN_FLIGHT: usize = 200;
/// When, after the first create, the API server's CPU profile starts.
const PROFILE_AFTER: Duration = Duration::from_secs(5);
/// The functions of the API server's profile the benchmark prints (the end of each name):
/// request handling by verb, and what inside it costs (server-side apply and strategic merge
/// patches, managed fields, validation of custom resources by their schemas and CEL rules,
/// admission, etcd, serialization, watch fan-out, TLS, garbage collection).
const PROFILE_FUNCTIONS: [&str; 18] = [
    "handlers.CreateResource.createHandler.func1",
    "handlers.(*patcher).patchResource.func2",
    "handlers.UpdateResource.func1.4",
    "handlers.ListResource.func1",
    "handlers.(*WatchServer).HandleHTTP",
    "handlers.(*applyPatcher).applyPatchToCurrentObject",
    "handlers.(*smpPatcher).applyPatchToCurrentObject",
    "internal.(*FieldManager).Apply",
    "internal.(*FieldManager).Update",
    "cel.(*Validator).Validate",
    "validate.(*SchemaValidator).Validate",
    "admission.(*reinvoker).Admit",
    "etcd3.(*store).GuaranteedUpdate",
    "etcd3.(*store).Create",
    "encoding/json.Unmarshal",
    "crypto/tls.(*Conn).Write",
    "runtime.gcBgMarkWorker",
    "(*Cacher).dispatchEvents",
];
/// How long writes are counted after the restarted controller is ready.
const AFTER_RESTART: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((mode, rest)) if mode == CONTROLLER_MODE => serve_controller(rest),
        _ => shared::run_async("scale", bench),
    }
}

/// The terminal executions a watch saw, by outcome.
#[derive(Default)]
struct Outcomes {
    succeeded: HashSet<String>,
    failed: HashSet<String>,
    other: HashSet<String>,
    /// The reason of each Failed execution's `Failed` condition.
    failed_reasons: HashMap<String, String>,
}

impl Outcomes {
    fn terminal(&self) -> usize {
        self.succeeded.len() + self.failed.len() + self.other.len()
    }
}

/// One sample of the run, every second.
struct Sample {
    at: Duration,
    created: usize,
    jobs: usize,
    terminal: usize,
    queue_depth: Option<f64>,
}

async fn bench() -> bool {
    let executions: usize = env_or("ERRAND_SCALE_EXECUTIONS", 10_000);
    let nodes: usize = env_or("ERRAND_SCALE_NODES", 1_000);
    let rate: f64 = env_or("ERRAND_SCALE_RATE", 100.0);
    let deadline = Duration::from_secs(env_or("ERRAND_SCALE_DEADLINE", 900));
    let kwok_bin = std::env::var("KWOK_BIN").expect(
        "KWOK_BIN names a kwok binary: run `bash hack/bench/on-cluster.sh scale`, which builds it with hack/bench/kwok.sh",
    );
    let kubeconfig = support::cluster::kubeconfig_path();
    let client = support::cluster::client_for(&kubeconfig, true)
        .await
        .expect("the test cluster is reachable");
    support::errand::install_crds(&client).await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    let _kwok = Kwok::start(&kwok_bin, &kubeconfig);
    let started = Instant::now();
    create_nodes(&client, nodes).await;
    println!(
        "{nodes} kwok nodes Ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // First the same load as plain Jobs, without errand: what the control plane does for a
    // Job alone. Their namespace is then deleted and gone before errand's run starts.
    let jobs = plain_jobs(&client, executions, rate, deadline).await;

    let namespace = support::cluster::TestNamespace::create(&client, "scale").await;
    let ns = namespace.name().to_owned();
    for (agent, command) in [("succeeds", "true"), ("fails", "false")] {
        support::errand::create(&client, &ns, json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": agent},
            "spec": {"runtime": {"image": support::cluster::BUSYBOX_IMAGE, "command": [command]},
                     "config": {"config_format": "agents-spec-v1", "name": agent}}
        }))
        .await;
    }
    support::errand::create(&client, &ns, json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment", "metadata": {"name": "kwok"},
        "spec": {"compute": {"nodeSelector": {KWOK_LABEL.0: KWOK_LABEL.1}, "tolerations": kwok_tolerations()}}
    }))
    .await;

    let store_dir = tempfile::tempdir().expect("a store directory");
    let controller = ControllerProcess::start(&kubeconfig, &ns, store_dir.path());
    controller.wait_ready(Duration::from_secs(120)).await;
    let seen = watch_jobs(&client, &ns);
    let pods_seen = watch_pods(&client, &ns);
    let outcomes = watch_outcomes(&client, &ns);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = controller.memory_kib("VmRSS:");
    let cpu_before = controller.cpu_seconds();
    let writes_before = controller.writes();
    let window = control_plane::Window::open(&client).await;
    let profile = std::env::temp_dir().join("errand-scale-apiserver.pprof");
    let profiling = {
        let (client, profile) = (client.clone(), profile.clone());
        let seconds = env_or("ERRAND_SCALE_PROFILE_SECONDS", 30);
        tokio::spawn(async move {
            tokio::time::sleep(PROFILE_AFTER).await;
            control_plane::profile_apiserver(&client, seconds, &profile).await
        })
    };

    // Create at `rate` per second, recording when each create call started.
    let names: Vec<String> = (0..executions).map(|i| format!("run-{i}")).collect();
    let submitted: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let created = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let stop_sampling = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (seen, outcomes, created) = (seen.clone(), outcomes.clone(), created.clone());
        let stop = stop_sampling.clone();
        let metrics = controller.address;
        tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                let queue_depth = metric(metrics, "errand_controller_work_queue_depth").await;
                samples.push(Sample {
                    at: start.elapsed(),
                    created: created.load(Ordering::SeqCst),
                    jobs: seen.lock().await.len(),
                    terminal: outcomes.lock().expect("outcomes").terminal(),
                    queue_depth,
                });
                if stop.load(Ordering::SeqCst) {
                    return samples;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    {
        let (client, ns) = (client.clone(), ns.clone());
        let (submitted, created) = (submitted.clone(), created.clone());
        let names = names.clone();
        create_at_rate(executions, rate, move |i| {
            let (client, ns, submitted, created) = (
                client.clone(),
                ns.clone(),
                submitted.clone(),
                created.clone(),
            );
            let name = names[i].clone();
            async move {
                submitted.lock().await.insert(name.clone(), Instant::now());
                create_execution(&client, &ns, &name, agent_of(i)).await;
                created.fetch_add(1, Ordering::SeqCst);
            }
        })
        .await;
    }
    let creating = start.elapsed();
    let all_terminal = until_terminal(start, deadline, || {
        outcomes.lock().expect("outcomes").terminal() >= executions
    })
    .await;
    // Writes settle: nothing more should come for finished executions.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let run_writes = controller.writes().minus(&writes_before);
    let cpu = controller.cpu_seconds() - cpu_before;
    let spent = window.close(&client).await;
    let errors = metric_sum(
        controller.address,
        "errand_controller_reconcile_errors_total",
    )
    .await;
    stop_sampling.store(true, Ordering::SeqCst);
    let samples = sampler.await.expect("the sampler");
    let peak_rss = controller.memory_kib("VmHWM:");

    let latencies = {
        let submitted = submitted.lock().await;
        since_submitted(&seen, names.iter().map(|n| (job_name(n), submitted[n]))).await
    };
    let to_pod = {
        let submitted = submitted.lock().await;
        since_submitted(
            &pods_seen,
            names.iter().map(|n| (job_name(n), submitted[n])),
        )
        .await
    };
    let (succeeded, failed, other, wrong, wrong_reasons) = {
        let outcomes = outcomes.lock().expect("outcomes");
        let wrong: Vec<&String> = names
            .iter()
            .enumerate()
            .filter(|(i, n)| {
                let fails = i % FAIL_EVERY == FAIL_EVERY - 1;
                if fails {
                    outcomes.succeeded.contains(*n)
                } else {
                    outcomes.failed.contains(*n)
                }
            })
            .map(|(_, n)| n)
            .collect();
        let mut reasons: std::collections::BTreeMap<&str, usize> = Default::default();
        for name in &wrong {
            let reason = outcomes
                .failed_reasons
                .get(*name)
                .map_or("Succeeded", String::as_str);
            *reasons.entry(reason).or_default() += 1;
        }
        let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
        (
            outcomes.succeeded.len(),
            outcomes.failed.len(),
            outcomes.other.len(),
            wrong.len(),
            reasons.join(", "),
        )
    };

    // Restart with every execution present (those still running may be written to: the
    // benchmark says how many there were).
    let unfinished = executions - outcomes.lock().expect("outcomes").terminal();
    controller.stop();
    let restarted = ControllerProcess::start(&kubeconfig, &ns, store_dir.path());
    let ready_after = restarted.wait_ready(Duration::from_secs(300)).await;
    // The tally it wrote last, at most `TALLY_EVERY` old, counts as "until ready".
    let writes_until_ready = restarted.writes().total();
    tokio::time::sleep(AFTER_RESTART).await;
    let writes_after_restart = restarted.writes().total();
    let restart_errors = metric_sum(
        restarted.address,
        "errand_controller_reconcile_errors_total",
    )
    .await;
    let restart_cpu = restarted.cpu_seconds();
    restarted.stop();

    let n = executions as f64;
    let (p50, p99) = (
        percentile_or_nan(&latencies, 50.0),
        percentile_or_nan(&latencies, 99.0),
    );
    let rss_per_execution = peak_rss.saturating_sub(rss_before) as f64 / n;
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    println!();
    println!(
        "{executions} executions at {rate}/s on {nodes} kwok nodes (every {FAIL_EVERY}th fails), one controller"
    );
    println!("| measure | errand | target | |");
    println!("|---|---|---|---|");
    println!(
        "| create → Job, p50 ({} Jobs seen) | {p50:.1} ms | | |",
        latencies.len()
    );
    println!(
        "| create → Job, p99 | {p99:.1} ms | <= 1000 ms | {} |",
        verdict(p99 <= 1000.0)
    );
    println!(
        "| create → first pod, p50 / p99 ({} pods seen) | {:.1} / {:.1} ms | | |",
        to_pod.len(),
        percentile_or_nan(&to_pod, 50.0),
        percentile_or_nan(&to_pod, 99.0)
    );
    println!(
        "| creating {executions} took | {:.1} s ({:.1}/s) | | |",
        creating.as_secs_f64(),
        n / creating.as_secs_f64()
    );
    match all_terminal {
        Some(t) => println!(
            "| first create → all terminal | {:.1} s | | |",
            t.as_secs_f64()
        ),
        None => println!(
            "| first create → all terminal | not within {} s: {} of {executions} terminal | | MISSED |",
            deadline.as_secs(),
            succeeded + failed + other
        ),
    }
    println!(
        "| outcomes: Succeeded / Failed / other / not as the agent ended | {succeeded} / {failed} / {other} / {wrong} | {} / {} / 0 / 0 | {} |",
        executions - executions / FAIL_EVERY,
        executions / FAIL_EVERY,
        verdict(other == 0 && wrong == 0 && succeeded + failed == executions)
    );
    if wrong > 0 {
        println!("| not as the agent ended, by reason | {wrong_reasons} | | |");
    }
    println!(
        "| controller CPU, create of the first → all terminal | {cpu:.1} s ({:.2} ms/execution) | | |",
        cpu * 1000.0 / n
    );
    println!(
        "| controller peak RSS growth per execution (its own process: VmRSS when ready → VmHWM) | {rss_per_execution:.2} KiB ({} → {} KiB) | <= 8 KiB | {} |",
        rss_before,
        peak_rss,
        verdict(rss_per_execution <= 8.0)
    );
    println!(
        "| controller API writes per execution ({}) | {:.2} | <= 4 | {} |",
        run_writes.per(executions),
        run_writes.total() as f64 / n,
        verdict(run_writes.total() as f64 / n <= 4.0)
    );
    println!(
        "| reconcile errors | {} | 0 | {} |",
        fmt_metric(errors),
        verdict(errors == Some(0.0))
    );
    let max_depth = samples
        .iter()
        .filter_map(|s| s.queue_depth)
        .fold(None, |m: Option<f64>, d| Some(m.map_or(d, |m| m.max(d))));
    println!(
        "| work-queue depth, max of 1 s samples | {} | | |",
        fmt_metric(max_depth)
    );
    println!(
        "| restart with {executions} present ({unfinished} not yet ended) → /readyz | {:.2} s | <= 10 s | {} |",
        ready_after.as_secs_f64(),
        verdict(ready_after <= Duration::from_secs(10))
    );
    println!(
        "| restart: writes until ready / in the {} s after | {writes_until_ready} / {} | 0 | {} |",
        AFTER_RESTART.as_secs(),
        writes_after_restart - writes_until_ready,
        verdict(writes_after_restart == 0)
    );
    println!(
        "| restart: reconcile errors / controller CPU | {} / {restart_cpu:.1} s | 0 | {} |",
        fmt_metric(restart_errors),
        verdict(restart_errors == Some(0.0))
    );
    print_side_by_side(&spent, cpu, all_terminal, &to_pod, &jobs, executions, rate);
    println!();
    match profiling.await.expect("the profile") {
        Ok(()) => {
            println!(
                "kube-apiserver's CPU profile, {} s from {} s after errand's first create (`go tool pprof -top -cum {}`), selected functions:",
                env_or("ERRAND_SCALE_PROFILE_SECONDS", 30),
                PROFILE_AFTER.as_secs(),
                profile.display()
            );
            match control_plane::profile_lines(&profile, &PROFILE_FUNCTIONS) {
                Ok(lines) => lines.iter().for_each(|l| println!("    {l}")),
                Err(e) => println!("    (not read: {e})"),
            }
        }
        Err(e) => println!("no CPU profile of kube-apiserver: {e}"),
    }
    println!();
    println!("Over time (every 10 s):");
    println!("| t | created | Jobs seen | terminal | work-queue depth |");
    println!("|---|---|---|---|---|");
    for sample in samples
        .iter()
        .filter(|s| s.at.as_secs().is_multiple_of(10) || s.at < Duration::from_secs(1))
    {
        println!(
            "| {:.0} s | {} | {} | {} | {} |",
            sample.at.as_secs_f64(),
            sample.created,
            sample.jobs,
            sample.terminal,
            fmt_metric(sample.queue_depth)
        );
    }
    delete_nodes(&client).await;
    true
}

/// For each (Job name, submitted at), the milliseconds until `seen` saw it, where it did.
async fn since_submitted(
    seen: &Seen,
    submitted: impl Iterator<Item = (String, Instant)>,
) -> Vec<f64> {
    let seen = seen.lock().await;
    submitted
        .filter_map(|(job, at)| {
            Some(seen.get(&job)?.saturating_duration_since(at).as_secs_f64() * 1000.0)
        })
        .collect()
}

/// The `p`th percentile of `values`, NaN when there are none.
fn percentile_or_nan(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        f64::NAN
    } else {
        percentile(values, p)
    }
}

/// Deletes `namespace` and waits until it is gone (its time), or `within` has passed (`None`).
async fn drain(
    client: &Client,
    namespace: support::cluster::TestNamespace,
    within: Duration,
) -> Option<Duration> {
    let name = namespace.name().to_owned();
    let start = Instant::now();
    namespace.delete().await;
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &name);
    loop {
        if let Ok(None) = namespaces.get_opt(&name).await {
            return Some(start.elapsed());
        }
        // The namespace waits for its pods, and kwok may leave one terminating for ever (on a
        // node it stopped renewing): they go at once (the run is over).
        let _ = pods
            .delete_collection(
                &DeleteParams::default().grace_period(0),
                &ListParams::default(),
            )
            .await;
        if start.elapsed() > within {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// What the control plane did for the same load of plain Jobs.
struct PlainJobs {
    all_terminal: Option<Duration>,
    /// How long their namespace took to go after it was deleted (`None`: not within the
    /// deadline, and errand's run met a busy cluster).
    drained: Option<Duration>,
    /// Milliseconds from each Job's create to its pod.
    to_pod: Vec<f64>,
    complete: usize,
    failed: usize,
    spent: control_plane::Spent,
}

/// Creates `count` plain Jobs at `rate` per second in a namespace of their own, their pods
/// as errand's would be (same image and command, on the kwok nodes, one in ten failing), and
/// waits until all are Complete or Failed (or `deadline` passed); then deletes their
/// namespace and waits until it is gone.
async fn plain_jobs(client: &Client, count: usize, rate: f64, deadline: Duration) -> PlainJobs {
    let namespace = support::cluster::TestNamespace::create(client, "scale-jobs").await;
    let ns = namespace.name().to_owned();
    let ended = watch_job_outcomes(client, &ns);
    let pods_seen = watch_pods(client, &ns);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let window = control_plane::Window::open(client).await;
    let submitted: Arc<SyncMutex<Vec<Option<Instant>>>> =
        Arc::new(SyncMutex::new(vec![None; count]));
    let start = Instant::now();
    {
        let (client, ns, submitted) = (client.clone(), ns.clone(), submitted.clone());
        create_at_rate(count, rate, move |i| {
            let (client, ns, submitted) = (client.clone(), ns.clone(), submitted.clone());
            async move {
                submitted.lock().expect("submitted")[i] = Some(Instant::now());
                create_job(&client, &ns, &format!("job-{i}"), agent_of(i)).await
            }
        })
        .await;
    }
    let all_terminal = until_terminal(start, deadline, || {
        let ended = ended.lock().expect("outcomes");
        ended.0 + ended.1 >= count
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let spent = window.close(client).await;
    let (complete, failed) = *ended.lock().expect("outcomes");
    let to_pod = {
        let submitted = submitted.lock().expect("submitted").clone();
        let submitted = submitted
            .into_iter()
            .enumerate()
            .filter_map(|(i, at)| Some((format!("job-{i}"), at?)));
        since_submitted(&pods_seen, submitted).await
    };
    let drained = drain(client, namespace, deadline).await;
    PlainJobs {
        all_terminal,
        drained,
        to_pod,
        complete,
        failed,
        spent,
    }
}

/// Creates the plain Job `name` in `ns`: errand's pod for `agent` without errand.
async fn create_job(client: &Client, ns: &str, name: &str, agent: &str) {
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {
            // kwok's Stages fail the pods of the Agent named "fails", as for errand.
            "metadata": {"labels": {"errand.dev/agent": agent}},
            "spec": {"restartPolicy": "Never",
                     "nodeSelector": {KWOK_LABEL.0: KWOK_LABEL.1},
                     "tolerations": kwok_tolerations(),
                     "containers": [{"name": "agent", "image": support::cluster::BUSYBOX_IMAGE,
                                     "command": [if agent == "fails" { "false" } else { "true" }]}]}}}
    }))
    .expect("a Job");
    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &job)
        .await
        .unwrap_or_else(|e| panic!("creating Job {name}: {e}"));
}

/// Counts, from a watch of the Jobs in `ns`, those Complete and those Failed.
fn watch_job_outcomes(client: &Client, ns: &str) -> Arc<SyncMutex<(usize, usize)>> {
    let counts: Arc<SyncMutex<(usize, usize)>> = Arc::default();
    let api = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), ns);
    let record = counts.clone();
    tokio::spawn(async move {
        let mut ended: HashMap<String, bool> = HashMap::new();
        let mut events = watcher(api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(job)) = events.try_next().await {
            let condition = |kind: &str| {
                job.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == kind && c.status == "True"))
            };
            if condition("Complete") {
                ended.insert(job.name_any(), true);
            } else if condition("Failed") {
                ended.insert(job.name_any(), false);
            }
            let complete = ended.values().filter(|c| **c).count();
            *record.lock().expect("outcomes") = (complete, ended.len() - complete);
        }
    });
    counts
}

/// Starts `create(i)` for each `i` in `0..count`, `rate` a second and at most [`IN_FLIGHT`] at
/// once, and returns when all have finished.
async fn create_at_rate<F, Fut>(count: usize, rate: f64, create: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        ticks.tick().await;
        let permit = in_flight.clone().acquire_owned().await.expect("a permit");
        let created = create(i);
        tasks.spawn(async move {
            created.await;
            drop(permit);
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a create");
    }
}

/// Waits until `all_ended` holds (its time since `start`) or `deadline` has passed (`None`).
async fn until_terminal(
    start: Instant,
    deadline: Duration,
    all_ended: impl Fn() -> bool,
) -> Option<Duration> {
    loop {
        if all_ended() {
            return Some(start.elapsed());
        }
        if start.elapsed() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The Agent execution `i` runs: every [`FAIL_EVERY`]th fails.
fn agent_of(i: usize) -> &'static str {
    if i % FAIL_EVERY == FAIL_EVERY - 1 {
        "fails"
    } else {
        "succeeds"
    }
}

/// errand's run and the plain Jobs' side by side: time, CPU by process, API requests.
fn print_side_by_side(
    errand: &control_plane::Spent,
    controller_cpu: f64,
    errand_terminal: Option<Duration>,
    errand_to_pod: &[f64],
    jobs: &PlainJobs,
    count: usize,
    rate: f64,
) {
    let n = count as f64;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as f64;
    let ratio = |a: f64, b: f64| {
        if b > 0.0 && a.is_finite() {
            format!("{:.2}", a / b)
        } else {
            "-".to_owned()
        }
    };
    let secs = |t: Option<Duration>| t.map_or(f64::NAN, |t| t.as_secs_f64());
    println!();
    println!(
        "Side by side: the same {count} at {rate}/s as plain Jobs (same image, command, kwok nodes and failures; run first, before errand's controller started). Plain Jobs: {} Complete, {} Failed.",
        jobs.complete, jobs.failed
    );
    println!("| measure | errand | plain Jobs | errand / Jobs |");
    println!("|---|---|---|---|");
    println!(
        "| first create → all terminal | {} | {} | {} |",
        errand_terminal.map_or("not within the deadline".to_owned(), |t| format!(
            "{:.1} s",
            t.as_secs_f64()
        )),
        jobs.all_terminal
            .map_or("not within the deadline".to_owned(), |t| format!(
                "{:.1} s",
                t.as_secs_f64()
            )),
        ratio(secs(errand_terminal), secs(jobs.all_terminal))
    );
    for p in [50.0, 99.0] {
        let (a, b) = (
            percentile_or_nan(errand_to_pod, p),
            percentile_or_nan(&jobs.to_pod, p),
        );
        println!(
            "| create → first pod, p{p} (errand: via its Job) | {a:.1} ms | {b:.1} ms | {} |",
            ratio(a, b)
        );
    }
    println!(
        "| then: namespace deleted → gone | - | {} | |",
        jobs.drained.map_or(
            "not within the deadline: errand's run met a busy cluster".to_owned(),
            |t| format!("{:.1} s", t.as_secs_f64())
        )
    );
    println!(
        "| counted over (s, {cores} cores) | {:.0} | {:.0} | |",
        errand.seconds, jobs.spent.seconds
    );
    println!(
        "| CPU s, errand controller | {controller_cpu:.1} ({:.2} ms each) | - | |",
        controller_cpu * 1000.0 / n
    );
    for name in control_plane::PROCESSES {
        let (a, b) = (errand.cpu(name), jobs.spent.cpu(name));
        if a + b < 0.05 {
            continue;
        }
        println!(
            "| CPU s, {name} | {a:.1} ({:.1} ms each) | {b:.1} ({:.1} ms each) | {} |",
            a * 1000.0 / n,
            b * 1000.0 / n,
            ratio(a, b)
        );
    }
    let (a, b) = (errand.total_cpu() + controller_cpu, jobs.spent.total_cpu());
    println!(
        "| CPU s, all of the above | {a:.1} ({:.0} % of the machine) | {b:.1} ({:.0} %) | {} |",
        a / errand.seconds / cores * 100.0,
        b / jobs.spent.seconds / cores * 100.0,
        ratio(a, b)
    );
    let (a, b) = (errand.total_requests(), jobs.spent.total_requests());
    println!(
        "| kube-apiserver requests, all clients, per execution / Job | {:.1} | {:.1} | {} |",
        a / n,
        b / n,
        ratio(a, b)
    );
    println!();
    println!(
        "kube-apiserver requests by kind (its own histogram: the p99 is a bucket bound), at least {} in either run:",
        count / 10
    );
    println!("| request | errand: per execution, mean, p99 | plain Jobs: per Job, mean, p99 |");
    println!("|---|---|---|");
    let mut kinds: Vec<&str> = errand
        .requests
        .iter()
        .chain(&jobs.spent.requests)
        .filter(|r| r.count >= n / 10.0)
        .map(|r| r.request.as_str())
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    let cell = |row: Option<&control_plane::LatencyRow>| {
        row.map_or("-".to_owned(), |r| {
            format!("{:.2}, {:.0} ms, {} ms", r.count / n, r.mean_ms, r.p99_ms)
        })
    };
    for kind in kinds {
        println!(
            "| {kind} | {} | {} |",
            cell(errand.request(kind)),
            cell(jobs.spent.request(kind))
        );
    }
}

fn fmt_metric(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".to_owned(), |v| format!("{v}"))
}

/// kwok, managing the nodes labelled [`KWOK_LABEL`] with the benchmark's Stages; stopped when
/// dropped.
struct Kwok(Child);

impl Kwok {
    fn start(bin: &str, kubeconfig: &std::path::Path) -> Self {
        let stages = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/bench/kwok-stages.yaml");
        let child = Command::new(bin)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--config={stages}"))
            .arg("--manage-all-nodes=false")
            .arg(format!(
                "--manage-nodes-with-label-selector={}={}",
                KWOK_LABEL.0, KWOK_LABEL.1
            ))
            .arg("--cidr=10.64.0.0/12")
            .arg("--node-lease-duration-seconds=40")
            .stdout(std::process::Stdio::null())
            .stderr(
                std::fs::File::create(std::env::temp_dir().join("errand-scale-kwok.log"))
                    .expect("kwok's log file"),
            )
            .spawn()
            .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
        Self(child)
    }
}

impl Drop for Kwok {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Creates `count` nodes for kwok and waits until all are Ready.
async fn create_nodes(client: &Client, count: usize) {
    let api = Api::<Node>::all(client.clone());
    futures::stream::iter(0..count)
        .for_each_concurrent(20, |i| {
            let api = api.clone();
            async move {
                let name = format!("kwok-node-{i}");
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name,
                        "labels": {KWOK_LABEL.0: KWOK_LABEL.1, "kubernetes.io/hostname": name,
                                   "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
                        "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
                    "spec": {"taints": [{"key": KWOK_TAINT, "value": "fake", "effect": "NoSchedule"}]},
                    "status": {
                        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                        "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}}
                }))
                .expect("a Node");
                match api.create(&PostParams::default(), &node).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => panic!("creating node {name}: {e}"),
                }
            }
        })
        .await;
    let selector = format!("{}={}", KWOK_LABEL.0, KWOK_LABEL.1);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let ready = api
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("listing nodes")
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {ready} of {count} kwok nodes became Ready (kwok's log: {})",
            std::env::temp_dir().join("errand-scale-kwok.log").display()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn delete_nodes(client: &Client) {
    let _ = Api::<Node>::all(client.clone())
        .delete_collection(
            &Default::default(),
            &ListParams::default().labels(&format!("{}={}", KWOK_LABEL.0, KWOK_LABEL.1)),
        )
        .await;
}

async fn create_execution(client: &Client, ns: &str, name: &str, agent: &str) {
    let spec = AgentExecutionSpec {
        agent_ref: Some(Reference::named(agent)),
        environment_ref: Some(Reference::named("kwok")),
        input: "x".into(),
        ..Default::default()
    };
    Api::<AgentExecution>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &AgentExecution::new(name, spec))
        .await
        .unwrap_or_else(|e| panic!("creating execution {name}: {e}"));
}

/// Records, from a watch of the executions in `ns`, which ended and how.
fn watch_outcomes(client: &Client, ns: &str) -> Arc<SyncMutex<Outcomes>> {
    let outcomes: Arc<SyncMutex<Outcomes>> = Arc::default();
    let api = Api::<AgentExecution>::namespaced(client.clone(), ns);
    let record = outcomes.clone();
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(execution)) = events.try_next().await {
            let Some(phase) = execution.status.as_ref().and_then(|s| s.phase) else {
                continue;
            };
            let mut outcomes = record.lock().expect("outcomes");
            if phase == Phase::Failed {
                let reason = execution
                    .status
                    .iter()
                    .flat_map(|s| &s.conditions)
                    .find(|c| c.type_ == ConditionType::Failed.as_str() && c.status == "True")
                    .map_or_else(|| "no Failed condition".to_owned(), |c| c.reason.clone());
                outcomes.failed_reasons.insert(execution.name_any(), reason);
            }
            let set = match phase {
                Phase::Succeeded => &mut outcomes.succeeded,
                Phase::Failed => &mut outcomes.failed,
                p if p.is_terminal() => &mut outcomes.other,
                _ => continue,
            };
            set.insert(execution.name_any());
        }
    });
    outcomes
}

/// The argument that makes this binary the controller's process instead of the benchmark.
const CONTROLLER_MODE: &str = "--scale-controller";
/// How often the controller's process writes its tally of API writes for the benchmark.
const TALLY_EVERY: Duration = Duration::from_millis(100);

/// The controller in a process of its own (this binary, started with [`CONTROLLER_MODE`]),
/// serving `/readyz` and `/metrics` at `address`: its CPU time and memory are its own, not the
/// benchmark's watches and maps. It tallies its API writes into `tally` (JSON, rewritten every
/// [`TALLY_EVERY`]).
struct ControllerProcess {
    child: Child,
    pid: String,
    address: SocketAddr,
    tally: tempfile::TempPath,
    started: Instant,
}

impl ControllerProcess {
    fn start(kubeconfig: &std::path::Path, ns: &str, store: &std::path::Path) -> Self {
        let address = support::cluster::free_pod_gateway_address();
        let tally = tempfile::NamedTempFile::new()
            .expect("a tally file")
            .into_temp_path();
        let started = Instant::now();
        // `ERRAND_SCALE_CONTROLLER_WRAPPER` (a command, e.g. a script running `exec heaptrack
        // -o FILE "$@"`) runs the controller under a profiler; its CPU and RSS figures are then
        // the wrapper's.
        let wrapper = std::env::var("ERRAND_SCALE_CONTROLLER_WRAPPER").unwrap_or_default();
        let mut command = wrapper.split_whitespace();
        let exe = std::env::current_exe().expect("this benchmark's binary");
        let child = match command.next() {
            Some(program) => {
                let mut wrapped = Command::new(program);
                wrapped.args(command).arg(exe);
                wrapped
            }
            None => Command::new(exe),
        }
        .arg(CONTROLLER_MODE)
        .args([kubeconfig.as_os_str(), ns.as_ref(), store.as_os_str()])
        .arg(address.to_string())
        .arg(&tally)
        // Its stdin closes when this process ends, however it ends: then it ends too.
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("the controller's process starts");
        Self {
            pid: child.id().to_string(),
            child,
            address,
            tally,
            started,
        }
    }

    /// How long after its start the controller answered `/readyz`.
    async fn wait_ready(&self, within: Duration) -> Duration {
        loop {
            if get(self.address, "/readyz")
                .await
                .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
            {
                return self.started.elapsed();
            }
            assert!(
                self.started.elapsed() < within,
                "the controller was not ready within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// User plus system CPU seconds of the controller's process so far.
    fn cpu_seconds(&self) -> f64 {
        control_plane::cpu_seconds(&self.pid).expect("the controller's process runs")
    }

    /// A field of the controller's `/proc/PID/status` in KiB (`VmRSS:`, `VmHWM:`).
    fn memory_kib(&self, field: &str) -> u64 {
        control_plane::status_kib(&self.pid, field)
    }

    /// The controller's API writes so far (as of its last tally, at most [`TALLY_EVERY`] ago).
    fn writes(&self) -> Tally {
        let text = std::fs::read_to_string(&self.tally).unwrap_or_default();
        Tally(serde_json::from_str(&text).unwrap_or_default())
    }

    /// Stops the controller's process.
    fn stop(self) {
        drop(self);
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The controller's process: `errand controller` for one namespace as the cluster tests run
/// it (`support::harness::spawn_controller`), with a client that tallies its writes into the
/// file the benchmark reads.
fn serve_controller(args: &[String]) {
    let [kubeconfig, ns, store, address, tally] = args else {
        panic!("usage: {CONTROLLER_MODE} KUBECONFIG NAMESPACE STORE_DIR ADDRESS TALLY_FILE");
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_writer(std::io::stderr)
        .init();
    std::thread::spawn(|| {
        // The benchmark holds the other end of stdin: when it is gone, so is this process.
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let writes = Writes::default();
        let client = writes.client(std::path::Path::new(kubeconfig)).await;
        let store = Store::open(&format!("file://{store}")).expect("a file store");
        let address: SocketAddr = address.parse().expect("an address");
        support::harness::spawn_controller(
            client,
            ns,
            store,
            support::errand::ERRAND_IMAGE,
            Some(address),
        );
        let scratch = format!("{tally}.new");
        loop {
            let json = serde_json::to_string(&writes.tally().0).expect("a tally as JSON");
            std::fs::write(&scratch, json).expect("the tally is written");
            std::fs::rename(&scratch, tally).expect("the tally is replaced");
            tokio::time::sleep(TALLY_EVERY).await;
        }
    });
}

/// The body of a plain HTTP GET of `path` at `address`, with its status line first.
async fn get(address: SocketAddr, path: &str) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    Some(answer)
}

/// The value of the metric `name` (without labels) at `address`.
async fn metric(address: SocketAddr, name: &str) -> Option<f64> {
    let text = get(address, "/metrics").await?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The sum of every series of the metric `name` at `address` (0 when it has none yet).
async fn metric_sum(address: SocketAddr, name: &str) -> Option<f64> {
    let text = get(address, "/metrics").await?;
    Some(
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            // A fold from +0: `Sum` for floats starts at -0, which printed "-0 errors".
            .fold(0.0, |sum, value| sum + value),
    )
}
