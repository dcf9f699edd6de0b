//! Completion webhooks on the real test cluster: an execution created with `errand execute --notify-webhook URL --notify-webhook-secret NAME:KEY` is delivered by the controller, as a signed CloudEvent, to a receiver on the pod bridge (retried after a 500), the delivery is recorded in `status.notify.webhook`, and the signing key appears nowhere but in its Secret; a bad URL is refused by the API server and a missing signing Secret fails the execution as `InvalidSpec`, each naming the field; with the default outbound policy, webhooks to loopback (a "metadata" listener), link-local, a pod's IP and a Service's IP are refused before any connection, recorded as `refused-by-policy` naming no address, and nothing reaches the targets.

use std::time::Duration;

use crate::support::cluster;
use crate::support::errand::wait_for;
use crate::support::harness::{Harness, Mode, RUN_WAIT};
use crate::support::netpol::busybox_pod;
use crate::support::python_clients;
use crate::support::webhook_receiver::Receiver;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::PostParams;
use serde_json::{Value, json};

use errand::api::contract::Reason;
use errand::api::{AgentExecution, DeliveryState, Phase};

/// The signing key, as the Secret holds it.
const KEY: &str = "webhook-signing-key-3b1f9c";

/// The signing Secret `hook` (key `signing`) and the Agent `quick`, which echoes and ends.
async fn create_signing_secret_and_agent(harness: &Harness) {
    harness
        .create(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "hook"},
            "stringData": {"signing": KEY},
        }))
        .await;
    harness
        .create_agent("quick", cluster::BUSYBOX_IMAGE, "echo 96")
        .await;
}

fn delivery_state(execution: &AgentExecution) -> Option<DeliveryState> {
    Some(
        execution
            .status
            .as_ref()?
            .notify
            .as_ref()?
            .webhook
            .as_ref()?
            .state,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_is_delivered_signed_to_its_webhook_and_recorded_in_status() {
    // On the pod bridge: reachable from the controller wherever it runs (this machine or a
    // pod). A private address, so the operator allows it, as for an in-cluster receiver.
    let allow = format!("--outbound-allow={}/32", cluster::POD_GATEWAY);
    let Some(harness) = Harness::start_with_controller_args("notify-webhook", &[&allow]).await
    else {
        return;
    };
    let receiver = Receiver::start(cluster::POD_GATEWAY, &[500, 204]).await;
    create_signing_secret_and_agent(&harness).await;
    let url = receiver.url("/hooks/errand");
    let (code, answer) = harness.cli(&[
        "execute",
        "--agent",
        "quick",
        "--name",
        "told",
        "--notify-webhook",
        &url,
        "--notify-webhook-secret",
        "hook:signing",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["phase"], "Succeeded", "{answer}");
    assert_eq!(
        answer["execution"]["notify"]["webhook"],
        url.as_str(),
        "{answer}"
    );

    let execution = harness
        .wait_for_execution("told", "its webhook delivered", |e| {
            delivery_state(e).is_some_and(|s| s != DeliveryState::Pending)
        })
        .await;
    let uid = execution.metadata.uid.clone().unwrap();
    let spec = execution
        .spec
        .notify
        .as_ref()
        .unwrap()
        .webhook
        .as_ref()
        .unwrap();
    assert_eq!(spec.url, Some(url));
    assert_eq!(spec.signing_secret_ref.name, "hook");
    assert_eq!(spec.signing_secret_ref.key, "signing");
    let status = execution.status.as_ref().unwrap();
    let delivery = status.notify.as_ref().unwrap().webhook.as_ref().unwrap();
    assert_eq!(delivery.state, DeliveryState::Delivered, "{delivery:?}");
    assert_eq!(delivery.attempts, 2, "a 500, then the retry: {delivery:?}");
    assert_eq!(delivery.last_status_code, Some(204));
    assert_eq!(delivery.event_id, format!("{uid}/execution.finished"));
    assert!(delivery.delivered_time.is_some());
    assert_eq!(delivery.next_attempt_time, None);
    assert_eq!(
        status.phase,
        Some(Phase::Succeeded),
        "the delivery leaves the run alone"
    );

    let received = receiver.wait_for(2, Duration::from_secs(5)).await;
    assert_eq!(received.len(), 2, "{received:?}");
    assert_eq!(
        received[0].body, received[1].body,
        "the same bytes on the retry"
    );
    for request in &received {
        request.assert_signed_cloudevent("/hooks/errand", KEY.as_bytes());
    }
    let event: Value = serde_json::from_slice(&received[1].body).unwrap();
    let namespace = harness.namespace.name();
    // A receiver errand did not write: the official CloudEvents Python SDK reads the delivery,
    // and Python's own hmac checks its signature (and refuses a body changed on the way).
    let body = String::from_utf8(received[1].body.clone()).unwrap();
    let headers = json!({
        "content-type": received[1].content_type,
        "x-errand-signature": received[1].signature,
    });
    let read = python_clients::read_cloudevents(&json!([
        {"headers": headers, "body": body, "key": KEY},
        {"headers": headers, "body": body.replace("told", "tolD"), "key": KEY},
    ]));
    assert!(
        read[0].get("error").is_none(),
        "the SDK refused it: {read:?}"
    );
    assert_eq!(read[0]["signature"], "valid", "{read:?}");
    assert_eq!(read[1]["signature"], "invalid", "{read:?}");
    assert_eq!(read[0]["attributes"]["id"], event["id"], "{read:?}");
    assert_eq!(
        read[0]["attributes"]["type"],
        "dev.errand.execution.finished"
    );
    assert_eq!(read[0]["attributes"]["subject"], "told");
    assert_eq!(read[0]["data"], event["data"], "{read:?}");
    assert_eq!(event["specversion"], "1.0");
    assert_eq!(event["id"], format!("{uid}/execution.finished"));
    assert_eq!(event["type"], "dev.errand.execution.finished");
    assert_eq!(
        event["source"],
        format!("/apis/errand.dev/v1alpha1/namespaces/{namespace}/agentexecutions")
    );
    assert_eq!(event["subject"], "told");
    assert_eq!(event["datacontenttype"], "application/json");
    let completion = status.completion_time.as_ref().unwrap().0.to_string();
    assert_eq!(event["time"], completion.as_str());
    assert_eq!(
        event["data"],
        json!({
            "type": "execution.finished",
            "time": completion,
            "execution": "told",
            "namespace": namespace,
            "uid": uid,
            "phase": "Succeeded",
            "reason": "Succeeded",
            "exit_code": 0,
        })
    );

    // The key is only in its Secret: not in the execution, its snapshot or the controller's log.
    let snapshot = harness
        .api::<ConfigMap>()
        .get(&status.snapshot.as_ref().unwrap().config_map)
        .await
        .unwrap();
    for (what, text) in [
        ("execution", serde_json::to_string(&execution).unwrap()),
        ("snapshot", serde_json::to_string(&snapshot).unwrap()),
        ("controller log", harness.controller_log()),
        ("answer", answer.to_string()),
    ] {
        assert!(!text.contains(KEY), "the signing key is in the {what}");
    }
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_webhook_is_refused_naming_the_field() {
    let Some(harness) = Harness::start("notify-refused", Mode::WithPods).await else {
        return;
    };
    harness
        .create_agent("quick", cluster::BUSYBOX_IMAGE, "echo 96")
        .await;
    let execution = |name: &str, url: &str| {
        serde_json::from_value::<AgentExecution>(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution",
            "metadata": {"name": name},
            "spec": {
                "agentRef": {"name": "quick"},
                "notify": {"webhook": {"url": url,
                    "signingSecretRef": {"name": "absent", "key": "signing"}}},
            },
        }))
        .unwrap()
    };
    // The API server's own rule (CEL in the CRD).
    let refused = harness
        .api::<AgentExecution>()
        .create(
            &Default::default(),
            &execution("ftp", "ftp://hooks.example/x"),
        )
        .await
        .expect_err("an ftp:// webhook is refused");
    let message = refused.to_string();
    assert!(
        message.contains("spec.notify.webhook.url") && message.contains("https:// or http://"),
        "{message}"
    );
    // A Secret that does not exist: the controller's re-check fails the run before any Job.
    harness
        .api::<AgentExecution>()
        .create(
            &Default::default(),
            &execution("unsigned", "https://hooks.example/x"),
        )
        .await
        .unwrap();
    let failed = harness
        .wait_for_failure("unsigned", Phase::Failed, Reason::InvalidSpec)
        .await;
    let message = failed.status.unwrap().message.unwrap_or_default();
    assert!(
        message.contains("spec.notify.webhook.signingSecretRef.name: Secret \"absent\" not found"),
        "{message}"
    );
    assert!(harness.has_no_children().await);
    harness.finish().await;
}

/// A pod that prints every connection it gets to its log (so a test sees whether anything
/// reached it), listening on `port`; its IP once it runs.
async fn start_listening_pod(harness: &Harness, name: &str, port: u16) -> String {
    let script = format!("while true; do nc -l -p {port}; sleep 1; done");
    let pods = harness.api::<Pod>();
    pods.create(
        &PostParams::default(),
        &busybox_pod(name, &[("app", name)], &script),
    )
    .await
    .expect("creating the listening pod");
    wait_for("the listening pod to run", RUN_WAIT, || async {
        let status = pods.get(name).await.ok()?.status?;
        (status.phase.as_deref() == Some("Running"))
            .then_some(status.pod_ip)
            .flatten()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_to_internal_addresses_are_refused_naming_no_address() {
    // The controller's default outbound policy: nothing allowed beyond the public internet.
    let Some(harness) = Harness::start("notify-ssrf", Mode::WithPods).await else {
        return;
    };
    let metadata = Receiver::start("127.0.0.1", &[200]).await;
    let pod_ip = start_listening_pod(&harness, "internal", 8080).await;
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "internal"},
        "spec": {"selector": {"app": "internal"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    let service = harness
        .api::<Service>()
        .create(&PostParams::default(), &service)
        .await
        .expect("creating the Service");
    let service_ip = service.spec.unwrap().cluster_ip.unwrap();
    create_signing_secret_and_agent(&harness).await;
    let targets = [
        ("loopback", metadata.url("/latest/meta-data/iam")),
        (
            "link-local",
            "http://169.254.169.254/latest/meta-data/iam".to_owned(),
        ),
        ("pod-ip", format!("http://{pod_ip}:8080/quitquitquit")),
        ("service-ip", format!("http://{service_ip}/quitquitquit")),
    ];
    for (name, url) in &targets {
        harness
            .create_execution(
                name,
                "quick",
                json!({"notify": {"webhook": {"url": url,
                    "signingSecretRef": {"name": "hook", "key": "signing"}}}}),
            )
            .await;
    }
    for (name, url) in &targets {
        let execution = harness
            .wait_for_execution(name, "its webhook given up", |e| {
                delivery_state(e).is_some_and(|s| s != DeliveryState::Pending)
            })
            .await;
        let status = execution.status.as_ref().unwrap();
        assert_eq!(status.phase, Some(Phase::Succeeded), "{name}");
        let delivery = status.notify.as_ref().unwrap().webhook.as_ref().unwrap();
        assert_eq!(
            delivery.state,
            DeliveryState::Failed,
            "{name}: {delivery:?}"
        );
        assert_eq!(delivery.attempts, 1, "{name}: not retried: {delivery:?}");
        assert_eq!(delivery.last_status_code, None, "{name}");
        let error = delivery.last_error.as_deref().unwrap_or_default();
        assert!(error.starts_with("refused-by-policy: "), "{name}: {error}");
        let host = url::Url::parse(url).unwrap();
        let host = host.host_str().unwrap();
        let status_text = serde_json::to_string(status).unwrap();
        for detail in [host, "os error", "127.0.0.1", "169.254"] {
            assert!(
                !status_text.contains(detail),
                "{name}: the status names {detail:?}: {status_text}"
            );
        }
    }
    assert_eq!(metadata.received().len(), 0, "nothing reached loopback");
    let reached =
        cluster::pod_logs(&harness.client, harness.namespace.name(), "internal", None).await;
    assert!(
        !reached.contains("POST"),
        "nothing reached the pod, directly or through its Service: {reached}"
    );
    harness.finish().await;
}
