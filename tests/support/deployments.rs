//! AgentDeployments of the test agent server for the cluster tests and the gateway benchmark: the Agent, the deployment, waiting for its phase, its pod, and callers' tokens with or without the right to invoke.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use errand::api::contract::DEPLOYMENT_UID_LABEL;
use errand::api::{AgentDeployment, DeploymentPhase};

use super::errand::wait_for;
use super::harness::{Harness, RUN_WAIT};

/// The test agent server (`hack/images/agent-server.sh`), imported by `hack/testenv/up.sh`.
pub const AGENT_SERVER_IMAGE: &str = "errand.local/agent-server:test";

/// An Agent `name` serving with the test agent server.
pub async fn create_server_agent(harness: &Harness, name: &str) {
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name},
            "spec": {
                "runtime": {
                    "image": AGENT_SERVER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/usr/local/bin/agent-server"],
                },
                "config": {"config_format": "agents-spec-v1", "name": name},
            },
        }))
        .await;
}

/// An AgentDeployment `name` of Agent `agent` with `extra` fields in its spec; readiness is
/// probed every 5 s and one failed probe makes a pod unready.
pub async fn create_deployment(harness: &Harness, name: &str, agent: &str, extra: Value) {
    let mut spec = json!({
        "agentRef": {"name": agent},
        "readiness": {"failureThreshold": 1},
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentDeployment",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .await;
}

/// Waits until deployment `name` satisfies `check`, returning it.
pub async fn wait_for_deployment(
    harness: &Harness,
    name: &str,
    what: &str,
    limit: Duration,
    check: impl Fn(&AgentDeployment) -> bool,
) -> AgentDeployment {
    let api: Api<AgentDeployment> = harness.api();
    wait_for(&format!("{name}: {what}"), limit, || {
        let api = api.clone();
        let check = &check;
        async move {
            let deployment = api.get(name).await.ok()?;
            check(&deployment).then_some(deployment)
        }
    })
    .await
}

/// Waits until deployment `name` is in `phase`.
pub async fn wait_for_phase(
    harness: &Harness,
    name: &str,
    wanted: DeploymentPhase,
    limit: Duration,
) -> AgentDeployment {
    wait_for_deployment(harness, name, wanted.as_str(), limit, |d| {
        phase(d) == Some(wanted)
    })
    .await
}

/// The deployment's phase.
pub fn phase(deployment: &AgentDeployment) -> Option<DeploymentPhase> {
    deployment.status.as_ref()?.phase
}

/// When its current Starting period began.
pub fn starting_since(deployment: &AgentDeployment) -> Option<Timestamp> {
    Some(deployment.status.as_ref()?.starting_since.as_ref()?.0)
}

/// The IP of the deployment's running pod (one replica).
pub async fn pod_ip(harness: &Harness, deployment: &AgentDeployment) -> String {
    let pods: Api<Pod> = harness.api();
    let selector = format!("{DEPLOYMENT_UID_LABEL}={}", deployment.uid().unwrap());
    wait_for("the deployment's pod to have an IP", RUN_WAIT, || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?;
            list.items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .find_map(|p| p.status.as_ref()?.pod_ip.clone())
        }
    })
    .await
}

/// A ServiceAccount `name` in the harness's namespace and a token of it.
pub async fn token_of(harness: &Harness, name: &str) -> String {
    harness
        .create(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}))
        .await;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let api: Api<ServiceAccount> = harness.api();
    let issued: TokenRequest = api
        .create_subresource("token", name, &PostParams::default(), &request)
        .await
        .expect("a token");
    issued.status.expect("a token status").token
}

/// A Role allowing `create` on `agentdeployments/invoke`, bound to ServiceAccount `subject`.
pub async fn allow_invoke(harness: &Harness, subject: &str) {
    harness
        .create(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "invoke"},
            "rules": [{"apiGroups": ["errand.dev"], "resources": ["agentdeployments/invoke"], "verbs": ["create"]}],
        }))
        .await;
    harness
        .create(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "invoke"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "invoke"},
            "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": harness.namespace.name()}],
        }))
        .await;
}

/// Sends a request to the gateway and returns the status and the body as JSON (or text).
pub async fn call(
    harness: &Harness,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    try_call(harness, method, path, token, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// [`call`], with a gateway that may not listen (yet): `Err` when it does not answer.
pub async fn try_call(
    harness: &Harness,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Result<(u16, Value), reqwest::Error> {
    let url = format!(
        "{}/v1/namespaces/{}/{path}",
        harness.gateway_url(),
        harness.namespace.name()
    );
    let client = reqwest::Client::new();
    let mut request = match method {
        "GET" => client.get(&url),
        _ => client.post(&url),
    };
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await?;
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((status, body))
}
