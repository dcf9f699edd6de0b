//! Egress of execution pods when the controller denies it by default (`--execution-egress deny`, the chart's default), on the test cluster's enforced NetworkPolicies: an agent whose environment allows nothing reaches none of another namespace's pod, its Service, an address no environment lists and the address another execution's environment allows, and still saves its results; an agent whose environment allows that address reaches it and nothing else, unless its execution narrows the list; a metadata address in an environment is refused naming the field; an AgentDeployment's pods are held to the same.

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use errand::api::contract::{self, Reason};
use errand::api::{DeploymentPhase, Phase};
use errand::store::keys::ResultName;

use crate::support::cluster::{self, DEFAULT_TIMEOUT, TestNamespace};
use crate::support::deployments::{create_deployment, create_server_agent, wait_for_phase};
use crate::support::errand::wait_for;
use crate::support::harness::{Harness, RUN_WAIT, message_of};
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

/// What the tests probe: in a namespace of their own (returned), off the pod's node, as a
/// cloud's metadata server or another tenant would be (a NetworkPolicy never filters a pod's
/// own node, which on this one-node cluster also runs the API server): a pod, its Service, an
/// address no environment lists and one the environment allows (`name`, host, port), and
/// the CIDR of the allowed one.
async fn targets_off_the_node(
    client: &kube::Client,
) -> (TestNamespace, [(&'static str, String, u16); 4], String) {
    let other = TestNamespace::create(client, "egress-other").await;
    let pod_ip = server_pod(&other, "tenant").await;
    let service_ip = service_of(client, &other, "tenant").await;
    let unlisted_ip = server_pod(&other, "unlisted").await;
    let allowed_ip = server_pod(&other, "allowed").await;
    let allowed = format!("{allowed_ip}/32");
    let targets = [
        ("pod", pod_ip, 8080),
        ("service", service_ip, 80),
        ("unlisted", unlisted_ip, 8080),
        ("allowed", allowed_ip, 8080),
    ];
    (other, targets, allowed)
}

/// A controller denying egress by default, which lets environments reach the allowed target
/// (a pod's address: pod CIDRs are denied by default), with [`targets_off_the_node`].
async fn set_up(
    prefix: &str,
) -> Option<(
    Harness,
    TestNamespace,
    [(&'static str, String, u16); 4],
    String,
)> {
    let client = cluster::client().await?;
    let (other, targets, allowed) = targets_off_the_node(&client).await;
    let args = ["--execution-egress", "deny", "--outbound-allow", &allowed];
    let harness = Harness::start_with_controller_args(prefix, &args).await?;
    Some((harness, other, targets, allowed))
}

/// What a prober reaches with nothing allowed, and with only the allowed target.
const NOTHING: [&str; 4] = [
    "pod=unreachable",
    "service=unreachable",
    "unlisted=unreachable",
    "allowed=unreachable",
];
const ONLY_THE_ALLOWED: [&str; 4] = [
    "pod=unreachable",
    "service=unreachable",
    "unlisted=unreachable",
    "allowed=allowed",
];

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
    let Some((harness, other, targets, allow_back)) = set_up("egress").await else {
        return;
    };
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
    // The same environment, narrowed by the execution to nothing.
    harness
        .create_execution(
            "narrowed",
            "prober",
            json!({"environmentRef": {"name": "one-host"}, "egress": {"allow": []}}),
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
    for name in ["closed", "one-host", "narrowed"] {
        let done = harness.wait_for_phase(name, Phase::Succeeded).await;
        let record = harness.result_json(&done, ResultName::RunResult).await;
        let response = record["response"].as_str().unwrap_or_default().to_owned();
        reached.push(response);
    }
    assert_eq!(
        reached[0].lines().collect::<Vec<_>>(),
        NOTHING,
        "an environment that allows nothing: its results were still saved, through errand"
    );
    assert_eq!(
        reached[1].lines().collect::<Vec<_>>(),
        ONLY_THE_ALLOWED,
        "an environment that allows one host and port"
    );
    assert_eq!(
        reached[2], reached[0],
        "an execution that narrows its environment to nothing"
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
    assert_eq!(owners, ["closed", "narrowed", "one-host"]);
    harness.finish().await;
    other.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployments_pods_reach_only_what_its_environment_allows() {
    let Some((harness, other, targets, allow_back)) = set_up("egress-deploy").await else {
        return;
    };
    create_server_agent(&harness, "server").await;
    for (name, environment) in [
        ("closed", json!({})),
        (
            "one-host",
            json!({"egress": {"allow": [{"cidr": allow_back, "ports": [8080]}]}}),
        ),
    ] {
        create_deployment(
            &harness,
            name,
            "server",
            json!({"environment": environment}),
        )
        .await;
    }
    let mut reached = Vec::new();
    for name in ["closed", "one-host"] {
        let deployment = wait_for_phase(&harness, name, DeploymentPhase::Ready, RUN_WAIT).await;
        let uid = deployment.metadata.uid.unwrap();
        let pods = harness
            .api::<Pod>()
            .list(
                &ListParams::default().labels(&format!("{}={uid}", contract::DEPLOYMENT_UID_LABEL)),
            )
            .await
            .unwrap();
        let pod = pods.items[0].metadata.name.clone().unwrap();
        let script = prober_script(&targets);
        let namespace = harness.namespace.name().to_owned();
        let output = tokio::task::spawn_blocking(move || {
            cluster::kubectl(&["-n", &namespace, "exec", &pod, "--", "sh", "-c", &script])
        })
        .await
        .unwrap();
        reached.push(output);
    }
    assert_eq!(
        reached[0].lines().collect::<Vec<_>>(),
        NOTHING,
        "a deployment whose environment allows nothing"
    );
    assert_eq!(
        reached[1].lines().collect::<Vec<_>>(),
        ONLY_THE_ALLOWED,
        "a deployment whose environment allows one address and port"
    );
    harness.finish().await;
    other.delete().await;
}
