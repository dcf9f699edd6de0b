//! Egress of execution pods when the controller denies it by default (`--execution-egress deny`, the chart's default), on the test cluster's enforced NetworkPolicies: an agent whose environment allows nothing reaches none of another namespace's pod, its Service, an address no environment lists and the address another execution's environment allows, and still saves its results; an agent whose environment allows that address reaches it and nothing else, unless its execution narrows the list; a metadata address in an environment is refused naming the field; an AgentDeployment's pods are held to the same. Through errand's egress proxy, a run (and a deployment's pod) reaches the host names its environment lists, by CONNECT and by forwarding, and is refused every other name, port, address and denied resolution; another run, and a caller that is no pod, are refused.

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

/// Headless Service `name` in front of server pod `name`: its DNS name resolves to the pod's
/// own address, which the controller's outbound policy judges (a Service's cluster IP is
/// denied by default).
async fn headless_service(client: &kube::Client, namespace: &TestNamespace, name: &str) -> String {
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"app": name}, "ports": [{"port": 8080}]},
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), namespace.name())
        .create(&PostParams::default(), &service)
        .await
        .expect("creating the headless Service");
    format!("{name}.{}.svc.cluster.local", namespace.name())
}

/// An agent that asks the egress proxy (its `HTTPS_PROXY`, else `proxy`) for each `(name,
/// request)` and prints `name=<last line of the answer>`, then tries `direct` (host, port)
/// without the proxy.
fn proxy_prober_script(proxy: &str, requests: &[(&str, String)], direct: (&str, u16)) -> String {
    let mut script = format!(
        "sleep 2\nP=${{HTTPS_PROXY#http://}}; P=${{P%/}}; P=${{P:-{proxy}}}\n\
         probe() {{ out=$(printf \"$2\" | nc -w 3 ${{P%:*}} ${{P##*:}} 2>/dev/null | tail -n 1); \
         echo \"$1=${{out:-unreachable}}\"; }}\n"
    );
    for (name, request) in requests {
        script.push_str(&format!("probe {name} '{request}'\n"));
    }
    let (host, port) = direct;
    script.push_str(&format!(
        "out=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port} 2>/dev/null | tail -n 1)\n\
         echo \"direct=${{out:-unreachable}}\"\n"
    ));
    script
}

/// A CONNECT to `authority` followed by a GET through the tunnel.
fn tunnel(authority: &str) -> String {
    format!(
        "CONNECT {authority} HTTP/1.1\\r\\nHost: {authority}\\r\\n\\r\\nGET / HTTP/1.0\\r\\n\\r\\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_egress_proxy_a_run_reaches_only_the_host_names_its_environment_lists() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let other = TestNamespace::create(&client, "proxy-other").await;
    let allowed_ip = server_pod(&other, "allowed").await;
    server_pod(&other, "unlisted").await;
    server_pod(&other, "denied").await;
    let allowed = headless_service(&client, &other, "allowed").await;
    let unlisted = headless_service(&client, &other, "unlisted").await;
    let denied = headless_service(&client, &other, "denied").await;
    let proxy = cluster::free_pod_gateway_address();
    let allow_back = format!("{allowed_ip}/32");
    let proxy_url = format!("http://{proxy}");
    let args = [
        "--execution-egress",
        "deny",
        "--outbound-allow",
        &allow_back,
        "--egress-proxy-listen",
        &proxy.to_string(),
        "--egress-proxy-url",
        &proxy_url,
        // This controller runs on the node, whose own resolver knows no cluster names.
        "--egress-proxy-nameserver",
        &format!("{}:53", cluster::dns_service_ip(&client).await),
    ];
    let Some(harness) = Harness::start_with_controller_args("egress-proxy", &args).await else {
        return;
    };
    let requests = [
        ("tunnel", tunnel(&format!("{allowed}:8080"))),
        (
            "forward",
            format!("GET http://{allowed}:8080/ HTTP/1.0\\r\\n\\r\\n"),
        ),
        ("unlisted", tunnel(&format!("{unlisted}:8080"))),
        ("other_port", tunnel(&format!("{allowed}:8081"))),
        ("address", tunnel(&format!("{allowed_ip}:8080"))),
        ("denied_address", tunnel(&format!("{denied}:8080"))),
    ];
    let script = proxy_prober_script(&proxy.to_string(), &requests, (&allowed_ip, 8080));
    harness
        .create_agent("prober", cluster::BUSYBOX_IMAGE, &script)
        .await;
    let hosts = json!([{"host": allowed, "ports": [8080]}, {"host": denied, "ports": [8080]}]);
    harness
        .create_execution(
            "listed",
            "prober",
            json!({"environment": {"egress": {"hosts": hosts}}}),
        )
        .await;
    // Another run of the same namespace, listing nothing: it finds the proxy (the test gives
    // its address) and is refused everything.
    harness
        .create_execution("unlisting", "prober", json!({}))
        .await;
    // A host rule an execution adds to its environment's list is refused at create.
    harness
        .create_execution(
            "widening",
            "prober",
            json!({"environment": {"egress": {"hosts": [{"host": allowed, "ports": [8080]}]}},
                   "egress": {"hosts": [{"host": unlisted, "ports": [8080]}]}}),
        )
        .await;

    let answers = |response: &str| -> Vec<(String, String)> {
        response
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(name, answer)| (name.to_owned(), answer.to_owned()))
            .collect()
    };
    let listed = harness.wait_for_phase("listed", Phase::Succeeded).await;
    let record = harness.result_json(&listed, ResultName::RunResult).await;
    let listed = answers(record["response"].as_str().unwrap_or_default());
    let get = |answers: &[(String, String)], name: &str| {
        answers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.clone())
            .unwrap_or_else(|| panic!("no answer {name} in {answers:?}"))
    };
    assert_eq!(get(&listed, "tunnel"), "allowed", "{listed:?}");
    assert_eq!(get(&listed, "forward"), "allowed", "{listed:?}");
    for (name, says) in [
        ("unlisted", "not in this run's egress.hosts"),
        ("other_port", "not in this run's egress.hosts"),
        ("address", "the proxy reaches host names only"),
        (
            "denied_address",
            "resolves only to addresses runs may not reach",
        ),
    ] {
        let answer = get(&listed, name);
        assert!(
            answer.starts_with("refused") && answer.contains(says),
            "{name}: {answer}"
        );
    }
    assert_eq!(
        get(&listed, "direct"),
        "unreachable",
        "the listed host's address is not reachable without the proxy"
    );

    let unlisting = harness.wait_for_phase("unlisting", Phase::Succeeded).await;
    let record = harness.result_json(&unlisting, ResultName::RunResult).await;
    let unlisting = answers(record["response"].as_str().unwrap_or_default());
    for name in ["tunnel", "forward"] {
        // Refused by the proxy, or kept from it by the run's NetworkPolicy.
        let answer = get(&unlisting, name);
        assert!(
            answer.contains("not in this run's egress.hosts") || answer == "unreachable",
            "a run without hosts, {name}: {answer}"
        );
    }

    let refused = harness
        .wait_for_failure("widening", Phase::Failed, Reason::InvalidSpec)
        .await;
    let message = message_of(&refused);
    assert!(message.contains("spec.egress.hosts[0]"), "{message}");

    // An AgentDeployment's pods are held to the same: its server reaches the listed name
    // through the proxy it finds in its environment, and nothing else.
    create_server_agent(&harness, "server").await;
    let hosts = json!([{"host": allowed, "ports": [8080]}]);
    create_deployment(
        &harness,
        "proxied",
        "server",
        json!({"environment": {"egress": {"hosts": hosts}}}),
    )
    .await;
    let deployment = wait_for_phase(&harness, "proxied", DeploymentPhase::Ready, RUN_WAIT).await;
    let uid = deployment.metadata.uid.unwrap();
    let pods = harness
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{}={uid}", contract::DEPLOYMENT_UID_LABEL)))
        .await
        .unwrap();
    let pod = pods.items[0].metadata.name.clone().unwrap();
    let namespace = harness.namespace.name().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        cluster::kubectl(&["-n", &namespace, "exec", &pod, "--", "sh", "-c", &script])
    })
    .await
    .unwrap();
    let served = answers(&output);
    assert_eq!(get(&served, "tunnel"), "allowed", "{served:?}");
    assert_eq!(get(&served, "forward"), "allowed", "{served:?}");
    assert!(
        get(&served, "unlisted").contains("not in this run's egress.hosts"),
        "{served:?}"
    );
    assert_eq!(get(&served, "direct"), "unreachable", "{served:?}");

    // A caller that is no running errand pod (this test, on the node) is refused.
    let mut stream = tokio::net::TcpStream::connect(proxy).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(
            format!("CONNECT {allowed}:8080 HTTP/1.1\r\nHost: {allowed}:8080\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut head = vec![0; 12];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&head), "HTTP/1.1 403");

    // Every decision is counted.
    let metrics = reqwest::get(format!("{}/metrics", harness.controller_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for decision in [
        "allowed",
        "not_listed",
        "address",
        "denied_address",
        "unknown_caller",
    ] {
        assert!(
            metrics.contains(&format!(
                "errand_controller_egress_proxy_decisions_total{{decision=\"{decision}\"}}"
            )),
            "{decision} in {metrics}"
        );
    }
    harness.finish().await;
    other.delete().await;
}
