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

use crate::support::cluster::{self, DEFAULT_TIMEOUT, TestNamespace};
use crate::support::errand::wait_for;
use crate::support::netpol::{self, busybox_pod, create_policy};

/// What the server pod serves, so a client's output shows it reached that server.
const PAGE: &str = "hello-through-the-policies";
const SERVER_PORT: u16 = 8080;

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

/// Whether a new client pod with `labels` reaches the server at `server_ip` and gets its page.
async fn client_reaches(
    client: &kube::Client,
    ns: &TestNamespace,
    name: &str,
    labels: &[(&str, &str)],
    server_ip: &str,
) -> bool {
    match netpol::client_reaches(client, ns, name, labels, server_ip, SERVER_PORT).await {
        Some(page) => {
            assert_eq!(page, PAGE, "client pod {name} reached another server");
            true
        }
        None => false,
    }
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
