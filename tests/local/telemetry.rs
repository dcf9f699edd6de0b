//! Auto telemetry on the local backend against a real OpenTelemetry Collector: an `autoTelemetry` run's stage, run and upload spans and the agent's own span land in the execution's trace; without `autoTelemetry` nothing is injected or sent; without an endpoint `autoTelemetry` is refused.

use crate::support;

use crate::support::local::Home;
use crate::support::telemetry::{
    AGENT_SCRIPT, ExpectedExecution, assert_execution_trace, local_collector, trace_id_of,
};
use serde_json::{Value, json};

/// Applies the test agent (its command is [`AGENT_SCRIPT`]) as `traced`.
fn apply_test_agent(home: &Home) {
    let agent = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "traced"},
        "spec": {
            "runtime": {"image": "errand.local/busybox:test", "command": ["sh", "-c", AGENT_SCRIPT]},
            "config": {"config_format": "agents-spec-v1", "name": "traced"},
        },
    });
    let file = home.write("agent.json", &agent.to_string());
    let (code, answer) = home.json(&["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{answer}");
}

/// Runs the test agent with `--otlp-endpoint endpoint` and `extra` flags to success; returns
/// the execution as `execute -o json` reports it.
fn run_test_agent(home: &Home, endpoint: &str, extra: &[&str]) -> Value {
    apply_test_agent(home);
    let mut args = vec!["execute", "--agent", "traced", "--input", "trace me"];
    args.extend(["--otlp-endpoint", endpoint]);
    args.extend(extra);
    let (code, answer) = home.json(&args);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["phase"], "Succeeded", "{answer}");
    answer["execution"].clone()
}

#[tokio::test]
async fn an_auto_telemetry_run_and_its_agent_report_into_the_executions_trace() {
    let Some(collector) = local_collector().await else {
        return;
    };
    let home = Home::new();
    let execution = run_test_agent(&home, &collector.endpoint, &["--auto-telemetry"]);
    assert_eq!(execution["response"], "span sent", "{execution}");
    let expected = ExpectedExecution {
        name: execution["name"].as_str().unwrap(),
        namespace: execution["namespace"].as_str().unwrap(),
        uid: execution["uid"].as_str().unwrap(),
        snapshot_digest: execution["snapshot_digest"].as_str().unwrap(),
        agent: "traced",
    };
    assert_execution_trace(&expected, || async { collector.output() }).await;
}

#[tokio::test]
async fn without_auto_telemetry_nothing_is_injected_or_sent() {
    let Some(collector) = local_collector().await else {
        return;
    };
    let home = Home::new();
    // The endpoint is configured, the execution does not ask for telemetry.
    let execution = run_test_agent(&home, &collector.endpoint, &[]);
    // The agent counted the OTEL_* and TRACEPARENT variables it got.
    assert_eq!(execution["response"], "0", "{execution}");
    // Give the collector's file exporter several flush intervals: nothing of this trace came.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let trace = trace_id_of(execution["uid"].as_str().unwrap());
    let output = collector.output();
    assert!(!output.contains(&trace), "{output}");
    assert!(
        support::telemetry::parse_spans(&output).is_empty(),
        "no span at all was sent: {output}"
    );
}

/// `execute` of the test agent with `--auto-telemetry`.
const TRACED_RUN: [&str; 6] = [
    "execute",
    "--agent",
    "traced",
    "--input",
    "x",
    "--auto-telemetry",
];

#[test]
fn auto_telemetry_without_an_endpoint_is_refused_naming_the_field() {
    let home = Home::new();
    apply_test_agent(&home);
    let output = home
        .command(&[&TRACED_RUN[..], &["-o", "json"]].concat())
        .env_remove("ERRAND_OTLP_ENDPOINT")
        .output()
        .unwrap();
    assert_ne!(output.status.code(), Some(0));
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["ok"], false, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("spec.autoTelemetry"), "{message}");
    assert!(message.contains("--otlp-endpoint"), "{message}");
    let (_, listed) = home.json(&["list"]);
    assert_eq!(
        listed["executions"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );

    let (code, answer) =
        home.json(&[&TRACED_RUN[..], &["--otlp-endpoint", "collector:4318"]].concat());
    assert_ne!(code, 0);
    let message = answer["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("--otlp-endpoint"), "{answer}");
}
