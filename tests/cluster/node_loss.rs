//! Losing the node under a running agent, on the real test cluster: the kubelet is frozen
//! (SIGSTOP) until the node lifecycle controller marks the node NotReady and Kubernetes evicts
//! the pod (`hack/testenv/up.sh` shortens both to 20 s), then thawed. The execution ends
//! `NodeLost`, saying so, and errand never makes a second pod.
//!
//! It holds the test cluster alone ([`cluster::alone`]): a frozen kubelet stops every pod start
//! on the node, so no other test may run meanwhile, and it lets the next tests in only once the
//! cluster's own workloads, evicted too, serve again.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::cluster;
use crate::support::errand::wait_for;
use crate::support::harness::{Harness, Mode, message_of, reason_of, record_uids};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use errand::api::contract::{ConditionType, Reason};
use errand::api::{AgentExecution, Phase};

/// The node pods run on (`NODE_NAME` in hack/testenv/lib.sh).
const NODE: &str = "localhost";
/// Node NotReady after 20 s, pods evicted 20 s later: room for a loaded machine.
const EVICTION_WAIT: Duration = Duration::from_secs(150);

/// The kubelet, stopped until this is dropped (also when the test fails).
struct FrozenKubelet(Pid);

impl FrozenKubelet {
    fn freeze() -> Self {
        let run = cluster::kubeconfig_path()
            .parent()
            .expect("the kubeconfig is in the test environment's directory")
            .join("run");
        let pid: i32 = std::fs::read_to_string(run.join("kubelet.pid"))
            .expect("up.sh records the kubelet's pid")
            .trim()
            .parse()
            .unwrap();
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        assert_eq!(name.trim(), "kubelet", "pid {pid} is the kubelet");
        let pid = Pid::from_raw(pid);
        kill(pid, Signal::SIGSTOP).expect("stopping the kubelet (hack/test.sh runs as root)");
        Self(pid)
    }
}

impl Drop for FrozenKubelet {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

/// Whether the node is Ready with no NoExecute taint left.
async fn node_ready(nodes: &Api<Node>) -> Option<()> {
    let node = nodes.get(NODE).await.ok()?;
    let ready = node
        .status?
        .conditions?
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let tainted = node
        .spec?
        .taints
        .unwrap_or_default()
        .iter()
        .any(|t| t.effect == "NoExecute");
    (ready && !tainted).then_some(())
}

/// Waits until the cluster's own workloads, evicted with every other pod of the node, serve
/// again: each Deployment outside the test namespaces (CoreDNS, local-path-provisioner, Kueue)
/// is available, and Kueue's fail-closed webhooks answer (a server-side dry run of a Job goes
/// through them). Until then the tests that come next would have their pods and Jobs refused.
async fn wait_for_the_cluster_to_serve_again(client: &Client, namespace: &str) {
    let deployments = Api::<Deployment>::all(client.clone());
    wait_for(
        "the cluster's own Deployments to be available again",
        EVICTION_WAIT,
        || async {
            let listed = deployments.list(&Default::default()).await.ok()?;
            let all_available = listed
                .items
                .iter()
                .filter(|d| !d.namespace().unwrap_or_default().starts_with("errand-"))
                .all(|d| {
                    let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    let available = d.status.as_ref().and_then(|s| s.available_replicas);
                    available.unwrap_or(0) >= wanted
                });
            all_available.then_some(())
        },
    )
    .await;
    let jobs = Api::<Job>::namespaced(client.clone(), namespace);
    let probe: Job = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "probe", "image": cluster::BUSYBOX_IMAGE}],
        }}},
    }))
    .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        "Kueue's webhooks to answer again",
        EVICTION_WAIT,
        || async { jobs.create(&dry_run, &probe).await.ok().map(|_| ()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_ends_the_run_as_node_lost_without_a_second_pod() {
    // Alone: the frozen kubelet would stall every other test's pods.
    cluster::alone().await;
    let Some(e2e) = Harness::start("node-loss", Mode::WithPods).await else {
        return;
    };
    let (pods_seen, pod_watch) = record_uids(e2e.api::<Pod>());
    e2e.create_agent("patient", cluster::BUSYBOX_IMAGE, "echo working; sleep 600")
        .await;
    e2e.create_execution("stranded", "patient", json!({})).await;
    e2e.wait_for_phase("stranded", Phase::Running).await;

    let frozen = FrozenKubelet::freeze();
    let started = tokio::time::Instant::now();
    let execution = wait_for("the execution to end NodeLost", EVICTION_WAIT, || {
        let api = e2e.api::<AgentExecution>();
        async move {
            let execution = api.get("stranded").await.ok()?;
            let phase = execution.status.as_ref()?.phase?;
            phase.is_terminal().then_some(execution)
        }
    })
    .await;
    let lost_after = started.elapsed();
    drop(frozen);
    let nodes = Api::<Node>::all(e2e.client.clone());
    wait_for("the node to be Ready again", EVICTION_WAIT, || {
        node_ready(&nodes)
    })
    .await;
    wait_for_the_cluster_to_serve_again(&e2e.client, e2e.namespace.name()).await;

    assert_eq!(
        reason_of(&execution, ConditionType::Failed),
        Some(Reason::NodeLost.as_str()),
        "{}",
        message_of(&execution)
    );
    let message = message_of(&execution);
    assert!(
        message.contains(&format!("node {NODE} stopped responding"))
            && message.contains("errand never starts a second pod"),
        "{message}"
    );
    assert_eq!(
        execution.status.as_ref().unwrap().phase,
        Some(Phase::Failed)
    );
    eprintln!(
        "the node's loss ended the run {:.0}s after the kubelet stopped: {message}",
        lost_after.as_secs_f64()
    );
    // Give the thawed kubelet and the Job controller time to act before counting pods.
    tokio::time::sleep(Duration::from_secs(5)).await;
    pod_watch.abort();
    let pods_seen = pods_seen.lock().unwrap().clone();
    assert_eq!(
        pods_seen.values().map(BTreeSet::len).sum::<usize>(),
        1,
        "exactly one pod ever: {pods_seen:?}"
    );
    e2e.finish().await;
}
