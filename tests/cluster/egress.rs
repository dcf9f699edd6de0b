//! Egress of execution pods when the controller denies it by default (`--execution-egress deny`, the chart's default), on the test cluster's enforced NetworkPolicies: an agent whose environment allows nothing reaches none of another namespace's pod, a Service, the API server, a stand-in metadata listener and the host another execution's environment allows, and still saves its results; an agent whose environment allows that host reaches it and nothing else; a range inside a denied one is refused naming the field.

use std::io::Write;
use std::net::TcpListener;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use errand::api::Phase;
use errand::api::contract::Reason;
use errand::store::keys::ResultName;

use crate::support::cluster::{self, DEFAULT_TIMEOUT, POD_GATEWAY, TestNamespace};
use crate::support::errand::wait_for;
use crate::support::harness::{Harness, message_of};
use crate::support::netpol::busybox_pod;

/// A TCP listener on the pod bridge's host address that answers every connection with
/// `answer`; its port.
fn answering_listener(answer: &'static str) -> u16 {
    let listener = TcpListener::bind((POD_GATEWAY, 0)).expect("a listener on the pod gateway");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(format!("HTTP/1.0 200 OK\r\n\r\n{answer}\n").as_bytes());
        }
    });
    port
}

/// Starts a web server pod in `namespace` behind Service `server`; its pod IP and the
/// Service's cluster IP.
async fn server_and_service(client: &kube::Client, namespace: &TestNamespace) -> (String, String) {
    let script = "mkdir -p /tmp/www && echo pod-page >/tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www";
    let pods = namespace.api::<Pod>();
    pods.create(
        &PostParams::default(),
        &busybox_pod("server", &[("app", "server")], script),
    )
    .await
    .expect("creating the server pod");
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "server"},
        "spec": {"selector": {"app": "server"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    let service = Api::<Service>::namespaced(client.clone(), namespace.name())
        .create(&PostParams::default(), &service)
        .await
        .expect("creating the Service");
    let pod_ip = wait_for("the server pod to run", DEFAULT_TIMEOUT, || async {
        let status = pods.get("server").await.ok()?.status?;
        (status.phase.as_deref() == Some("Running"))
            .then_some(status.pod_ip)
            .flatten()
    })
    .await;
    (pod_ip, service.spec.unwrap().cluster_ip.unwrap())
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
    let Some(harness) = Harness::start_with_controller_args(
        "egress",
        &[
            "--execution-egress",
            "deny",
            "--outbound-allow",
            "10.88.0.1/32",
        ],
    )
    .await
    else {
        return;
    };
    let other = TestNamespace::create(&harness.client, "egress-other").await;
    let (pod_ip, service_ip) = server_and_service(&harness.client, &other).await;
    let api_server = Api::<Service>::namespaced(harness.client.clone(), "default")
        .get("kubernetes")
        .await
        .expect("the kubernetes Service")
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let allowed_port = answering_listener("allowed-host");
    let metadata_port = answering_listener("metadata");
    let targets = [
        ("pod", pod_ip, 8080),
        ("service", service_ip, 80),
        ("apiserver", api_server, 443),
        ("metadata", POD_GATEWAY.to_owned(), metadata_port),
        ("allowed", POD_GATEWAY.to_owned(), allowed_port),
    ];
    harness
        .create_agent("prober", cluster::BUSYBOX_IMAGE, &prober_script(&targets))
        .await;
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment",
            "metadata": {"name": "one-host"},
            "spec": {"egress": {"allow": [{"cidr": format!("{POD_GATEWAY}/32"), "ports": [allowed_port]}]}},
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
            "apiserver=unreachable",
            "metadata=unreachable",
            "allowed=unreachable"
        ],
        "an environment that allows nothing: its results were still saved, through errand"
    );
    assert_eq!(
        reached[1].lines().collect::<Vec<_>>(),
        [
            "pod=unreachable",
            "service=unreachable",
            "apiserver=unreachable",
            "metadata=unreachable",
            "allowed=allowed-host"
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
