//! Benchmark: the controller's overhead against creating Jobs directly, on the real test cluster.
//!
//! Runs only under `cargo bench --bench controller` with the test cluster up. Every Job is
//! suspended (executions carry a Kueue `queueName`, direct Jobs set `suspend: true`), so the
//! numbers measure the API path, not pods. It prints, in one run:
//! - the median and p99 of AgentExecution create → Job seen, over the same measure for a direct
//!   Job create, over 200 interleaved submissions each;
//! - the time until 500 executions created at once all have Jobs, over 500 direct Jobs at the
//!   same client concurrency;
//! - both also against the floor of this design: the client itself creating the execution and
//!   then the children the controller would (snapshot ConfigMap, Job) and the
//!   status, in a namespace no controller watches: what a controller that reacted in no time
//!   would cost;
//! - the controller's API writes per execution over a whole life (create → pod runs →
//!   Succeeded → deleted, with real pods of the errand image), up to the Job, and after a
//!   restart with the finished executions present (TokenReviews, which store nothing, aside);
//! - the controller's memory growth per execution with 2,000 executions present.

#[path = "../tests/support/mod.rs"]
mod support;

mod shared;

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use errand::api::{AgentExecution, AgentExecutionSpec, Reference};
use errand::controller::names::job_name;
use errand::store::Store;
use shared::cluster::{Seen, memory_kib, watch_jobs};
use shared::percentile;
use support::writes::{Tally, Writes};

const SEQUENTIAL: usize = 200;
const BURST: usize = 500;
const PRESENT: usize = 2000;
const CONCURRENCY: usize = 10;
/// Executions run to completion (real pods) for the whole-life write count.
const LIVES: usize = 10;

fn main() {
    shared::run_async("controller", || async {
        bench().await;
        true
    });
}

async fn bench() {
    let client = support::cluster::client_for(&support::cluster::kubeconfig_path(), true)
        .await
        .expect("the test cluster is reachable");
    support::errand::install_crds(&client).await;
    // The API server rebuilds a CRD's storage after every change to it; requests in flight
    // meanwhile can stall, which is not what this measures.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let namespace = support::cluster::TestNamespace::create(&client, "bench").await;
    let ns = namespace.name().to_owned();
    create_agent(&client, &ns).await;

    let writes = Writes::default();
    let store_dir = tempfile::tempdir().expect("a store directory");
    let blobs = support::cluster::free_pod_gateway_address();
    let controller = start_controller(
        &ns,
        writes.client(&support::cluster::kubeconfig_path()).await,
        store_dir.path(),
        Some(blobs),
    );
    let seen = watch_jobs(&client, &ns);

    // 0. Whole lives: real pods run to Succeeded, then the executions are deleted (kubectl's
    // default, background) and their results and children go.
    let lives = whole_lives(&client, &ns, &writes).await;
    let writes_per_life = lives.writes_until_done.total() as f64 / LIVES as f64;
    let writes_per_deletion = lives.writes_for_deletion.total() as f64 / LIVES as f64;

    // The floor: a namespace no controller watches, where the client does the controller's work.
    let floor_namespace = support::cluster::TestNamespace::create(&client, "bench-floor").await;
    let floor_ns = floor_namespace.name().to_owned();
    let floor_seen = watch_jobs(&client, &floor_ns);

    // 1. Interleaved single submissions.
    writes.take();
    let (mut via_errand, mut reaction, mut direct, mut floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut submit = |(total, react): (f64, f64)| {
        via_errand.push(total);
        reaction.push(react);
    };
    submit(time_execution(&client, &ns, "seq-0", &seen).await);
    let children = Children::of(&client, &ns, "seq-0").await;
    for i in 1..=SEQUENTIAL {
        if i < SEQUENTIAL {
            submit(time_execution(&client, &ns, &format!("seq-{i}"), &seen).await);
        }
        direct.push(time_direct_job(&client, &ns, &format!("direct-seq-{i}"), &seen).await);
        floor.push(
            time_floor(
                &client,
                &floor_ns,
                &format!("floor-seq-{i}"),
                &children,
                &floor_seen,
            )
            .await,
        );
    }
    let writes_per_execution = writes.take().total() as f64 / SEQUENTIAL as f64;

    // 2. Bursts at the same client concurrency.
    let burst_errand = burst(&client, &ns, "burst", Submit::Errand, &seen).await;
    let burst_direct = burst(&client, &ns, "direct-burst", Submit::Direct, &seen).await;
    let burst_floor = burst(
        &client,
        &floor_ns,
        "floor-burst",
        Submit::Floor(&children),
        &floor_seen,
    )
    .await;

    // 3. Finished executions and a restart: cancelling a suspended run finishes it.
    let names: Vec<String> = (0..BURST).map(|i| format!("burst-{i}")).collect();
    futures::stream::iter(names.iter())
        .for_each_concurrent(CONCURRENCY, |name| {
            let api = Api::<AgentExecution>::namespaced(client.clone(), &ns);
            async move {
                let patch = Patch::Merge(json!({"spec": {"cancel": true}}));
                api.patch(name, &PatchParams::default(), &patch)
                    .await
                    .expect("cancel");
            }
        })
        .await;
    wait_terminal(&client, &ns, BURST).await;
    controller.abort();
    let restart_writes = Writes::default();
    let restarted = start_controller(
        &ns,
        restart_writes
            .client(&support::cluster::kubeconfig_path())
            .await,
        store_dir.path(),
        None,
    );
    tokio::time::sleep(Duration::from_secs(15)).await;
    let writes_after_restart = restart_writes.tally().total();

    // 4. Memory with PRESENT executions in the caches (this process runs the controller).
    let rss_before = memory_kib("VmRSS:");
    let extra = PRESENT - SEQUENTIAL - BURST;
    futures::stream::iter(0..extra)
        .for_each_concurrent(CONCURRENCY, |i| {
            let client = client.clone();
            let ns = ns.clone();
            async move { create_execution(&client, &ns, &format!("present-{i}")).await }
        })
        .await;
    wait_jobs(&seen, (0..extra).map(|i| job_name(&format!("present-{i}")))).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_after = memory_kib("VmRSS:");
    restarted.abort();

    let (me, md, mf) = (
        percentile(&via_errand, 50.0),
        percentile(&direct, 50.0),
        percentile(&floor, 50.0),
    );
    let (mr, pr) = (percentile(&reaction, 50.0), percentile(&reaction, 99.0));
    let (pe, pd, pf) = (
        percentile(&via_errand, 99.0),
        percentile(&direct, 99.0),
        percentile(&floor, 99.0),
    );
    let (be, bd, bf) = (
        burst_errand.as_secs_f64(),
        burst_direct.as_secs_f64(),
        burst_floor.as_secs_f64(),
    );
    println!(
        "| measure | errand | direct Job | errand / direct | target | floor (client does the controller's work) | errand / floor |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| create → Job, median of {SEQUENTIAL} | {me:.1} ms | {md:.1} ms | {:.3} | <= 1.15 | {mf:.1} ms | {:.3} |",
        me / md,
        me / mf
    );
    println!(
        "| create → Job, p99 | {pe:.1} ms | {pd:.1} ms | {:.3} | <= 1.5 | {pf:.1} ms | {:.3} |",
        pe / pd,
        pe / pf
    );
    println!(
        "| execution created (create call returned) → Job, median | {mr:.1} ms | {md:.1} ms | {:.3} | | | |",
        mr / md
    );
    println!(
        "| execution created → Job, p99 | {pr:.1} ms | {pd:.1} ms | {:.3} | | | |",
        pr / pd
    );
    println!(
        "| {BURST} at once (concurrency {CONCURRENCY}) until all Jobs exist | {be:.2} s | {bd:.2} s | {:.3} | <= 1.5 | {bf:.2} s | {:.3} |",
        be / bd,
        be / bf
    );
    println!(
        "| controller API writes per execution, whole life: create → Succeeded ({LIVES} real pods) | {writes_per_life:.2} | | | <= 4 |"
    );
    println!(
        "| controller API writes per execution, deletion (results and finalizer) | {writes_per_deletion:.2} | | | |"
    );
    println!(
        "| controller API writes per execution, create to Job (suspended) | {writes_per_execution:.2} | | | |"
    );
    println!(
        "| controller API writes in 15 s after a restart with {BURST} finished executions | {writes_after_restart} | | | 0 |"
    );
    println!(
        "| process RSS growth per execution, {extra} more executions ({PRESENT} present) | {:.2} KiB | | | <= 8 KiB |",
        (rss_after.saturating_sub(rss_before)) as f64 / extra as f64
    );
    println!(
        "\nController API writes by verb and resource, per execution: whole life: {}; deletion: {}",
        lives.writes_until_done.per(LIVES),
        lives.writes_for_deletion.per(LIVES)
    );
    namespace.delete().await;
    floor_namespace.delete().await;
}

async fn create_agent(client: &Client, ns: &str) {
    let agent: errand::api::Agent = serde_json::from_value(json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "trivial"},
        "spec": {"runtime": {"image": support::cluster::BUSYBOX_IMAGE, "command": ["true"]},
                 "config": {"config_format": "agents-spec-v1", "name": "trivial"}}
    }))
    .expect("an Agent");
    Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &agent)
        .await
        .expect("the Agent is created");
}

/// Runs the controller in this process with the errand image the test cluster imported; with
/// `blobs`, it serves the pods' signed URLs there.
fn start_controller(
    ns: &str,
    client: Client,
    store: &std::path::Path,
    blobs: Option<std::net::SocketAddr>,
) -> tokio::task::JoinHandle<()> {
    let store = Store::open(&format!("file://{}", store.display())).expect("a file store");
    support::harness::spawn_controller(client, ns, store, support::errand::ERRAND_IMAGE, blobs)
}

/// The controller's writes over [`LIVES`] whole executions.
struct Lives {
    writes_until_done: Tally,
    writes_for_deletion: Tally,
}

/// Runs [`LIVES`] executions with real pods to `Succeeded`, then deletes them and waits
/// until their snapshot ConfigMaps (which hold the results finalizer) are gone.
async fn whole_lives(client: &Client, ns: &str, writes: &Writes) -> Lives {
    let names: Vec<String> = (0..LIVES).map(|i| format!("life-{i}")).collect();
    for name in &names {
        create_execution_with(client, ns, name, None).await;
    }
    let api = Api::<AgentExecution>::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let phases: Vec<_> = futures::future::join_all(names.iter().map(|n| api.get(n)))
            .await
            .into_iter()
            .map(|e| {
                e.expect("the execution exists")
                    .status
                    .and_then(|s| s.phase)
            })
            .collect();
        if phases.iter().all(|p| p.is_some_and(|p| p.is_terminal())) {
            assert!(
                phases
                    .iter()
                    .all(|p| *p == Some(errand::api::Phase::Succeeded)),
                "every run succeeds: {phases:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "runs did not finish: {phases:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Writes settle: nothing more should come for finished executions.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes_until_done = writes.take();
    for name in &names {
        api.delete(name, &Default::default())
            .await
            .expect("the execution is deleted");
    }
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(120);
    for name in &names {
        let config_map = errand::controller::names::snapshot_config_map_name(name);
        while config_maps
            .get_opt(&config_map)
            .await
            .expect("reading a ConfigMap")
            .is_some()
        {
            assert!(Instant::now() < deadline, "{config_map} was not released");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Lives {
        writes_until_done,
        writes_for_deletion: writes.take(),
    }
}

async fn wait_jobs(seen: &Seen, names: impl IntoIterator<Item = String>) -> Instant {
    let names: Vec<String> = names.into_iter().collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        {
            let seen = seen.lock().await;
            if let Some(last) = names
                .iter()
                .map(|n| seen.get(n).copied())
                .collect::<Option<Vec<_>>>()
            {
                return last.into_iter().max().expect("at least one name");
            }
        }
        assert!(
            Instant::now() < deadline,
            "Jobs did not appear within 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Creates a queued execution: its Job is created suspended, so no pod runs.
async fn create_execution(client: &Client, ns: &str, name: &str) {
    create_execution_with(client, ns, name, Some("bench")).await;
}

async fn create_execution_with(client: &Client, ns: &str, name: &str, queue: Option<&str>) {
    let spec = AgentExecutionSpec {
        agent_ref: Some(Reference::named("trivial")),
        input: "x".into(),
        queue_name: queue.map(str::to_owned),
        ..Default::default()
    };
    Api::<AgentExecution>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &AgentExecution::new(name, spec))
        .await
        .expect("the execution is created");
}

async fn create_direct_job(client: &Client, ns: &str, name: &str) {
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"suspend": true, "backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "agent", "image": support::cluster::BUSYBOX_IMAGE, "command": ["true"]}]}}}
    }))
    .expect("a Job");
    Api::<Job>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &job)
        .await
        .expect("the Job is created");
}

/// Milliseconds from the create call to the Job seen, and from the execution existing (the
/// create call returned) to the Job seen: the controller's reaction.
async fn time_execution(client: &Client, ns: &str, name: &str, seen: &Seen) -> (f64, f64) {
    let start = Instant::now();
    create_execution(client, ns, name).await;
    let created = Instant::now();
    let job = wait_jobs(seen, [job_name(name)]).await;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(job - start), ms(job.saturating_duration_since(created)))
}

async fn time_direct_job(client: &Client, ns: &str, name: &str, seen: &Seen) -> f64 {
    let start = Instant::now();
    create_direct_job(client, ns, name).await;
    (wait_jobs(seen, [name.to_owned()]).await - start).as_secs_f64() * 1000.0
}

/// How a burst submits its work.
#[derive(Clone, Copy)]
enum Submit<'a> {
    /// An AgentExecution; the controller does the rest.
    Errand,
    /// A bare Job.
    Direct,
    /// The execution and the controller's writes, by the client.
    Floor(&'a Children),
}

async fn burst(client: &Client, ns: &str, prefix: &str, how: Submit<'_>, seen: &Seen) -> Duration {
    let names: Vec<String> = (0..BURST).map(|i| format!("{prefix}-{i}")).collect();
    let start = Instant::now();
    futures::stream::iter(names.iter())
        .for_each_concurrent(CONCURRENCY, |name| async move {
            match how {
                Submit::Errand => create_execution(client, ns, name).await,
                Submit::Direct => create_direct_job(client, ns, name).await,
                Submit::Floor(children) => submit_floor(client, ns, name, children).await,
            }
        })
        .await;
    let jobs = names.iter().map(|n| match how {
        Submit::Direct => n.clone(),
        _ => job_name(n),
    });
    wait_jobs(seen, jobs).await - start
}

/// The snapshot ConfigMap and Job the controller created for one execution, as templates
/// for the floor measurement (same sizes, same admission work).
struct Children {
    config_map: ConfigMap,
    job: Job,
}

impl Children {
    async fn of(client: &Client, ns: &str, execution: &str) -> Self {
        Self {
            config_map: child(
                client,
                ns,
                errand::controller::names::snapshot_config_map_name(execution),
            )
            .await,
            job: child(client, ns, job_name(execution)).await,
        }
    }
}

/// One child the controller created.
async fn child<K>(client: &Client, ns: &str, name: String) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), ns)
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("reading the controller's {name}: {e}"))
}

/// `template` as a new object named `name`: what the server filled in is cleared, and so is
/// the owner (the floor's executions are never reconciled) and the results finalizer.
fn fresh<K: kube::Resource + Clone>(template: &K, name: String) -> K {
    let mut object = template.clone();
    let meta = object.meta_mut();
    *meta = kube::api::ObjectMeta {
        name: Some(name),
        labels: meta.labels.clone(),
        annotations: meta.annotations.clone(),
        ..Default::default()
    };
    object
}

/// The Job template without what the Job controller added (selector and its labels).
fn fresh_job(template: &Job, name: String) -> Job {
    let mut job = fresh(template, name);
    let spec = job.spec.as_mut().expect("a Job spec");
    spec.selector = None;
    if let Some(labels) = spec
        .template
        .metadata
        .as_mut()
        .and_then(|m| m.labels.as_mut())
    {
        labels.retain(|k, _| !k.contains("controller-uid") && !k.contains("job-name"));
    }
    job
}

/// The client does what errand's controller does for one execution: creates the execution,
/// then its two children at once, then writes its status.
async fn submit_floor(client: &Client, ns: &str, name: &str, children: &Children) {
    create_execution(client, ns, name).await;
    let post = PostParams::default();
    let (config_maps, jobs) = (
        Api::<ConfigMap>::namespaced(client.clone(), ns),
        Api::<Job>::namespaced(client.clone(), ns),
    );
    let config_map = fresh(
        &children.config_map,
        errand::controller::names::snapshot_config_map_name(name),
    );
    let job = fresh_job(&children.job, job_name(name));
    let (c, j) = futures::join!(
        config_maps.create(&post, &config_map),
        jobs.create(&post, &job),
    );
    c.expect("the floor's ConfigMap");
    j.expect("the floor's Job");
    let status = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution",
        "status": {"phase": "Starting", "jobName": job_name(name), "agent": "trivial",
                   "snapshot": {"configMap": errand::controller::names::snapshot_config_map_name(name), "digest": "sha256:0"}}
    });
    Api::<AgentExecution>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::apply("errand-bench-floor").force(),
            &Patch::Apply(&status),
        )
        .await
        .expect("the floor's status write");
}

async fn time_floor(
    client: &Client,
    ns: &str,
    name: &str,
    children: &Children,
    seen: &Seen,
) -> f64 {
    let start = Instant::now();
    submit_floor(client, ns, name, children).await;
    (wait_jobs(seen, [job_name(name)]).await - start).as_secs_f64() * 1000.0
}

async fn wait_terminal(client: &Client, ns: &str, count: usize) {
    let api = Api::<AgentExecution>::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let list = api
            .list(&Default::default())
            .await
            .expect("executions list");
        let done = list
            .items
            .iter()
            .filter(|e| {
                e.status
                    .as_ref()
                    .and_then(|s| s.phase)
                    .is_some_and(|p| p.is_terminal())
            })
            .count();
        if done >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {count} executions finished"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
