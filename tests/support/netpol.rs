//! Probes of who reaches whom on the test cluster, which enforces NetworkPolicies: busybox pods with chosen labels that try a TCP server and report what answered.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::cluster::{self, BUSYBOX_IMAGE, DEFAULT_TIMEOUT, TestNamespace};
use super::errand::wait_for;

/// A busybox pod with `labels` that runs `script` once.
pub fn busybox_pod(name: &str, labels: &[(&str, &str)], script: &str) -> Pod {
    let labels: serde_json::Map<_, _> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": labels },
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
    }))
    .expect("a valid Pod")
}

/// What a new client pod `name` with `labels` in `ns` got from `host:port`: the last line of
/// the answer to `GET / HTTP/1.0`, or `None` when it could not connect.
///
/// The client waits 2 s before its first try, so the enforcer has seen its IP (it learns pod
/// IPs from the API server), then tries three times with a 3 s connect timeout: a refused
/// client is one whose every try timed out or was refused.
pub async fn client_reaches(
    client: &kube::Client,
    ns: &TestNamespace,
    name: &str,
    labels: &[(&str, &str)],
    host: &str,
    port: u16,
) -> Option<String> {
    // busybox's wget crashes on plain HTTP; nc speaks it well enough.
    let script = format!(
        r#"sleep 2
        for i in 1 2 3; do
          page=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 {host} {port} 2>/dev/null | tail -n 1)
          if [ -n "$page" ]; then echo "reached: $page"; exit 0; fi
          sleep 1
        done
        echo unreachable
        exit 1"#
    );
    let pods = ns.api::<Pod>();
    pods.create(&PostParams::default(), &busybox_pod(name, labels, &script))
        .await
        .unwrap_or_else(|e| panic!("creating client pod {name}: {e}"));
    let phase = wait_for(
        &format!("client pod {name} to finish"),
        DEFAULT_TIMEOUT,
        || async {
            let pod = pods.get(name).await.expect("reading a client pod");
            pod.status?
                .phase
                .filter(|phase| phase == "Succeeded" || phase == "Failed")
        },
    )
    .await;
    let logs = cluster::pod_logs(client, ns.name(), name, None).await;
    match (phase.as_str(), logs.trim()) {
        ("Succeeded", out) if out.starts_with("reached: ") => {
            Some(out.trim_start_matches("reached: ").to_owned())
        }
        ("Failed", "unreachable") => None,
        (phase, out) => panic!("client pod {name} ended {phase} with unexpected output {out:?}"),
    }
}

/// Creates `policy` (a NetworkPolicy as JSON) with `policies`.
pub async fn create_policy(policies: &Api<NetworkPolicy>, policy: serde_json::Value) {
    let policy: NetworkPolicy = serde_json::from_value(policy).expect("a valid NetworkPolicy");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("creating a NetworkPolicy");
}
