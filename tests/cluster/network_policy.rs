//! The test cluster enforces NetworkPolicies (kube-network-policies, started
//! by `hack/testenv/up.sh`): with real pods, a client reaches a server until a
//! default-deny ingress policy selects the server, reaches it again once a
//! policy admits the client's labels (a pod without them stays refused), and
//! is refused again by a default-deny egress policy on the client. Every
//! other NetworkPolicy test relies on this: on a cluster that ignores
//! policies, a test of a policy can pass without the policy doing anything.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::support::cluster::{self, BUSYBOX_IMAGE, DEFAULT_TIMEOUT, TestNamespace};
use crate::support::errand::wait_for;

/// What the server pod serves, so a client's output shows it reached that server.
const PAGE: &str = "hello-through-the-policies";
const SERVER_PORT: u16 = 8080;

/// A busybox pod with `labels` that runs `script` once.
fn busybox_pod(name: &str, labels: &[(&str, &str)], script: &str) -> Pod {
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

/// Starts the server pod (`app=server`) and returns its IP once it runs.
async fn start_server(pods: &Api<Pod>) -> String {
    let script = format!(
        "mkdir -p /tmp/www && echo {PAGE} >/tmp/www/index.html && exec httpd -f -p {SERVER_PORT} -h /tmp/www"
    );
    pods.create(
        &PostParams::default(),
        &busybox_pod("server", &[("app", "server")], &script),
    )
    .await
    .expect("creating the server pod");
    wait_for("the server pod to run", DEFAULT_TIMEOUT, || async {
        let pod = pods.get("server").await.expect("reading the server pod");
        let status = pod.status?;
        assert_ne!(
            status.phase.as_deref(),
            Some("Failed"),
            "the server pod failed"
        );
        (status.phase.as_deref() == Some("Running"))
            .then_some(status.pod_ip)
            .flatten()
    })
    .await
}

/// Whether a new client pod with `labels` reaches the server at `server_ip`,
/// from what the pod printed and how it ended.
///
/// The client waits 2 s before its first try, so the enforcer has seen its
/// IP (it learns pod IPs from the API server), then tries three times with a
/// 3 s connect timeout: a refused client is one whose every try timed out.
async fn client_reaches(
    client: &kube::Client,
    ns: &TestNamespace,
    name: &str,
    labels: &[(&str, &str)],
    server_ip: &str,
) -> bool {
    // busybox's wget crashes on plain HTTP; nc speaks it well enough.
    let script = format!(
        r#"sleep 2
        for i in 1 2 3; do
          page=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 {server_ip} {SERVER_PORT} 2>/dev/null | tail -n 1)
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
        ("Succeeded", out) if out == format!("reached: {PAGE}") => true,
        ("Failed", "unreachable") => false,
        (phase, out) => panic!("client pod {name} ended {phase} with unexpected output {out:?}"),
    }
}

async fn create_policy(policies: &Api<NetworkPolicy>, policy: serde_json::Value) {
    let policy: NetworkPolicy = serde_json::from_value(policy).expect("a valid NetworkPolicy");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("creating a NetworkPolicy");
}

#[tokio::test]
async fn network_policies_decide_who_reaches_a_pod() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let ns = TestNamespace::create(&client, "netpol").await;
    let pods = ns.api::<Pod>();
    let policies = ns.api::<NetworkPolicy>();
    let server_ip = start_server(&pods).await;
    let client_labels = [("role", "client")];

    assert!(
        client_reaches(&client, &ns, "open", &client_labels, &server_ip).await,
        "without a policy the client must reach the server"
    );

    create_policy(
        &policies,
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": { "name": "server-default-deny-ingress" },
            "spec": { "podSelector": { "matchLabels": { "app": "server" } }, "policyTypes": ["Ingress"] },
        }),
    )
    .await;
    assert!(
        !client_reaches(&client, &ns, "denied", &client_labels, &server_ip).await,
        "a default-deny ingress policy on the server must refuse the client"
    );

    create_policy(
        &policies,
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": { "name": "server-allow-clients" },
            "spec": {
                "podSelector": { "matchLabels": { "app": "server" } },
                "policyTypes": ["Ingress"],
                "ingress": [{
                    "from": [{ "podSelector": { "matchLabels": { "role": "client" } } }],
                    "ports": [{ "protocol": "TCP", "port": SERVER_PORT }],
                }],
            },
        }),
    )
    .await;
    assert!(
        client_reaches(&client, &ns, "allowed", &client_labels, &server_ip).await,
        "a policy admitting role=client must let the client through"
    );
    assert!(
        !client_reaches(&client, &ns, "stranger", &[("role", "other")], &server_ip).await,
        "the policy admits role=client only: a pod without that label stays refused"
    );

    create_policy(
        &policies,
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": { "name": "client-default-deny-egress" },
            "spec": { "podSelector": { "matchLabels": { "role": "client" } }, "policyTypes": ["Egress"] },
        }),
    )
    .await;
    assert!(
        !client_reaches(&client, &ns, "egress-denied", &client_labels, &server_ip).await,
        "a default-deny egress policy on the client must stop it reaching the server"
    );
    ns.delete().await;
}
