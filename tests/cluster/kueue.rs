//! Executions under real Kueue (`hack/testenv/kueue.sh`) on the test node's four fake GPUs
//! (`hack/testenv/tools/cluster/cmd/fake-gpu-plugin`): a GPU quota holds executions `Queued`
//! with Kueue's reason and admits them as capacity frees, a queued execution can be cancelled,
//! the controller's default queue applies, a GPU run records the devices its agent saw, and
//! asking for more GPUs than exist fails `Unschedulable` after the start timeout.
//!
//! Kueue is installed before the controller starts: the controller discovers it at start.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::cluster::{self, BUSYBOX_IMAGE};
use crate::support::errand::wait_for;
use crate::support::harness::{
    Harness, Mode, RUN_WAIT, message_of, phase_of, reason_of, record_uids,
};
use crate::support::kueue::{Queue, Quotas, has_condition, job_of};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::{Value, json};

use errand::api::contract::{ConditionType, Reason};
use errand::api::{AgentExecution, Phase};
use errand::controller::names::job_name;
use errand::store::keys::ResultName;

/// The test node's GPUs, as its device plugin names them.
const NODE_GPUS: [&str; 4] = ["fake-gpu-0", "fake-gpu-1", "fake-gpu-2", "fake-gpu-3"];
/// Pods at the `restricted` Pod Security Standard.
const RESTRICTED: [(&str, &str); 1] = [("pod-security.kubernetes.io/enforce", "restricted")];

/// Installs Kueue, then starts the harness (whose controller then watches Kueue's Workloads).
async fn start(prefix: &str, mode: Mode, controller_args: &[&str]) -> Option<Harness> {
    cluster::client().await?;
    cluster::ensure_kueue().await;
    Harness::start_with(prefix, &RESTRICTED, mode, controller_args).await
}

/// The spec fields of an execution asking for `gpus` GPUs (and a little cpu and memory), in
/// LocalQueue `queue` if given, that may wait `start_timeout` seconds to start.
fn gpu_spec(queue: Option<&str>, gpus: u32, start_timeout: u64) -> Value {
    let mut spec = json!({
        "startTimeoutSeconds": start_timeout,
        "environment": {"compute": {"resources": {
            "limits": {"nvidia.com/gpu": gpus.to_string()},
            "requests": {"cpu": "100m", "memory": "64Mi"},
        }}},
    });
    if let Some(queue) = queue {
        spec["queueName"] = json!(queue);
    }
    spec
}

/// The GPUs the status says the agent saw.
fn gpu_devices(execution: &AgentExecution) -> Vec<String> {
    execution
        .status
        .as_ref()
        .map(|s| s.gpu_devices.clone())
        .unwrap_or_default()
}

/// What the test saw of one execution, in seconds since the first was created.
#[derive(Debug, Default)]
struct Seen {
    /// First seen Queued with Kueue's reason, and that reason.
    queued: Option<(f64, String)>,
    /// First seen past Queued (Starting, Running or ended): admitted.
    admitted: Option<f64>,
    /// First seen ended.
    ended: Option<f64>,
}

/// How long the agent of each execution of the quota test runs: long enough that the fifth
/// waits in the queue for longer than its start timeout.
const AGENT_SECONDS: u64 = 15;
const QUOTA_START_TIMEOUT: u64 = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_gpu_executions_under_a_quota_of_two_run_two_at_a_time_and_all_succeed() {
    let Some(harness) = start("kueue-quota", Mode::WithPods, &[]).await else {
        return;
    };
    let quotas = Quotas {
        cpu: "2",
        memory: "2Gi",
        gpus: 2,
    };
    let queue = Queue::create(&harness.client, harness.namespace.name(), "gpu", quotas).await;
    harness
        .create_agent(
            "gpu-agent",
            BUSYBOX_IMAGE,
            &format!("echo \"gpus=$NVIDIA_VISIBLE_DEVICES\"; sleep {AGENT_SECONDS}"),
        )
        .await;
    let names: Vec<String> = (1..=5).map(|i| format!("gpu-{i}")).collect();
    let t0 = Instant::now();
    for name in &names {
        harness
            .create_execution(
                name,
                "gpu-agent",
                gpu_spec(Some("gpu"), 1, QUOTA_START_TIMEOUT),
            )
            .await;
    }

    // Sample every execution's phase until all ended.
    let mut seen: BTreeMap<String, Seen> =
        names.iter().map(|n| (n.clone(), Seen::default())).collect();
    let (mut max_running, mut max_admitted, mut max_queued, mut max_pods) = (0, 0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(420);
    let executions = loop {
        let executions = harness
            .api::<AgentExecution>()
            .list(&ListParams::default())
            .await
            .expect("listing the executions")
            .items;
        // Kueue frees a Job's quota once it finished, so at most two pods are ever unfinished.
        let unfinished_pods = harness
            .api::<Pod>()
            .list(&ListParams::default())
            .await
            .expect("listing the pods")
            .items
            .iter()
            .filter(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                !matches!(phase, Some("Succeeded" | "Failed"))
            })
            .count();
        max_pods = max_pods.max(unfinished_pods);
        let at = t0.elapsed().as_secs_f64();
        let count = |p: fn(Phase) -> bool| {
            executions
                .iter()
                .filter(|e| phase_of(e).is_some_and(p))
                .count()
        };
        max_running = max_running.max(count(|p| p == Phase::Running));
        max_admitted = max_admitted.max(count(|p| matches!(p, Phase::Starting | Phase::Running)));
        max_queued = max_queued.max(count(|p| p == Phase::Queued));
        for execution in &executions {
            let entry = seen.get_mut(&execution.name_any()).expect("one of ours");
            match phase_of(execution) {
                Some(Phase::Queued) => {
                    let message = message_of(execution);
                    if entry.queued.is_none() && message.contains("couldn't assign flavors") {
                        entry.queued = Some((at, message));
                    }
                }
                Some(Phase::Starting | Phase::Running) => {
                    entry.admitted.get_or_insert(at);
                }
                Some(phase) if phase.is_terminal() => {
                    entry.admitted.get_or_insert(at);
                    entry.ended.get_or_insert(at);
                }
                _ => {}
            }
        }
        if executions.len() == names.len() && seen.values().all(|s| s.ended.is_some()) {
            break executions;
        }
        assert!(
            Instant::now() < deadline,
            "the executions did not all end: {:#?}",
            executions
                .iter()
                .map(|e| (e.name_any(), &e.status))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    for execution in &executions {
        assert_eq!(
            phase_of(execution),
            Some(Phase::Succeeded),
            "{}: {}",
            execution.name_any(),
            message_of(execution)
        );
    }
    // The agents' runs, as their pods report them (whole seconds): never more than two at
    // once, and those that overlapped saw different GPUs.
    let runs: Vec<(String, i64, i64, Vec<String>)> = executions
        .iter()
        .map(|e| {
            let status = e.status.as_ref().expect("a status");
            let second = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                t.as_ref().expect("agent times").0.as_second()
            };
            (
                e.name_any(),
                second(&status.start_time),
                second(&status.completion_time),
                gpu_devices(e),
            )
        })
        .collect();
    let overlapping = |a: &(String, i64, i64, Vec<String>), b: &(String, i64, i64, Vec<String>)| {
        a.1 < b.2 && b.1 < a.2
    };
    let max_overlap = runs
        .iter()
        .map(|a| runs.iter().filter(|b| overlapping(a, b)).count())
        .max()
        .unwrap_or(0);
    for a in &runs {
        assert!(
            a.3.len() == 1 && NODE_GPUS.contains(&a.3[0].as_str()),
            "{}: the agent saw {:?}, not one GPU of the node",
            a.0,
            a.3
        );
        for b in runs.iter().filter(|b| b.0 != a.0 && overlapping(a, b)) {
            assert_ne!(a.3, b.3, "{} and {} ran at once on one GPU", a.0, b.0);
        }
    }

    let mut order: Vec<(&String, &Seen)> = seen.iter().collect();
    order.sort_by(|a, b| a.1.admitted.partial_cmp(&b.1.admitted).unwrap());
    let mut timeline = format!(
        "Kueue quota timeline (2 GPUs of quota, 5 executions of 1 GPU, agents of {AGENT_SECONDS}s, \
         startTimeoutSeconds {QUOTA_START_TIMEOUT}; seconds since the first was created):\n"
    );
    for (name, s) in &order {
        let run = runs.iter().find(|r| &r.0 == *name).unwrap();
        timeline.push_str(&format!(
            "  {name}: queued {} admitted {:.1} agent {}..{} (epoch s) ended {:.1} gpu {:?}\n",
            s.queued
                .as_ref()
                .map_or("-".to_owned(), |(at, _)| format!("{at:.1}")),
            s.admitted.unwrap(),
            run.1,
            run.2,
            s.ended.unwrap(),
            run.3,
        ));
    }
    let admitted_order: Vec<&str> = order.iter().map(|(n, _)| n.as_str()).collect();
    let longest_wait = order
        .iter()
        .map(|(_, s)| s.admitted.unwrap())
        .fold(0.0, f64::max);
    timeline.push_str(&format!(
        "  admitted order: {}\n  max concurrently running: {max_running} (sampled phase Running), \
         {max_overlap} (agent start..end from the status); max admitted at once: {max_admitted} \
         (sampled phase Starting or Running); max unfinished pods at once: {max_pods}; max Queued \
         at once: {max_queued}; longest queue wait: {longest_wait:.1}s\n",
        admitted_order.join(", ")
    ));
    if let Some((_, (_, reason))) = order
        .iter()
        .find_map(|(n, s)| s.queued.as_ref().map(|q| (n, q)))
    {
        timeline.push_str(&format!("  Kueue's reason in the status: {reason}\n"));
    }
    println!("{timeline}");

    assert!(max_overlap <= 2, "{timeline}");
    assert!(max_pods <= 2, "{timeline}");
    assert_eq!(max_running, 2, "the quota of two was used: {timeline}");
    let queued = seen.values().filter(|s| s.queued.is_some()).count();
    assert!(
        queued >= 3,
        "the three beyond the quota were seen Queued with Kueue's reason: {timeline}"
    );
    for (_, (_, reason)) in seen
        .iter()
        .filter_map(|(n, s)| s.queued.as_ref().map(|q| (n, q)))
    {
        assert!(
            reason.starts_with("waiting in Kueue LocalQueue gpu (Workload job-")
                && reason.contains("insufficient unused quota for nvidia.com/gpu"),
            "{reason}"
        );
    }
    // Queue time is not start time: the last one waited longer than its start timeout.
    assert!(
        longest_wait > QUOTA_START_TIMEOUT as f64,
        "the queue wait never exceeded the start timeout: {timeline}"
    );
    harness.finish().await;
    queue.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_execution_cancelled_ends_without_a_pod_and_its_workload_goes() {
    let Some(harness) = start("kueue-cancel", Mode::WithoutPods, &[]).await else {
        return;
    };
    // No GPU quota at all: Kueue never admits it.
    let quotas = Quotas {
        cpu: "1",
        memory: "1Gi",
        gpus: 0,
    };
    let queue = Queue::create(&harness.client, harness.namespace.name(), "none", quotas).await;
    let (pods, recording) = record_uids(harness.api::<Pod>());
    harness.create_agent("agent", BUSYBOX_IMAGE, "true").await;
    harness
        .create_execution("waiting", "agent", gpu_spec(Some("none"), 1, 5))
        .await;
    let queued = harness
        .wait_for_execution("waiting", "to be Queued with Kueue's reason", |e| {
            phase_of(e) == Some(Phase::Queued) && message_of(e).contains("couldn't assign flavors")
        })
        .await;
    assert_eq!(reason_of(&queued, ConditionType::Started), Some("Queued"));
    let message = message_of(&queued);
    assert!(message.contains("nvidia.com/gpu"), "{message}");
    let workloads = queue.workloads().await;
    assert_eq!(workloads.len(), 1, "{workloads:?}");
    assert_eq!(job_of(&workloads[0]), Some(job_name("waiting").as_str()));
    // Held longer than its start timeout of 5s, and still queued.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let still = harness
        .api::<AgentExecution>()
        .get("waiting")
        .await
        .unwrap();
    assert_eq!(phase_of(&still), Some(Phase::Queued), "{:?}", still.status);

    harness.cancel("waiting").await;
    let cancelled = harness
        .wait_for_failure("waiting", Phase::Cancelled, Reason::Cancelled)
        .await;
    assert!(
        message_of(&cancelled).contains("cancelled while queued in Kueue; no pod ran"),
        "{}",
        message_of(&cancelled)
    );
    harness.wait_for_no_jobs().await;
    wait_for("the Workload to go with its Job", RUN_WAIT, || async {
        queue.workloads().await.is_empty().then_some(())
    })
    .await;
    recording.abort();
    assert!(
        pods.lock().unwrap().is_empty(),
        "a pod ran: {:?}",
        pods.lock().unwrap()
    );
    harness.finish().await;
    queue.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_queue_admits_a_gpu_execution_whose_record_names_its_device() {
    let Some(harness) = start(
        "kueue-default",
        Mode::WithPods,
        &["--default-queue-name", "team-queue"],
    )
    .await
    else {
        return;
    };
    let quotas = Quotas {
        cpu: "1",
        memory: "1Gi",
        gpus: 1,
    };
    let queue = Queue::create(
        &harness.client,
        harness.namespace.name(),
        "team-queue",
        quotas,
    )
    .await;
    harness
        .create_agent(
            "gpu-agent",
            BUSYBOX_IMAGE,
            "echo \"gpus=$NVIDIA_VISIBLE_DEVICES\"",
        )
        .await;
    // Names no queue: the controller's default applies.
    harness
        .create_execution("gpu", "gpu-agent", gpu_spec(None, 1, 120))
        .await;
    let done = harness.wait_for_phase("gpu", Phase::Succeeded).await;

    let job = harness.api::<Job>().get(&job_name("gpu")).await.unwrap();
    assert_eq!(job.labels()["kueue.x-k8s.io/queue-name"], "team-queue");
    let workloads = wait_for("Kueue to finish the Workload", RUN_WAIT, || async {
        let workloads = queue.workloads().await;
        workloads
            .iter()
            .any(|w| has_condition(w, "Finished", Some("Succeeded")))
            .then_some(workloads)
    })
    .await;
    assert_eq!(job_of(&workloads[0]), Some(job_name("gpu").as_str()));

    let devices = gpu_devices(&done);
    assert!(
        devices.len() == 1 && NODE_GPUS.contains(&devices[0].as_str()),
        "the status names {devices:?}, not one GPU of the node"
    );
    let record = harness.result_json(&done, ResultName::RunResult).await;
    assert_eq!(record["gpu_devices"], json!(devices), "{record}");
    let artifacts = harness
        .result_files(&done, ResultName::OutputArtifacts)
        .await;
    assert_eq!(
        artifacts["stdout.log"].trim(),
        format!("gpus={}", devices[0]),
        "the agent saw the device the record names"
    );
    println!(
        "GPU execution: status.gpuDevices {:?}\nrun_result: {}",
        devices,
        serde_json::to_string_pretty(&record).unwrap()
    );
    harness.finish().await;
    queue.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_gpus_than_the_node_has_fail_unschedulable_after_the_start_timeout() {
    let Some(harness) =
        Harness::start_with("gpu-greedy", &RESTRICTED, Mode::WithoutPods, &[]).await
    else {
        return;
    };
    harness.create_agent("agent", BUSYBOX_IMAGE, "true").await;
    harness
        .create_execution("greedy", "agent", gpu_spec(None, 8, 10))
        .await;
    let failed = harness
        .wait_for_failure("greedy", Phase::Failed, Reason::Unschedulable)
        .await;
    let message = message_of(&failed);
    assert!(
        message.contains("the pod did not start within 10s")
            && message.contains("Insufficient nvidia.com/gpu"),
        "the scheduler's message: {message}"
    );
    harness.wait_for_no_jobs().await;
    harness.finish().await;
}
