//! Egress of execution pods when the controller denies it by default (`--execution-egress deny`, the chart's default), on the test cluster's enforced NetworkPolicies: an agent whose environment allows nothing reaches none of another namespace's pod, its Service, an address no environment lists and the address another execution's environment allows, and still saves its results; an agent whose environment allows that address reaches it and nothing else; a metadata address in an environment is refused naming the field.

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use errand::api::Phase;
use errand::api::contract::Reason;
use errand::store::keys::ResultName;

use crate::support::cluster::{self, DEFAULT_TIMEOUT, TestNamespace};
use crate::support::errand::wait_for;
use crate::support::harness::{Harness, message_of};
use crate::support::netpol::busybox_pod;

/// Starts web server pod `name` (page `name`) in `namespace`; its pod IP once it runs.
async fn server_pod(namespace: &TestNamespace, name: &str) -> String {
    let script = format!(
        "mkdir -p /tmp/www && echo {name} >/tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"
    );
    let pods = namespace.api::<Pod>();
    pods.create(
        &PostParams::default(),
        &busybox_pod(name, &[("app", name)], &script),
    )
    .await
    .unwrap_or_else(|e| panic!("creating server pod {name}: {e}"));
    wait_for(
        &format!("server pod {name} to run"),
        DEFAULT_TIMEOUT,
        || async {
            let status = pods.get(name).await.ok()?.status?;
            (status.phase.as_deref() == Some("Running"))
                .then_some(status.pod_ip)
                .flatten()
        },
    )
    .await
}

/// Service `name` in front of server pod `name`; its cluster IP.
async fn service_of(client: &kube::Client, namespace: &TestNamespace, name: &str) -> String {
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), namespace.name())
        .create(&PostParams::default(), &service)
        .await
        .expect("creating the Service")
        .spec
        .unwrap()
        .cluster_ip
        .unwrap()
}

/// An agent that tries each `(name, host, port)` once the policy enforcer has seen its pod,
/// and prints `name=<last line of the answer>` or `name=unreachable` for each.
fn prober_script(targets: &[(&str, String, u16)]) -> String {
    let mut script = String::from("sleep 2\n");
    for (name, host, port) in targets {
        script.push_str(&format!(
            "out=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port} 2>/dev/null | tail -n 1)\n\
             echo \"{name}=${{out:-unreachable}}\"\n"
        ));
    }
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_reaches_only_dns_errand_and_what_its_environment_allows() {
    let Some(client) = cluster::client().await else {
        return;
    };
    // Off the pod's node, as a cloud's metadata server or another tenant would be: pods of
    // another namespace (a NetworkPolicy never filters a pod's own node, which on this
    // one-node cluster also runs the API server).
    let other = TestNamespace::create(&client, "egress-other").await;
    let pod_ip = server_pod(&other, "tenant").await;
    let service_ip = service_of(&client, &other, "tenant").await;
    let unlisted_ip = server_pod(&other, "unlisted").await;
    let allowed_ip = server_pod(&other, "allowed").await;
    // The operator lets environments reach the allowed pod's address (a pod CIDR is denied
    // by default).
    let allow_back = format!("{allowed_ip}/32");
    let Some(harness) = Harness::start_with_controller_args(
        "egress",
        &[
            "--execution-egress",
            "deny",
            "--outbound-allow",
            &allow_back,
        ],
    )
    .await
    else {
        return;
    };
    let targets = [
        ("pod", pod_ip, 8080),
        ("service", service_ip, 80),
        ("unlisted", unlisted_ip, 8080),
        ("allowed", allowed_ip.clone(), 8080),
    ];
    harness
        .create_agent("prober", cluster::BUSYBOX_IMAGE, &prober_script(&targets))
        .await;
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment",
            "metadata": {"name": "one-host"},
            "spec": {"egress": {"allow": [{"cidr": allow_back, "ports": [8080]}]}},
        }))
        .await;
    harness
        .create_execution("closed", "prober", json!({}))
        .await;
    harness
        .create_execution(
            "one-host",
            "prober",
            json!({"environmentRef": {"name": "one-host"}}),
        )
        .await;
    // Metadata addresses are never an environment's to allow.
    harness
        .create_execution(
            "metadata",
            "prober",
            json!({"environment": {"egress": {"allow": [{"cidr": "169.254.169.254/32"}]}}}),
        )
        .await;

    let mut reached = Vec::new();
    for name in ["closed", "one-host"] {
        let done = harness.wait_for_phase(name, Phase::Succeeded).await;
        let record = harness.result_json(&done, ResultName::RunResult).await;
        let response = record["response"].as_str().unwrap_or_default().to_owned();
        reached.push(response);
    }
    assert_eq!(
        reached[0].lines().collect::<Vec<_>>(),
        [
            "pod=unreachable",
            "service=unreachable",
            "unlisted=unreachable",
            "allowed=unreachable"
        ],
        "an environment that allows nothing: its results were still saved, through errand"
    );
    assert_eq!(
        reached[1].lines().collect::<Vec<_>>(),
        [
            "pod=unreachable",
            "service=unreachable",
            "unlisted=unreachable",
            "allowed=allowed"
        ],
        "an environment that allows one host and port"
    );
    let refused = harness
        .wait_for_failure("metadata", Phase::Failed, Reason::InvalidSpec)
        .await;
    let message = message_of(&refused);
    assert!(
        message.contains("spec.environment.egress.allow[0].cidr")
            && message.contains("link-local (cloud metadata)"),
        "{message}"
    );
    // One policy per execution that ran, each owned by it.
    let policies = harness
        .api::<NetworkPolicy>()
        .list(&Default::default())
        .await
        .unwrap();
    let mut owners: Vec<String> = policies
        .items
        .iter()
        .flat_map(|p| p.metadata.owner_references.iter().flatten())
        .map(|o| o.name.clone())
        .collect();
    owners.sort();
    assert_eq!(owners, ["closed", "one-host"]);
    harness.finish().await;
    other.delete().await;
}
