//! The auto-telemetry tests' OpenTelemetry Collector (the one `hack/testenv/build.sh` builds beside etcd: the OTLP receiver and the file exporter), its config, the spans it wrote, and the test agent that sends its own span with the settings errand injects.
//!
//! Locally the collector runs as a child process of the test (its binary from
//! `ERRAND_OTELCOL`, which `hack/test.sh` sets); on the cluster it runs from its image
//! (`ERRAND_OTELCOL_IMAGE`). A missing binary skips the local test loudly, unless `CI` or
//! `ERRAND_CLUSTER_TESTS` is set, which makes it a failure.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Environment variable naming the collector binary.
pub const OTELCOL_ENV: &str = "ERRAND_OTELCOL";
/// Environment variable naming the collector image on the test node.
pub const OTELCOL_IMAGE_ENV: &str = "ERRAND_OTELCOL_IMAGE";
/// The span id the test agent gives its own span.
pub const AGENT_SPAN_ID: &str = "a9e7a9e7a9e7a9e7";
/// The name of the test agent's own span.
pub const AGENT_SPAN_NAME: &str = "agent-work";
/// How long a span may take to show in the collector's file.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(60);

/// The test agent: with a `TRACEPARENT`, it posts one span (OTLP/HTTP with a JSON body,
/// busybox `wget`) to `$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces` in the trace `TRACEPARENT`
/// names, under its parent span, with `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` as
/// its resource; its response is `span sent`. Without one, its response is the number of
/// `OTEL_*` and `TRACEPARENT` variables it got.
pub const AGENT_SCRIPT: &str = r#"set -eu
if [ -z "${TRACEPARENT:-}" ]; then
  env | grep -c -E '^(OTEL_[A-Z_]*|TRACEPARENT)=' || true
  exit 0
fi
trace=$(echo "$TRACEPARENT" | cut -d- -f2)
parent=$(echo "$TRACEPARENT" | cut -d- -f3)
now=$(date +%s)000000000
resource=$(printf '%s' "$OTEL_RESOURCE_ATTRIBUTES" | tr ',' '\n' | awk -F= '{
  printf ",{\"key\":\"%s\",\"value\":{\"stringValue\":\"%s\"}}", $1, $2 }')
body='{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"'"$OTEL_SERVICE_NAME"'"}}'"$resource"']},"scopeSpans":[{"scope":{"name":"test-agent"},"spans":[{"traceId":"'"$trace"'","spanId":"a9e7a9e7a9e7a9e7","parentSpanId":"'"$parent"'","name":"agent-work","kind":1,"startTimeUnixNano":"'"$now"'","endTimeUnixNano":"'"$now"'"}]}]}]}'
busybox wget -q -O /dev/null --header 'Content-Type: application/json' --post-data "$body" "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces"
echo "span sent"
"#;

/// The collector's config: OTLP/HTTP on `listen`, every trace appended to `file` as OTLP
/// JSON lines, no internal metrics server (its default port would clash between tests).
pub fn collector_config(listen: &str, file: &str) -> String {
    format!(
        r#"receivers:
  otlp:
    protocols:
      http:
        endpoint: "{listen}"
exporters:
  file:
    path: "{file}"
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
"#
    )
}

/// One span as the collector wrote it, with its resource's attributes.
#[derive(Debug, Clone)]
pub struct CollectedSpan {
    /// The span's name.
    pub name: String,
    /// Trace id (hex).
    pub trace_id: String,
    /// Span id (hex).
    pub span_id: String,
    /// Parent span id (hex; empty for a root).
    pub parent_span_id: String,
    /// The span's attributes (string and integer values as text).
    pub attributes: BTreeMap<String, String>,
    /// Its resource's attributes.
    pub resource: BTreeMap<String, String>,
}

fn attributes(list: &Value) -> BTreeMap<String, String> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let value = &kv["value"];
            let text = value["stringValue"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| value["intValue"].as_str().map(str::to_owned))
                .or_else(|| value["intValue"].as_i64().map(|i| i.to_string()))
                .unwrap_or_else(|| value.to_string());
            (kv["key"].as_str().unwrap_or_default().to_owned(), text)
        })
        .collect()
}

/// Every span in the file exporter's output (one OTLP JSON request per line).
pub fn parse_spans(output: &str) -> Vec<CollectedSpan> {
    let mut spans = Vec::new();
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let request: Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!("the collector wrote a line that is not JSON ({e}): {line}")
        });
        for resource_spans in request["resourceSpans"].as_array().into_iter().flatten() {
            let resource = attributes(&resource_spans["resource"]["attributes"]);
            for scope in resource_spans["scopeSpans"]
                .as_array()
                .into_iter()
                .flatten()
            {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    spans.push(CollectedSpan {
                        name: span["name"].as_str().unwrap_or_default().to_owned(),
                        trace_id: span["traceId"].as_str().unwrap_or_default().to_owned(),
                        span_id: span["spanId"].as_str().unwrap_or_default().to_owned(),
                        parent_span_id: span["parentSpanId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        attributes: attributes(&span["attributes"]),
                        resource: resource.clone(),
                    });
                }
            }
        }
    }
    spans
}

/// What an execution's trace must hold.
pub struct ExpectedExecution<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its uid.
    pub uid: &'a str,
    /// Its snapshot digest (`sha256:<hex>`).
    pub snapshot_digest: &'a str,
    /// The agent's name (the agent's service name).
    pub agent: &'a str,
}

/// The trace id errand derives from an execution's uid: the first 16 bytes of
/// `sha256(uid)`, as the book's telemetry page (docs/src/operator-guide/telemetry.md) documents.
pub fn trace_id_of(uid: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(&Sha256::digest(uid.as_bytes())[..16])
}

/// Waits until `read()` returns spans of the execution's trace holding stage, run, upload and
/// the agent's own span, then checks them: errand's spans carry the execution's attributes,
/// the agent's span is a child of the run span, and its resource says which execution and
/// agent it is.
pub async fn assert_execution_trace<F, Fut>(expected: &ExpectedExecution<'_>, mut read: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let trace_id = trace_id_of(expected.uid);
    let started = Instant::now();
    let spans = loop {
        let spans: Vec<CollectedSpan> = parse_spans(&read().await)
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        if ["stage", "run", "upload", AGENT_SPAN_NAME]
            .iter()
            .all(|n| names.contains(n))
        {
            break spans;
        }
        assert!(
            started.elapsed() < ARRIVAL_TIMEOUT,
            "the collector has only {names:?} of trace {trace_id} after {ARRIVAL_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let span = |name: &str| spans.iter().find(|s| s.name == name).unwrap();
    let execution_attributes = [
        ("errand.execution.name", expected.name),
        ("errand.execution.uid", expected.uid),
        ("errand.execution.namespace", expected.namespace),
        ("errand.snapshot.digest", expected.snapshot_digest),
    ];
    let root = &span("stage").parent_span_id;
    for name in ["stage", "run", "upload"] {
        let s = span(name);
        for (key, value) in execution_attributes {
            assert_eq!(
                s.attributes.get(key).map(String::as_str),
                Some(value),
                "{name}: {s:?}"
            );
            assert_eq!(
                s.resource.get(key).map(String::as_str),
                Some(value),
                "{name}: {s:?}"
            );
        }
        assert_eq!(s.resource["service.name"], "errand", "{s:?}");
        assert_eq!(
            &s.parent_span_id, root,
            "errand's spans share one parent: {s:?}"
        );
    }
    assert_eq!(span("run").attributes["errand.run.state"], "Succeeded");
    let agent = span(AGENT_SPAN_NAME);
    assert_eq!(agent.span_id, AGENT_SPAN_ID);
    assert_eq!(
        agent.parent_span_id,
        span("run").span_id,
        "the agent's TRACEPARENT names errand's run span"
    );
    assert_eq!(agent.resource["service.name"], expected.agent);
    for (key, value) in execution_attributes {
        assert_eq!(
            agent.resource.get(key).map(String::as_str),
            Some(value),
            "{agent:?}"
        );
    }
}

/// A collector running on this machine, stopped when dropped.
pub struct LocalCollector {
    child: Child,
    /// The OTLP/HTTP endpoint: `http://127.0.0.1:<port>`.
    pub endpoint: String,
    output: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for LocalCollector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LocalCollector {
    /// What the collector wrote so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// The file the collector writes.
    pub fn output_path(&self) -> &Path {
        &self.output
    }
}

fn required() -> bool {
    ["CI", "ERRAND_CLUSTER_TESTS"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// The collector from `ERRAND_OTELCOL`, listening on a free loopback port; `None` (after a
/// loud line) when it is not set and no run requires it.
pub async fn local_collector() -> Option<LocalCollector> {
    let Some(binary) = std::env::var_os(OTELCOL_ENV).filter(|v| !v.is_empty()) else {
        assert!(
            !required(),
            "{OTELCOL_ENV} is not set: run the tests through hack/test.sh, which builds the \
             collector (hack/testenv/build.sh) and sets it"
        );
        let _ = writeln!(
            std::io::stderr(),
            "!!!!!!!! SKIPPING TELEMETRY TEST: {OTELCOL_ENV} is not set (hack/test.sh builds the \
             collector and sets it). Set CI or ERRAND_CLUSTER_TESTS to make this a failure. !!!!!!!!"
        );
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = super::ports::free_local_address().port();
    let output = dir.path().join("traces.jsonl");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        collector_config(&format!("127.0.0.1:{port}"), output.to_str().unwrap()),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("collector.log")).unwrap();
    let child = Command::new(&binary)
        .arg(format!("--config=file:{}", config.display()))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("starting the collector {}: {e}", binary.display()));
    let mut collector = LocalCollector {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
        output,
        _dir: dir,
    };
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = collector.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(collector._dir.path().join("collector.log"));
            panic!("the collector exited before listening ({status}): {log:?}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the collector did not listen on {port} within 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some(collector)
}
