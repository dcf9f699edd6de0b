//! Which trace an execution is, and the `OTEL_*` variables and W3C `TRACEPARENT` its agent receives: pure functions of the execution's identity.

use sha2::{Digest, Sha256};

use crate::store::keys::ExecutionId;

/// `OTEL_EXPORTER_OTLP_ENDPOINT`: the collector's base URL; exporters append `/v1/traces`.
pub const ENV_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// `OTEL_EXPORTER_OTLP_PROTOCOL`.
pub const ENV_OTLP_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
/// `OTEL_SERVICE_NAME`: the agent's name.
pub const ENV_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// `OTEL_RESOURCE_ATTRIBUTES`: which execution the agent's telemetry belongs to.
pub const ENV_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
/// `TRACEPARENT`: the W3C trace context of the span the agent runs under.
pub const ENV_TRACEPARENT: &str = "TRACEPARENT";
/// Every variable auto telemetry sets for the agent; the runner's values win over an
/// environment's or a secret binding's of the same name.
pub const AGENT_TELEMETRY_ENV: [&str; 5] = [
    ENV_OTLP_ENDPOINT,
    ENV_OTLP_PROTOCOL,
    ENV_SERVICE_NAME,
    ENV_RESOURCE_ATTRIBUTES,
    ENV_TRACEPARENT,
];
/// The OTLP protocol errand speaks and tells the agent to speak (HTTP with protobuf bodies;
/// the same endpoint accepts JSON bodies too).
pub const OTLP_PROTOCOL: &str = "http/protobuf";

/// Resource and span attribute: the execution's name.
pub const ATTR_EXECUTION_NAME: &str = "errand.execution.name";
/// Resource and span attribute: the execution's uid.
pub const ATTR_EXECUTION_UID: &str = "errand.execution.uid";
/// Resource and span attribute: the execution's namespace.
pub const ATTR_EXECUTION_NAMESPACE: &str = "errand.execution.namespace";
/// Resource and span attribute: the digest of the execution's snapshot (`sha256:<hex>`).
pub const ATTR_SNAPSHOT_DIGEST: &str = "errand.snapshot.digest";

/// Where telemetry goes: the operator's OTLP/HTTP endpoint (a chart value on the cluster,
/// `--otlp-endpoint` / `ERRAND_OTLP_ENDPOINT` locally).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryTarget {
    /// Base URL of the collector's OTLP/HTTP receiver, e.g. `http://otel-collector:4318`.
    pub endpoint: String,
}

/// Why an OTLP endpoint is refused; each names the flag or value it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEndpoint {
    /// Not a URL.
    #[error("{field}: {endpoint:?} is not a URL: {source}")]
    NotAUrl {
        /// The flag or value.
        field: String,
        /// The text given.
        endpoint: String,
        /// What the parser said.
        source: url::ParseError,
    },
    /// A URL, but not an `http` or `https` one with a host.
    #[error(
        "{field}: {endpoint:?} must be an http:// or https:// URL of an OTLP/HTTP receiver (e.g. http://otel-collector:4318)"
    )]
    NotHttp {
        /// The flag or value.
        field: String,
        /// The URL given.
        endpoint: String,
    },
}

impl TelemetryTarget {
    /// The target at `endpoint`, which must be an `http` or `https` URL with a host; `field`
    /// names the flag or value it came from in the error.
    pub fn parse(field: &str, endpoint: &str) -> Result<TelemetryTarget, InvalidEndpoint> {
        let url = url::Url::parse(endpoint).map_err(|source| InvalidEndpoint::NotAUrl {
            field: field.to_owned(),
            endpoint: endpoint.to_owned(),
            source,
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(InvalidEndpoint::NotHttp {
                field: field.to_owned(),
                endpoint: endpoint.to_owned(),
            });
        }
        Ok(TelemetryTarget {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
        })
    }

    /// Where spans are posted: the base URL with OTLP's `/v1/traces`, as the
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` rule has every exporter do.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.endpoint)
    }
}

/// The trace of one execution: its id and the id of the execution's root span, both derived
/// from the execution's uid, `sha256(uid)`: the trace id is its first 16 bytes and the root
/// span id the next 8. Every part of a run computes the same ids from the uid alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionTrace {
    /// The W3C trace id.
    pub trace_id: [u8; 16],
    /// The span errand's spans (stage, run, upload, reconcile) are children of; nothing
    /// reports it, so trace views show it as the trace's (missing) root.
    pub root_span_id: [u8; 8],
}

impl ExecutionTrace {
    /// The trace of the execution with `uid`.
    pub fn of_uid(uid: &str) -> ExecutionTrace {
        let digest = Sha256::digest(uid.as_bytes());
        let mut trace_id = [0u8; 16];
        let mut root_span_id = [0u8; 8];
        trace_id.copy_from_slice(&digest[..16]);
        root_span_id.copy_from_slice(&digest[16..24]);
        ExecutionTrace {
            trace_id,
            root_span_id,
        }
    }

    /// The trace id in hex, as OTLP/JSON and trace views show it.
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }
}

/// A W3C `traceparent` (version 00, sampled) for the span `span_id` of the trace `trace_id`.
pub fn traceparent(trace_id: &[u8; 16], span_id: &[u8; 8]) -> String {
    format!("00-{}-{}-01", hex::encode(trace_id), hex::encode(span_id))
}

/// The attributes that say which execution a span or a resource belongs to. Names and uids
/// are Kubernetes names and UUIDs, the digest `sha256:<hex>`: no secret is among them.
pub fn execution_attributes(
    execution: &ExecutionId,
    snapshot_digest: &str,
) -> [(&'static str, String); 4] {
    [
        (ATTR_EXECUTION_NAME, execution.name.clone()),
        (ATTR_EXECUTION_UID, execution.uid.clone()),
        (ATTR_EXECUTION_NAMESPACE, execution.namespace.clone()),
        (ATTR_SNAPSHOT_DIGEST, snapshot_digest.to_owned()),
    ]
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs joined by commas, each value percent-encoded
/// where the W3C baggage format the variable uses needs it.
fn resource_attributes(attributes: &[(&'static str, String)]) -> String {
    attributes
        .iter()
        .map(|(key, value)| format!("{key}={}", encode_baggage_value(value)))
        .collect::<Vec<_>>()
        .join(",")
}

fn encode_baggage_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'!' | b'#'..=b'+' | b'-'..=b':' | b'<'..=b'[' | b']'..=b'~' => out.push(byte as char),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// The variables the agent of an auto-telemetry run receives: the endpoint and protocol, its
/// service name (the agent's name), the execution's resource attributes, and a `TRACEPARENT`
/// naming `run_span_id`, the runner's span of the agent's run, in the execution's trace.
pub fn agent_env(
    target: &TelemetryTarget,
    execution: &ExecutionId,
    agent: &str,
    snapshot_digest: &str,
    run_span_id: &[u8; 8],
) -> Vec<(String, String)> {
    let trace = ExecutionTrace::of_uid(&execution.uid);
    let attributes = execution_attributes(execution, snapshot_digest);
    vec![
        (ENV_OTLP_ENDPOINT.into(), target.endpoint.clone()),
        (ENV_OTLP_PROTOCOL.into(), OTLP_PROTOCOL.into()),
        (ENV_SERVICE_NAME.into(), agent.to_owned()),
        (
            ENV_RESOURCE_ATTRIBUTES.into(),
            resource_attributes(&attributes),
        ),
        (
            ENV_TRACEPARENT.into(),
            traceparent(&trace.trace_id, run_span_id),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn execution() -> ExecutionId {
        ExecutionId {
            namespace: "team-a".into(),
            name: "research-7".into(),
            uid: "3f2c1b9e-8d7a-4c6b-9e5f-0a1b2c3d4e5f".into(),
        }
    }

    #[test]
    fn the_trace_is_a_function_of_the_uid_alone() {
        let trace = ExecutionTrace::of_uid("3f2c1b9e-8d7a-4c6b-9e5f-0a1b2c3d4e5f");
        assert_eq!(trace, ExecutionTrace::of_uid(&execution().uid));
        let digest = hex::encode(Sha256::digest(execution().uid.as_bytes()));
        assert_eq!(trace.trace_id_hex(), digest[..32]);
        assert_eq!(hex::encode(trace.root_span_id), digest[32..48]);
        assert_ne!(trace, ExecutionTrace::of_uid("another-uid"));
    }

    #[test]
    fn traceparent_is_w3c_version_00_sampled() {
        let parent = traceparent(&[0xab; 16], &[0x01; 8]);
        assert_eq!(
            parent,
            "00-abababababababababababababababab-0101010101010101-01"
        );
    }

    #[test]
    fn the_agent_gets_the_standard_variables_for_its_execution() {
        let target = TelemetryTarget::parse("--otlp-endpoint", "http://collector:4318/").unwrap();
        let env = agent_env(
            &target,
            &execution(),
            "calculator",
            "sha256:00ff",
            &[0x0a; 8],
        );
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, AGENT_TELEMETRY_ENV);
        let value = |name: &str| env.iter().find(|(n, _)| n == name).unwrap().1.clone();
        assert_eq!(value(ENV_OTLP_ENDPOINT), "http://collector:4318");
        assert_eq!(value(ENV_OTLP_PROTOCOL), "http/protobuf");
        assert_eq!(value(ENV_SERVICE_NAME), "calculator");
        assert_eq!(
            value(ENV_RESOURCE_ATTRIBUTES),
            "errand.execution.name=research-7,\
             errand.execution.uid=3f2c1b9e-8d7a-4c6b-9e5f-0a1b2c3d4e5f,\
             errand.execution.namespace=team-a,errand.snapshot.digest=sha256:00ff"
        );
        let trace = ExecutionTrace::of_uid(&execution().uid).trace_id_hex();
        assert_eq!(
            value(ENV_TRACEPARENT),
            format!("00-{trace}-0a0a0a0a0a0a0a0a-01")
        );
    }

    #[test]
    fn resource_attribute_values_are_percent_encoded_where_baggage_needs_it() {
        assert_eq!(
            encode_baggage_value("a b,c;d=e\\f\"g"),
            "a%20b%2Cc%3Bd=e%5Cf%22g"
        );
        assert_eq!(
            encode_baggage_value("sha256:ab/c-d_e.f"),
            "sha256:ab/c-d_e.f"
        );
    }

    #[test]
    fn an_endpoint_must_be_an_http_url_and_the_error_names_the_field() {
        assert_eq!(
            TelemetryTarget::parse("telemetry.otlpEndpoint", "http://c:4318")
                .unwrap()
                .traces_url(),
            "http://c:4318/v1/traces"
        );
        for bad in [
            "collector:4318",
            "grpc://c:4317",
            "not a url",
            "file:///tmp/x",
        ] {
            let error = TelemetryTarget::parse("--otlp-endpoint", bad)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("--otlp-endpoint: "), "{error}");
        }
    }
}
