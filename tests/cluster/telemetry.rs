//! Auto telemetry on the cluster against a real OpenTelemetry Collector running as a Pod behind a Service: the controller gets `--otlp-endpoint` (as the chart's `telemetry.otlpEndpoint` passes it), an `autoTelemetry` execution's stage, run and upload spans and its agent's own span land in the execution's trace, and an execution without `autoTelemetry` injects and sends nothing.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::support::cluster::{self, BUSYBOX_IMAGE, TestNamespace};
use crate::support::harness::Harness;
use crate::support::telemetry::{
    AGENT_SCRIPT, ExpectedExecution, OTELCOL_IMAGE_ENV, assert_execution_trace, collector_config,
    parse_spans, trace_id_of,
};
use errand::api::{AgentExecution, Phase};
use errand::store::keys::ResultName;

/// The collector's OTLP/HTTP port.
const OTLP_PORT: u16 = 4318;
/// The port the reader container serves the collector's output on.
const READER_PORT: u16 = 8080;

/// The collector Pod (OTLP receiver, file exporter into a shared `emptyDir`) with a busybox
/// `httpd` beside it serving that file, and a Service for the OTLP port; returns the Pod's
/// address, where the test reads the file, and the Service's cluster IP.
async fn start_collector(namespace: &TestNamespace) -> (String, String) {
    let image = std::env::var(OTELCOL_IMAGE_ENV).unwrap_or_else(|_| {
        panic!("{OTELCOL_IMAGE_ENV} is not set: hack/test.sh sets it to the collector image it imported")
    });
    let create = PostParams::default();
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "otelcol"},
        "data": {"config.yaml": collector_config(&format!("0.0.0.0:{OTLP_PORT}"), "/data/traces.jsonl")},
    }))
    .unwrap();
    namespace
        .api::<ConfigMap>()
        .create(&create, &config_map)
        .await
        .unwrap();
    let restricted = json!({
        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "otelcol", "labels": {"app": "otelcol"}},
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [
                {"name": "otelcol", "image": image, "imagePullPolicy": "Never",
                 "args": ["--config=file:/etc/otelcol/config.yaml"],
                 "ports": [{"containerPort": OTLP_PORT}],
                 "readinessProbe": {"tcpSocket": {"port": OTLP_PORT}, "periodSeconds": 1},
                 "securityContext": restricted,
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/otelcol"},
                                  {"name": "data", "mountPath": "/data"}]},
                {"name": "reader", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                 "command": ["httpd", "-f", "-p", READER_PORT.to_string(), "-h", "/data"],
                 "securityContext": restricted,
                 "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}]},
            ],
            "volumes": [{"name": "config", "configMap": {"name": "otelcol"}},
                        {"name": "data", "emptyDir": {}}],
        },
    }))
    .unwrap();
    namespace.api::<Pod>().create(&create, &pod).await.unwrap();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "otelcol"},
        "spec": {"selector": {"app": "otelcol"}, "ports": [{"port": OTLP_PORT, "targetPort": OTLP_PORT}]},
    }))
    .unwrap();
    let service = namespace
        .api::<Service>()
        .create(&create, &service)
        .await
        .unwrap();
    let cluster_ip = service.spec.and_then(|s| s.cluster_ip).unwrap();

    let pods: Api<Pod> = namespace.api();
    let started = Instant::now();
    loop {
        let pod = pods.get("otelcol").await.unwrap();
        let status = pod.status.unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if let (true, Some(ip)) = (ready, status.pod_ip) {
            return (ip, cluster_ip);
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the collector pod did not become ready: {:?}",
            status.container_statuses
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the collector wrote so far, read from the reader beside it.
async fn collected(pod_ip: &str) -> String {
    let url = format!("http://{pod_ip}:{READER_PORT}/traces.jsonl");
    match reqwest::get(&url).await {
        Ok(response) if response.status().is_success() => response.text().await.unwrap(),
        _ => String::new(),
    }
}

async fn run_result(harness: &Harness, execution: &AgentExecution) -> Value {
    harness.result_json(execution, ResultName::RunResult).await
}

#[tokio::test]
async fn auto_telemetry_reaches_the_operators_collector_and_only_when_asked() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let collector_namespace = TestNamespace::create(&client, "otelcol").await;
    let (pod_ip, cluster_ip) = start_collector(&collector_namespace).await;
    // The chart's telemetry.otlpEndpoint: the collector's Service, by its cluster IP, which
    // the pods and this test's controller process (on the node, outside cluster DNS) reach.
    let endpoint = format!("http://{cluster_ip}:{OTLP_PORT}");
    let Some(harness) = Harness::start_with_controller_args(
        "telemetry",
        &["--otlp-endpoint", &endpoint, "--export-reconcile-spans"],
    )
    .await
    else {
        return;
    };
    harness
        .create_agent("traced", BUSYBOX_IMAGE, AGENT_SCRIPT)
        .await;
    harness
        .create_execution("traced", "traced", json!({"autoTelemetry": true}))
        .await;
    harness
        .create_execution("untraced", "traced", json!({}))
        .await;

    let traced = harness.wait_for_phase("traced", Phase::Succeeded).await;
    assert_eq!(run_result(&harness, &traced).await["response"], "span sent");
    let uid = traced.metadata.uid.clone().unwrap();
    let digest = traced.status.clone().unwrap().snapshot.unwrap().digest;
    let expected = ExpectedExecution {
        name: "traced",
        namespace: harness.namespace.name(),
        uid: &uid,
        snapshot_digest: &digest,
        agent: "traced",
    };
    assert_execution_trace(&expected, || collected(&pod_ip)).await;
    // The controller's reconciles of it (--export-reconcile-spans), beside errand's spans.
    let started = Instant::now();
    let of_trace = loop {
        let of_trace: Vec<_> = parse_spans(&collected(&pod_ip).await)
            .into_iter()
            .filter(|s| s.trace_id == trace_id_of(&uid))
            .collect();
        // The controller's batches leave every 5 s.
        if of_trace.iter().any(|s| s.name == "reconcile")
            || started.elapsed() > Duration::from_secs(30)
        {
            break of_trace;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let stage = of_trace.iter().find(|s| s.name == "stage").unwrap();
    let reconciles: Vec<_> = of_trace.iter().filter(|s| s.name == "reconcile").collect();
    assert!(!reconciles.is_empty(), "no reconcile span: {of_trace:?}");
    for reconcile in reconciles {
        assert_eq!(reconcile.resource["service.name"], "errand-controller");
        assert_eq!(reconcile.parent_span_id, stage.parent_span_id);
        assert_eq!(reconcile.attributes["errand.execution.uid"], uid);
    }

    let untraced = harness.wait_for_phase("untraced", Phase::Succeeded).await;
    // The agent counted the OTEL_* and TRACEPARENT variables it got.
    assert_eq!(run_result(&harness, &untraced).await["response"], "0");
    let trace = trace_id_of(&untraced.metadata.uid.clone().unwrap());
    // The traced run's spans arrived long ago; a few flush intervals more for any of this one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let output = collected(&pod_ip).await;
    assert!(
        parse_spans(&output).iter().all(|s| s.trace_id != trace),
        "the untraced execution sent spans: {output}"
    );

    harness.finish().await;
    collector_namespace.delete().await;
}
