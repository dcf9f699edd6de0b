//! Tenants cannot get round errand's authorization on the test cluster, which enforces NetworkPolicies: a pod of another namespace (or of the deployment's own) cannot call an AgentDeployment's pods, by pod IP or Service, while the gateway still serves it, and the deployment's own NetworkPolicy is what refuses them; through the gateway, a caller cannot list, read or continue another caller's chat session; the chart's NetworkPolicy refuses stranger pods the controller's admission port and lets only execution pods reach its grant port; an agent server that answers with a redirect to a "metadata" listener on loopback gets its caller a 502 naming no target, and the gateway never calls the target.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::support::cluster::{self, DEFAULT_TIMEOUT, TestNamespace};
use crate::support::deployments::{
    AGENT_SERVER_IMAGE, allow_invoke, call, create_deployment, create_server_agent, pod_ip,
    token_of, wait_for_phase,
};
use crate::support::errand::wait_for;
use crate::support::harness::{Harness, RUN_WAIT};
use crate::support::netpol::{busybox_pod, client_reaches, create_policy};
use crate::support::webhook_receiver::Receiver;
use errand::api::DeploymentPhase;

/// The agent server's port in its pod, and the Service's.
const AGENT_PORT: u16 = 8000;
const SERVICE_PORT: u16 = 80;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_cannot_call_a_deployment_past_the_gateway() {
    let Some(harness) = Harness::start_with_gateway("iso-deploy").await else {
        return;
    };
    let caller = token_of(&harness, "caller").await;
    let other = token_of(&harness, "other").await;
    allow_invoke(&harness, "caller").await;
    harness
        .create(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "invoke-other"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "invoke"},
            "subjects": [{"kind": "ServiceAccount", "name": "other", "namespace": harness.namespace.name()}],
        }))
        .await;
    create_server_agent(&harness, "echo").await;
    create_deployment(&harness, "echo", "echo", json!({})).await;
    let ready = wait_for_phase(&harness, "echo", DeploymentPhase::Ready, RUN_WAIT).await;

    // The deployment's NetworkPolicy, owned by it (so deleted with it).
    let policies = harness.api::<NetworkPolicy>();
    let policy = policies
        .get("errand-echo")
        .await
        .expect("the deployment's NetworkPolicy");
    let owner = &policy.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), Some(owner.uid.as_str())),
        ("AgentDeployment", ready.uid().as_deref())
    );

    let pod = pod_ip(&harness, &ready).await;
    let service: Service = harness.api().get("errand-echo").await.unwrap();
    let service_ip = service.spec.unwrap().cluster_ip.unwrap();
    let stranger = TestNamespace::create(&harness.client, "iso-stranger").await;
    assert_eq!(
        client_reaches(&harness.client, &stranger, "to-pod", &[], &pod, AGENT_PORT).await,
        None,
        "a pod of another namespace must not reach the agent's pod"
    );
    assert_eq!(
        client_reaches(
            &harness.client,
            &stranger,
            "to-service",
            &[],
            &service_ip,
            SERVICE_PORT
        )
        .await,
        None,
        "nor its Service"
    );
    let dns = format!("errand-echo.{}.svc", harness.namespace.name());
    assert_eq!(
        client_reaches(
            &harness.client,
            &harness.namespace,
            "neighbour",
            &[],
            &dns,
            SERVICE_PORT
        )
        .await,
        None,
        "a pod of the deployment's own namespace is refused too"
    );

    // The gateway still serves the deployment.
    let token = Some(caller.as_str());
    let answer = wait_for("the gateway to serve echo", Duration::from_secs(30), || {
        let harness = &harness;
        async move {
            let (status, body) = call(
                harness,
                "POST",
                "deployments/echo/invoke",
                token,
                Some(json!({"input": "hello"})),
            )
            .await;
            (status == 200).then_some(body)
        }
    })
    .await;
    assert_eq!(answer["output"], "echo: hello");

    // Sessions are their caller's: user B cannot list, read or continue user A's.
    let chat = |token: &str, message: &str| {
        let (harness, token, message) = (&harness, token.to_owned(), message.to_owned());
        async move {
            call(
                harness,
                "POST",
                "deployments/echo/chat",
                Some(&token),
                Some(json!({"session": "s1", "message": message})),
            )
            .await
        }
    };
    let (status, reply) = chat(&caller, "my secret plan").await;
    assert_eq!((status, &reply["turn"]), (200, &json!(1)), "{reply}");
    let other_token = Some(other.as_str());
    let (status, listed) = call(
        &harness,
        "GET",
        "deployments/echo/sessions",
        other_token,
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["sessions"],
        json!([]),
        "B lists none of A's sessions"
    );
    let (status, read) = call(
        &harness,
        "GET",
        "deployments/echo/sessions/s1",
        other_token,
        None,
    )
    .await;
    assert_eq!(
        status, 404,
        "A's session is, to B, one that does not exist: {read}"
    );
    let (_, never) = call(
        &harness,
        "GET",
        "deployments/echo/sessions/never-used",
        other_token,
        None,
    )
    .await;
    assert_eq!(
        read["error"]["type"], never["error"]["type"],
        "the refusal does not tell A's session from one never used"
    );
    let (status, reply) = chat(&other, "hello?").await;
    assert_eq!(
        (status, &reply["turn"]),
        (200, &json!(1)),
        "B's message to s1 starts B's own session, it does not append to A's: {reply}"
    );
    let (_, mine) = call(&harness, "GET", "deployments/echo/sessions/s1", token, None).await;
    let turns = mine["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 1, "{mine}");
    assert_eq!(turns[0]["user"], "my secret plan");

    // The policy is what refused them: without it the stranger gets an answer.
    policies
        .delete("errand-echo", &DeleteParams::default())
        .await
        .expect("deleting the deployment's NetworkPolicy");
    assert!(
        client_reaches(
            &harness.client,
            &stranger,
            "unprotected",
            &[],
            &pod,
            AGENT_PORT
        )
        .await
        .is_some(),
        "without its NetworkPolicy the agent's pod answers anyone: the refusals above were the policy's"
    );
    stranger.delete().await;
}

/// The chart's NetworkPolicy of the controller's pods, rendered for release `errand` in
/// `namespace` as an install renders it.
fn chart_policy(namespace: &str) -> Value {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/errand");
    let output = Command::new("helm")
        .args(["template", "errand"])
        .arg(&chart)
        .args(["--namespace", namespace])
        .args(["--show-only", "templates/controller/networkpolicy.yaml"])
        .output()
        .unwrap_or_else(|e| panic!("running helm (hack/test.sh puts it on PATH): {e}"));
    assert!(
        output.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_saphyr::from_str(&String::from_utf8(output.stdout).unwrap()).expect("one NetworkPolicy")
}

/// A stand-in for the controller's pod: the chart's pod labels, busybox httpd on the
/// webhook's port (9443) and the grant port (8080); its IP once it runs.
async fn start_controller_stand_in(ns: &TestNamespace) -> String {
    let pods = ns.api::<Pod>();
    let script = "mkdir -p /tmp/www && echo listener >/tmp/www/index.html && \
                  httpd -p 9443 -h /tmp/www && exec httpd -f -p 8080 -h /tmp/www";
    let labels = [
        ("app.kubernetes.io/name", "errand"),
        ("app.kubernetes.io/instance", "errand"),
        ("app.kubernetes.io/component", "controller"),
    ];
    pods.create(
        &PostParams::default(),
        &busybox_pod("controller", &labels, script),
    )
    .await
    .expect("creating the stand-in controller pod");
    wait_for(
        "the stand-in controller to run",
        DEFAULT_TIMEOUT,
        || async {
            let status = pods.get("controller").await.ok()?.status?;
            (status.phase.as_deref() == Some("Running"))
                .then_some(status.pod_ip)
                .flatten()
        },
    )
    .await
}

#[tokio::test]
async fn the_charts_policy_keeps_stranger_pods_off_admission_and_grants() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let release = TestNamespace::create(&client, "iso-release").await;
    let stranger = TestNamespace::create(&client, "iso-tenant").await;
    let controller = start_controller_stand_in(&release).await;
    assert!(
        client_reaches(&client, &stranger, "before", &[], &controller, 9443)
            .await
            .is_some(),
        "without the chart's policy the listener answers anyone"
    );
    create_policy(&release.api(), chart_policy(release.name())).await;

    assert_eq!(
        client_reaches(&client, &stranger, "to-admission", &[], &controller, 9443).await,
        None,
        "a tenant's pod must not reach the admission endpoint"
    );
    assert_eq!(
        client_reaches(&client, &stranger, "to-grants", &[], &controller, 8080).await,
        None,
        "nor, unless it is an execution's pod, the grant endpoint"
    );
    let execution = [("errand.dev/execution", "run-1")];
    assert_eq!(
        client_reaches(
            &client,
            &stranger,
            "run-grants",
            &execution,
            &controller,
            8080
        )
        .await
        .as_deref(),
        Some("listener"),
        "an execution's pod reaches its grants"
    );
    assert_eq!(
        client_reaches(
            &client,
            &stranger,
            "run-admission",
            &execution,
            &controller,
            9443
        )
        .await,
        None,
        "but not the admission endpoint"
    );
    stranger.delete().await;
    release.delete().await;
}

/// The request handler of a hostile agent server (busybox sh, one process per connection):
/// ready on `/health`, and every other request answered with a redirect to `TARGET`.
const REDIRECTING_HANDLER: &str = r#"cr=$(printf '\r')
read -r method path _version || exit 0
length=0
while IFS= read -r line; do
  line=${line%"$cr"}
  [ -z "$line" ] && break
  case "$line" in [Cc]ontent-[Ll]ength:*) length=$(printf '%s' "${line#*:}" | tr -dc 0-9) ;; esac
done
if [ "${length:-0}" -gt 0 ]; then head -c "$length" >/dev/null; fi
if [ "$path" = /health ]; then
  printf 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok'
else
  printf 'HTTP/1.1 302 Found\r\nLocation: TARGET\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'
fi"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirecting_agent_server_gets_a_502_not_the_metadata() {
    let Some(harness) = Harness::start_with_gateway("iso-redirect").await else {
        return;
    };
    // The "metadata" endpoint, on loopback where the gateway runs.
    let metadata = Receiver::start("127.0.0.1", &[200]).await;
    let target = metadata.url("/latest/meta-data/iam/security-credentials/node");
    let caller = token_of(&harness, "caller").await;
    allow_invoke(&harness, "caller").await;
    let handler = REDIRECTING_HANDLER.replace("TARGET", &target);
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": "redirector"},
            "spec": {
                "runtime": {
                    "image": AGENT_SERVER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c",
                        "exec busybox nc -ll -p \"${ERRAND_PORT:-8000}\" -e sh -c \"$0\"",
                        handler],
                },
                "config": {"config_format": "agents-spec-v1", "name": "redirector"},
            },
        }))
        .await;
    create_deployment(&harness, "redirector", "redirector", json!({})).await;
    wait_for_phase(&harness, "redirector", DeploymentPhase::Ready, RUN_WAIT).await;

    let token = Some(caller.as_str());
    for (route, body) in [
        ("invoke", json!({"input": "hello"})),
        ("chat", json!({"session": "s1", "message": "hello"})),
    ] {
        let path = format!("deployments/redirector/{route}");
        let (status, answer) = wait_for(
            &format!("the gateway to answer {route}"),
            Duration::from_secs(30),
            || {
                let (harness, path, body) = (&harness, &path, body.clone());
                async move {
                    let (status, answer) = call(harness, "POST", path, token, Some(body)).await;
                    (status != 503).then_some((status, answer))
                }
            },
        )
        .await;
        assert_eq!(status, 502, "{route}: {answer}");
        let text = answer.to_string();
        assert!(
            !text.contains("127.0.0.1") && !text.contains("meta-data"),
            "{route}: the 502 names the redirect's target: {text}"
        );
    }
    assert_eq!(
        metadata.received().len(),
        0,
        "the gateway never followed the redirect"
    );
}
