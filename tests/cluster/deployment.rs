//! AgentDeployments on the test cluster: a deployment becomes Ready and serves from its pod, a never-ready one fails when its starting window closes, and the window rules hold with a real readiness probe (readiness lost and recovered, a controller restart while Starting).
//!
//! The agent server is `hack/images/agent-server.sh` in the image
//! `errand.local/agent-server:test` that `hack/testenv/up.sh` imports into the node.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::support::deployments::{
    create_deployment, create_server_agent, phase, pod_ip, starting_since, wait_for_deployment,
};
use crate::support::harness::{Harness, Mode, RUN_WAIT};
use errand::api::contract::ConditionType;
use errand::api::{AgentDeployment, DeploymentPhase};
use errand::resolve::conditions;

/// POSTs `body` to `path` of the agent server at `ip` (the host reaches pods on the bridge).
async fn post(ip: &str, path: &str, body: Value) -> Value {
    let answer = reqwest::Client::new()
        .post(format!("http://{ip}:8000{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    serde_json::from_slice(&answer).unwrap_or_else(|e| panic!("POST {path}: not JSON: {e}"))
}

#[tokio::test]
async fn a_deployment_becomes_ready_with_owned_children_and_serves() {
    let Some(harness) = Harness::start("deploy-ready", Mode::WithoutPods).await else {
        return;
    };
    create_server_agent(&harness, "echo").await;
    create_deployment(&harness, "echo", "echo", json!({})).await;
    let ready = wait_for_deployment(&harness, "echo", "Ready", RUN_WAIT, |d| {
        phase(d) == Some(DeploymentPhase::Ready)
    })
    .await;
    let status = ready.status.clone().unwrap();
    assert_eq!((status.ready_replicas, status.replicas), (1, 1));
    assert_eq!(status.agent.as_deref(), Some("echo"));
    assert_eq!(status.observed_generation, ready.metadata.generation);
    let address = format!("http://errand-echo.{}.svc", harness.namespace.name());
    assert_eq!(status.address.as_deref(), Some(address.as_str()));
    assert_eq!(status.starting_since, None);
    let ready_condition = conditions::get(&status.conditions, ConditionType::Ready).unwrap();
    assert_eq!(ready_condition.status, "True");

    // Children: all owned by the deployment, the snapshot's digest as recorded.
    let snapshot = status.snapshot.clone().unwrap();
    let config_map: ConfigMap = harness.api().get(&snapshot.config_map).await.unwrap();
    let workload: Deployment = harness.api().get("errand-echo").await.unwrap();
    let service: Service = harness.api().get("errand-echo").await.unwrap();
    for owners in [
        config_map.owner_references(),
        workload.owner_references(),
        service.owner_references(),
    ] {
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, ready.uid().unwrap());
        assert_eq!(owners[0].controller, Some(true));
    }
    assert_eq!(
        config_map.annotations().get("errand.dev/snapshot-digest"),
        Some(&snapshot.digest)
    );
    assert_eq!(
        service.spec.as_ref().unwrap().type_.as_deref(),
        Some("ClusterIP")
    );
    let managers: Vec<_> = workload
        .managed_fields()
        .iter()
        .filter_map(|f| Some((f.manager.clone()?, f.operation.clone()?)))
        .collect();
    assert!(
        managers.contains(&("errand-controller".to_owned(), "Apply".to_owned())),
        "the Deployment is applied server-side: {managers:?}"
    );

    // The pod serves the agent of the snapshot: its name comes from AGENT_CONFIG_PATH.
    let ip = pod_ip(&harness, &ready).await;
    let answer = post(&ip, "/invoke", json!({"input": "hello"})).await;
    assert_eq!(answer["output"], "echo: hello", "{answer}");
    harness.finish().await;
}

#[tokio::test]
async fn a_never_ready_agent_fails_when_its_starting_window_closes() {
    let Some(harness) = Harness::start("deploy-never", Mode::WithoutPods).await else {
        return;
    };
    create_server_agent(&harness, "stuck").await;
    create_deployment(
        &harness,
        "stuck",
        "stuck",
        json!({
            "startingTimeoutSeconds": 20,
            "environment": {"overlay": {"env": {"AGENT_SERVER_NEVER_READY": "1"}}},
        }),
    )
    .await;
    let starting = wait_for_deployment(&harness, "stuck", "Starting", RUN_WAIT, |d| {
        phase(d) == Some(DeploymentPhase::Starting)
    })
    .await;
    let since = starting_since(&starting).expect("a Starting deployment records its window");
    let failed = wait_for_deployment(&harness, "stuck", "Failed", RUN_WAIT, |d| {
        phase(d) == Some(DeploymentPhase::Failed)
    })
    .await;
    let status = failed.status.clone().unwrap();
    let condition = conditions::get(&status.conditions, ConditionType::Failed).unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "StartingTimeout")
    );
    let failed_at = condition.last_transition_time.0;
    let waited = failed_at.duration_since(since).as_secs();
    assert!(
        (20..=30).contains(&waited),
        "failed {waited}s after its window opened, with a 20 s window"
    );
    assert_eq!(starting_since(&failed), Some(since));
    harness.finish().await;
}

#[tokio::test]
async fn readiness_lost_after_ready_opens_a_fresh_window_and_recovering_ends_it() {
    let Some(mut harness) = Harness::start("deploy-window", Mode::WithoutPods).await else {
        return;
    };
    create_server_agent(&harness, "flaky").await;
    // 30 s of window. Two unready periods of ~15-20 s each add up to more than that, and the
    // deployment still does not fail: only an uninterrupted Starting period counts.
    create_deployment(
        &harness,
        "flaky",
        "flaky",
        json!({"startingTimeoutSeconds": 30}),
    )
    .await;
    let is = |wanted: DeploymentPhase| move |d: &AgentDeployment| phase(d) == Some(wanted);
    let ready = wait_for_deployment(
        &harness,
        "flaky",
        "Ready",
        RUN_WAIT,
        is(DeploymentPhase::Ready),
    )
    .await;
    let ip = pod_ip(&harness, &ready).await;
    let mut windows = Vec::new();
    for period in 0..2 {
        let lost_at = Timestamp::now();
        post(&ip, "/admin/unready", json!({})).await;
        let starting = wait_for_deployment(
            &harness,
            "flaky",
            "Starting after losing readiness",
            Duration::from_secs(25),
            is(DeploymentPhase::Starting),
        )
        .await;
        let since = starting_since(&starting).unwrap();
        assert!(
            since
                >= lost_at
                    .checked_sub(jiff::SignedDuration::from_secs(1))
                    .unwrap(),
            "period {period}: a fresh window opens when readiness is lost ({since} before {lost_at})"
        );
        if period == 0 {
            // A controller restart while Starting re-reads the window, it does not reopen it.
            harness.kill_controller().await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            harness.start_controller().await;
        }
        tokio::time::sleep(Duration::from_secs(12)).await;
        let still = harness.api::<AgentDeployment>().get("flaky").await.unwrap();
        assert_eq!(phase(&still), Some(DeploymentPhase::Starting));
        assert_eq!(
            starting_since(&still),
            Some(since),
            "period {period}: status writes while Starting keep the window"
        );
        windows.push(since);
        post(&ip, "/admin/ready", json!({})).await;
        let recovered = wait_for_deployment(
            &harness,
            "flaky",
            "Ready again",
            Duration::from_secs(25),
            is(DeploymentPhase::Ready),
        )
        .await;
        assert_eq!(
            starting_since(&recovered),
            None,
            "recovering ends the window"
        );
    }
    assert!(windows[1] > windows[0]);
    // Left unready, it fails 30 s after its last window opened.
    post(&ip, "/admin/unready", json!({})).await;
    let starting = wait_for_deployment(
        &harness,
        "flaky",
        "Starting a third time",
        Duration::from_secs(25),
        is(DeploymentPhase::Starting),
    )
    .await;
    let since = starting_since(&starting).unwrap();
    let failed = wait_for_deployment(
        &harness,
        "flaky",
        "Failed",
        Duration::from_secs(60),
        is(DeploymentPhase::Failed),
    )
    .await;
    let status = failed.status.unwrap();
    let condition = conditions::get(&status.conditions, ConditionType::Failed).unwrap();
    let waited = condition
        .last_transition_time
        .0
        .duration_since(since)
        .as_secs();
    assert!(
        (30..=40).contains(&waited),
        "failed {waited}s after the last window opened"
    );
    harness.finish().await;
}

/// A status decided on a stale read is not written: the write carries the read's
/// `resourceVersion`, and the API server refuses it once the object has moved on (what kept
/// a lagging cache from moving a recorded `startingSince`). No controller serves this
/// namespace, so only this test writes.
#[tokio::test]
async fn a_status_decided_on_a_stale_read_is_not_written() {
    use errand::api::AgentDeploymentStatus;
    use errand::controller::status_write::{Written, write_status};
    use kube::api::PostParams;

    let Some(client) = crate::support::cluster::client().await else {
        return;
    };
    crate::support::errand::install_crds(&client).await;
    let namespace = crate::support::cluster::TestNamespace::create(&client, "stale-write").await;
    let api = namespace.api::<AgentDeployment>();
    let deployment: AgentDeployment = serde_json::from_value(json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentDeployment",
        "metadata": {"name": "stale"},
        "spec": {"agentRef": {"name": "nobody"}},
    }))
    .unwrap();
    let read = api
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let status = |message: &str| AgentDeploymentStatus {
        message: Some(message.to_owned()),
        ..AgentDeploymentStatus::default()
    };
    let first = status("first");
    assert_eq!(
        write_status(&api, &read, None, &first).await.unwrap(),
        Written::Done
    );
    // The same read, now stale: the second decision is refused, the first stays.
    assert_eq!(
        write_status(&api, &read, None, &status("second"))
            .await
            .unwrap(),
        Written::Stale
    );
    let current = api.get("stale").await.unwrap();
    assert_eq!(
        current.status.and_then(|s| s.message).as_deref(),
        Some("first")
    );
    // A fresh read writes.
    let fresh = api.get("stale").await.unwrap();
    assert_eq!(
        write_status(&api, &fresh, fresh.status.as_ref(), &status("third"))
            .await
            .unwrap(),
        Written::Done
    );
    namespace.delete().await;
}
