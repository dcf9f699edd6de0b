//! Benchmark: 10,000 executions on 1,000 nodes simulated by kwok, on the real test control plane.
//!
//! Runs only under `cargo bench --bench scale` with the test cluster up and `KWOK_BIN` naming
//! a kwok binary (`bash hack/bench/on-cluster.sh scale` does both). kwok simulates the nodes
//! and, with the Stages of `hack/bench/kwok-stages.yaml`, what the pods of errand's Jobs do:
//! staging ends with errand's staged summary, the agent with errand's run summary in its
//! termination message, one run in ten failing. The controller runs in this process on a
//! runtime of its own, so its threads' CPU time is its own. The bench creates the executions
//! at a steady rate and prints, against the targets:
//! - create → Job seen, p50 and p99;
//! - the time until every execution is terminal, and whether each ended as its agent did;
//! - the controller's CPU seconds and this process's peak RSS growth per execution;
//! - the controller's API writes per execution and its reconcile errors;
//! - its work-queue depth over time (the `work_queue_depth` metric, sampled every second);
//! - after a restart with every execution present: the time until `/readyz` answers and the
//!   writes in the next 30 s.
//!
//! `ERRAND_SCALE_EXECUTIONS` (10000), `ERRAND_SCALE_NODES` (1000), `ERRAND_SCALE_RATE` (100 per
//! second) and `ERRAND_SCALE_DEADLINE` (900 s from the first create) size a smaller run.

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
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;

use errand::api::{AgentExecution, AgentExecutionSpec, Phase, Reference};
use errand::controller::names::job_name;
use errand::store::Store;
use shared::cluster::{memory_kib, watch_jobs};
use shared::{env_or, percentile};
use support::writes::Writes;

/// Every tenth execution runs the Agent whose pods kwok fails.
const FAIL_EVERY: usize = 10;
/// The label that puts pods on kwok's nodes, and the taint that keeps everything else off.
const KWOK_LABEL: (&str, &str) = ("type", "kwok");
const KWOK_TAINT: &str = "kwok.x-k8s.io/node";
/// How many creates may be in flight at once while keeping the rate.
const IN_FLIGHT: usize = 200;
/// How long writes are counted after the restarted controller is ready.
const AFTER_RESTART: Duration = Duration::from_secs(30);

fn main() {
    shared::run_async("scale", bench);
}

/// The terminal executions a watch saw, by outcome.
#[derive(Default)]
struct Outcomes {
    succeeded: HashSet<String>,
    failed: HashSet<String>,
    other: HashSet<String>,
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
        "spec": {"compute": {"nodeSelector": {KWOK_LABEL.0: KWOK_LABEL.1},
                             "tolerations": [{"key": KWOK_TAINT, "operator": "Exists", "effect": "NoSchedule"}]}}
    }))
    .await;

    let store_dir = tempfile::tempdir().expect("a store directory");
    let writes = Writes::default();
    let controller = ControllerProcess::start(&kubeconfig, &ns, store_dir.path(), &writes).await;
    controller.wait_ready(Duration::from_secs(120)).await;
    let seen = watch_jobs(&client, &ns);
    let outcomes = watch_outcomes(&client, &ns);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = memory_kib("VmRSS:");
    let cpu_before = controller.cpu_seconds();
    writes.take();

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
            let mut peak_rss = 0;
            loop {
                peak_rss = peak_rss.max(memory_kib("VmRSS:"));
                let queue_depth = metric(metrics, "errand_controller_work_queue_depth").await;
                samples.push(Sample {
                    at: start.elapsed(),
                    created: created.load(Ordering::SeqCst),
                    jobs: seen.lock().await.len(),
                    terminal: outcomes.lock().expect("outcomes").terminal(),
                    queue_depth,
                });
                if stop.load(Ordering::SeqCst) {
                    return (samples, peak_rss);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let creates = {
        let (client, ns, submitted, created) = (
            client.clone(),
            ns.clone(),
            submitted.clone(),
            created.clone(),
        );
        let names = names.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
            let mut tasks = tokio::task::JoinSet::new();
            for (i, name) in names.into_iter().enumerate() {
                ticks.tick().await;
                let permit = in_flight.clone().acquire_owned().await.expect("a permit");
                let (client, ns, submitted, created) = (
                    client.clone(),
                    ns.clone(),
                    submitted.clone(),
                    created.clone(),
                );
                tasks.spawn(async move {
                    submitted.lock().await.insert(name.clone(), Instant::now());
                    let agent = if i % FAIL_EVERY == FAIL_EVERY - 1 {
                        "fails"
                    } else {
                        "succeeds"
                    };
                    create_execution(&client, &ns, &name, agent).await;
                    created.fetch_add(1, Ordering::SeqCst);
                    drop(permit);
                });
            }
            while let Some(done) = tasks.join_next().await {
                done.expect("a create");
            }
        })
    };
    creates.await.expect("the creates");
    let creating = start.elapsed();
    let all_terminal = loop {
        if outcomes.lock().expect("outcomes").terminal() >= executions {
            break Some(start.elapsed());
        }
        if start.elapsed() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Writes settle: nothing more should come for finished executions.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let run_writes = writes.take();
    let cpu = controller.cpu_seconds() - cpu_before;
    let errors = metric_sum(
        controller.address,
        "errand_controller_reconcile_errors_total",
    )
    .await;
    stop_sampling.store(true, Ordering::SeqCst);
    let (samples, peak_rss) = sampler.await.expect("the sampler");
    let peak_rss = peak_rss.max(memory_kib("VmRSS:"));

    let latencies: Vec<f64> = {
        let (seen, submitted) = (seen.lock().await, submitted.lock().await);
        names
            .iter()
            .filter_map(|n| {
                let job = seen.get(&job_name(n))?;
                Some(job.saturating_duration_since(submitted[n]).as_secs_f64() * 1000.0)
            })
            .collect()
    };
    let (succeeded, failed, other, wrong) = {
        let outcomes = outcomes.lock().expect("outcomes");
        let wrong = names
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
            .count();
        (
            outcomes.succeeded.len(),
            outcomes.failed.len(),
            outcomes.other.len(),
            wrong,
        )
    };

    // Restart with every execution present.
    controller.stop();
    let restart_writes = Writes::default();
    let restarted =
        ControllerProcess::start(&kubeconfig, &ns, store_dir.path(), &restart_writes).await;
    let ready_after = restarted.wait_ready(Duration::from_secs(300)).await;
    let writes_until_ready = restart_writes.tally().total();
    tokio::time::sleep(AFTER_RESTART).await;
    let writes_after_restart = restart_writes.tally().total();
    let restart_errors = metric_sum(
        restarted.address,
        "errand_controller_reconcile_errors_total",
    )
    .await;
    let restart_cpu = restarted.cpu_seconds();
    restarted.stop();

    let n = executions as f64;
    let (p50, p99) = if latencies.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        (percentile(&latencies, 50.0), percentile(&latencies, 99.0))
    };
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
    println!(
        "| controller CPU, create of the first → all terminal | {cpu:.1} s ({:.2} ms/execution) | | |",
        cpu * 1000.0 / n
    );
    println!(
        "| process peak RSS growth per execution | {rss_per_execution:.2} KiB ({} → {} KiB) | <= 8 KiB | {} |",
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
        "| restart with {executions} present → /readyz | {:.2} s | <= 10 s | {} |",
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
    namespace.delete().await;
    delete_nodes(&client).await;
    true
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

/// The controller on a runtime of its own, serving `/readyz` and `/metrics` at `address`;
/// the CPU time of the runtime's threads is the controller's.
struct ControllerProcess {
    runtime: tokio::runtime::Runtime,
    threads: Arc<SyncMutex<Vec<u32>>>,
    address: SocketAddr,
    started: Instant,
}

impl ControllerProcess {
    async fn start(
        kubeconfig: &std::path::Path,
        ns: &str,
        store: &std::path::Path,
        writes: &Writes,
    ) -> Self {
        let threads: Arc<SyncMutex<Vec<u32>>> = Arc::default();
        let record = threads.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("controller")
            .on_thread_start(move || {
                record.lock().expect("threads").extend(thread_id());
            })
            .enable_all()
            .build()
            .expect("the controller's runtime");
        let address = support::cluster::free_pod_gateway_address();
        let (kubeconfig, ns, writes) = (kubeconfig.to_owned(), ns.to_owned(), writes.clone());
        let store = Store::open(&format!("file://{}", store.display())).expect("a file store");
        let started = Instant::now();
        runtime
            .spawn(async move {
                let client = writes.client(&kubeconfig).await;
                support::harness::spawn_controller(
                    client,
                    &ns,
                    store,
                    support::errand::ERRAND_IMAGE,
                    Some(address),
                );
            })
            .await
            .expect("the controller starts");
        Self {
            runtime,
            threads,
            address,
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

    /// User plus system CPU seconds of the controller's threads so far.
    fn cpu_seconds(&self) -> f64 {
        // /proc counts CPU time in USER_HZ ticks, 100 a second on Linux.
        let ticks = 100.0;
        self.threads
            .lock()
            .expect("threads")
            .iter()
            .filter_map(|tid| std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok())
            .map(|stat| {
                // Fields after the command's closing parenthesis: utime and stime are the
                // 12th and 13th.
                let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let field = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
                field(11).unwrap_or(0.0) + field(12).unwrap_or(0.0)
            })
            .sum::<f64>()
            / ticks
    }

    /// Stops every task of the controller.
    fn stop(self) {
        self.runtime.shutdown_background();
    }
}

/// The calling thread's id, from `/proc/thread-self` (a link to `PID/task/TID`).
fn thread_id() -> Option<u32> {
    std::fs::read_link("/proc/thread-self")
        .ok()?
        .file_name()?
        .to_str()?
        .parse()
        .ok()
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
