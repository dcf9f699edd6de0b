//! Benchmark: finding an execution's pods in the controller's pod cache, by scanning the whole cache (as every reconcile did) and through its index by execution uid; no cluster needed.
//!
//! `cargo bench --bench lookups` fills the indexed pod cache, as the controller's pod watch
//! does, with one trimmed pod (labelled and annotated as errand's Jobs' pods are) for each of
//! `LOOKUPS_EXECUTIONS` (10000) executions in one namespace, as in the scale benchmark. Then
//! it finds the pods of every execution once by each method, checks that both found the same
//! pod, and prints each method's time per lookup and their ratio. `LOOKUPS_ONLY=scan` or
//! `index` runs one method alone (to count its instructions with callgrind: run the bench
//! binary with `--bench`). Outside `cargo bench` (in `cargo test --all-targets`) it does
//! nothing.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec, PodStatus};
use kube::api::ObjectMeta;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use errand::api::contract;
use errand::cluster::index::{Index, indexed_store};
use errand::cluster::watches;
use errand::controller::names;

const NAMESPACE: &str = "errand-scale";

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("lookups benchmark: skipped outside `cargo bench --bench lookups`");
        return;
    }
    let executions: usize = std::env::var("LOOKUPS_EXECUTIONS")
        .map(|n| {
            n.parse()
                .expect("LOOKUPS_EXECUTIONS is a number of executions")
        })
        .unwrap_or(10_000);
    let only = std::env::var("LOOKUPS_ONLY").ok();
    let runs = |method: &str| only.as_deref().is_none_or(|only| only == method);
    assert!(
        ["scan", "index"].iter().any(|m| runs(m)),
        "LOOKUPS_ONLY is scan or index"
    );
    let uids: Vec<String> = (0..executions).map(uid).collect();
    let pods = filled(&uids);
    println!("{executions} executions, one pod each, in one namespace");
    let scan = runs("scan").then(|| timed("scan", || scan_all(&pods, &uids)));
    let index = runs("index").then(|| timed("index", || index_all(&pods, &uids)));
    if let (Some((scan, scanned)), Some((index, indexed))) = (scan, index) {
        assert_eq!(scanned, indexed, "both methods find the same pods");
        println!(
            "index over scan: {:.0}x faster",
            scan.as_secs_f64() / index.as_secs_f64()
        );
    }
}

/// The uid of execution `i`, shaped as Kubernetes makes them.
fn uid(i: usize) -> String {
    format!("{:08x}-0000-4000-8000-{:012x}", i, i * 7919)
}

/// The indexed pod cache with one trimmed pod of each execution, filled by a watch's listing.
fn filled(uids: &[String]) -> Index<Pod> {
    let (index, mut writer) = indexed_store(watches::pod_execution_uid);
    writer.apply_watcher_event(&watcher::Event::Init);
    for (i, uid) in uids.iter().enumerate() {
        let mut pod = pod(&format!("run-{i:05}"), uid);
        watches::trim_pod(&mut pod);
        writer.apply_watcher_event(&watcher::Event::InitApply(pod));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    index
}

/// A running pod of execution `execution` with its Job's labels.
fn pod(execution: &str, uid: &str) -> Pod {
    let job = names::job_name(execution);
    let mut labels = names::child_labels(execution, uid, "calculator");
    labels.extend([
        ("batch.kubernetes.io/controller-uid".into(), uid.into()),
        ("batch.kubernetes.io/job-name".into(), job.clone()),
        ("controller-uid".into(), uid.into()),
        ("job-name".into(), job.clone()),
    ]);
    let container = |name: &str| ContainerStatus {
        name: name.into(),
        image_id: format!("registry.example/{name}@sha256:{}", "0".repeat(64)),
        ..ContainerStatus::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{job}-x7k2p")),
            namespace: Some(NAMESPACE.into()),
            uid: Some(format!("pod-{uid}")),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                contract::EXECUTION_NAME_ANNOTATION.into(),
                execution.into(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("kwok-node-0042".into()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            init_container_statuses: Some(vec![container(contract::STAGE_CONTAINER)]),
            container_statuses: Some(vec![container(contract::AGENT_CONTAINER)]),
            ..PodStatus::default()
        }),
    }
}

/// Runs `lookups`, prints its time per lookup and returns it with what it found.
fn timed(method: &str, lookups: impl FnOnce() -> Vec<String>) -> (Duration, Vec<String>) {
    let started = Instant::now();
    let found = black_box(lookups());
    let took = started.elapsed();
    println!(
        "{method:>5}: {:>9.3} ms for {} lookups, {:>10.1} ns per lookup",
        took.as_secs_f64() * 1e3,
        found.len(),
        took.as_nanos() as f64 / found.len() as f64
    );
    (took, found)
}

/// The pod of each execution, found as reconciles did before the index: by scanning the cache.
#[inline(never)]
fn scan_all(pods: &Index<Pod>, uids: &[String]) -> Vec<String> {
    uids.iter()
        .map(|uid| {
            let found = pods.store().state_filter(|pod| {
                pod.namespace().as_deref() == Some(NAMESPACE)
                    && pod.labels().get(contract::EXECUTION_UID_LABEL) == Some(uid)
            });
            only_name(found)
        })
        .collect()
}

/// The pod of each execution, found through the index.
#[inline(never)]
fn index_all(pods: &Index<Pod>, uids: &[String]) -> Vec<String> {
    uids.iter()
        .map(|uid| only_name(pods.get(NAMESPACE, uid)))
        .collect()
}

fn only_name(found: Vec<Arc<Pod>>) -> String {
    assert_eq!(found.len(), 1, "each execution has one pod");
    found[0].meta().name.clone().expect("pods have names")
}
