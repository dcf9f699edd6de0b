//! Smoke tests of the test cluster itself (`hack/testenv/up.sh`): the
//! control plane reports the pinned Kubernetes release, the node is Ready,
//! and real Jobs run on it: one completes and its logs are read back, one is
//! stopped by `activeDeadlineSeconds`, and container limits reach the cgroup.
//! If these fail, every other cluster test would fail for the same reason.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use support::cluster::{self, BUSYBOX_IMAGE, DEFAULT_TIMEOUT, TestNamespace};

/// A one-container busybox Job that runs `script` once and is never retried.
fn busybox_job(name: &str, script: &str) -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": name },
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    // busybox as PID 1 ignores SIGTERM: do not wait 30s for it.
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main",
                        "image": BUSYBOX_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", script],
                    }],
                }
            }
        }
    })
}

/// The Kubernetes version `hack/testenv/tools/cluster/go.mod` pins.
fn pinned_kubernetes_version() -> String {
    let go_mod = include_str!("../hack/testenv/tools/cluster/go.mod");
    go_mod
        .lines()
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("k8s.io/kubernetes"))
                .then(|| words.next())
                .flatten()
                .filter(|v| v.starts_with('v'))
                .map(str::to_owned)
        })
        .expect("go.mod requires k8s.io/kubernetes")
}

#[tokio::test]
async fn apiserver_reports_the_pinned_release() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let info = client.apiserver_version().await.expect("GET /version");
    assert_eq!(info.git_version, pinned_kubernetes_version());
    assert_eq!(info.git_tree_state, "clean");
}

#[tokio::test]
async fn node_is_ready() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let nodes = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .expect("listing nodes");
    let ready: Vec<_> = nodes
        .items
        .iter()
        .filter(|node| {
            node.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .collect();
    assert_eq!(
        ready.len(),
        1,
        "expected one Ready node, got {:?}",
        nodes.items
    );
}

#[tokio::test]
async fn job_completes_on_the_node_and_its_logs_are_read_back() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let ns = TestNamespace::create(&client, "smoke").await;
    cluster::create_job(
        &client,
        ns.name(),
        busybox_job("hello", "echo hello from $(hostname); echo to stderr >&2"),
    )
    .await;

    cluster::wait_for_job_condition(&client, ns.name(), "hello", "Complete", DEFAULT_TIMEOUT).await;

    let pods = cluster::job_pods(&client, ns.name(), "hello").await;
    assert_eq!(pods.len(), 1);
    let pod = &pods[0];
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    assert!(
        node.is_some_and(|n| !n.is_empty()),
        "the pod was never scheduled"
    );
    let pod_name = pod.metadata.name.as_deref().expect("pod name");
    let logs = cluster::job_logs(&client, ns.name(), "hello").await;
    assert!(
        logs.contains(&format!("hello from {pod_name}")) && logs.contains("to stderr"),
        "unexpected logs: {logs:?}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn job_past_its_active_deadline_is_killed() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let ns = TestNamespace::create(&client, "smoke").await;
    let mut job = busybox_job("sleeper", "echo started; sleep 600");
    // Long enough for the container to be seen running first, so the test
    // proves a running container is killed, not just a pod that never started.
    job["spec"]["activeDeadlineSeconds"] = json!(20);
    cluster::create_job(&client, ns.name(), job).await;
    let running = cluster::wait_for_job_pod_phase(
        &client,
        ns.name(),
        "sleeper",
        "Running",
        Duration::from_secs(20),
    )
    .await;
    let pod_name = running.metadata.name.clone().expect("pod name");

    let job =
        cluster::wait_for_job_condition(&client, ns.name(), "sleeper", "Failed", DEFAULT_TIMEOUT)
            .await;

    let failed = cluster::job_condition(&job, "Failed").expect("Failed condition");
    assert_eq!(
        failed.reason.as_deref(),
        Some("DeadlineExceeded"),
        "{failed:?}"
    );
    let status = job.status.as_ref().expect("job status");
    assert_eq!(
        status.active.unwrap_or(0),
        0,
        "pods still active after the deadline: {status:?}"
    );
    assert_eq!(status.succeeded.unwrap_or(0), 0, "{status:?}");
    let pod = ns
        .api::<Pod>()
        .get_opt(&pod_name)
        .await
        .expect("reading the pod");
    let phase = pod.as_ref().and_then(|p| p.status.as_ref()?.phase.clone());
    assert!(
        pod.is_none() || phase.as_deref() == Some("Failed"),
        "the pod outlived the deadline: phase {phase:?}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn container_limits_reach_its_cgroup() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let ns = TestNamespace::create(&client, "smoke").await;
    // Prints the container's own memory limit and CPU quota from the cgroup
    // files, for cgroup v1 (this project's CI hosts) and v2 alike.
    let script = r#"
        if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
          echo "memory=$(cat /sys/fs/cgroup/memory.max)"
          echo "cpu=$(cat /sys/fs/cgroup/cpu.max)"
        else
          echo "memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"
          echo "cpu=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
        fi"#;
    let mut job = busybox_job("limited", script);
    let limits = json!({ "cpu": "250m", "memory": "64Mi" });
    job["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({ "limits": limits, "requests": limits });
    cluster::create_job(&client, ns.name(), job).await;

    cluster::wait_for_job_condition(&client, ns.name(), "limited", "Complete", DEFAULT_TIMEOUT)
        .await;

    let logs = cluster::job_logs(&client, ns.name(), "limited").await;
    let value = |key: &str| {
        logs.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= line in {logs:?}"))
            .to_owned()
    };
    assert_eq!(value("memory"), (64 * 1024 * 1024).to_string());
    // 250m of a 100ms period is a 25ms quota.
    assert_eq!(value("cpu"), "25000 100000");
    ns.delete().await;
}

#[tokio::test]
#[should_panic(expected = "bash hack/testenv/up.sh")]
async fn required_but_unreachable_cluster_fails_with_how_to_start_it() {
    let missing = std::env::temp_dir().join("errand-no-such-dir/admin.kubeconfig");
    cluster::client_for(&missing, true).await;
}
