//! errand's own spans of an execution (stage, run, upload; the controller's reconciles), exported over OTLP/HTTP (protobuf) into the execution's trace through the reqwest client errand already uses.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use super::trace::{self, ExecutionTrace, TelemetryTarget};
use crate::resolve::Snapshot;
use crate::store::keys::ExecutionId;

/// The service name of errand's own spans.
pub const RUNNER_SERVICE_NAME: &str = "errand";
/// How long one export may take; a collector that does not answer never holds a run up for
/// longer than this at its end.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Posts the exporter's requests with errand's reqwest client, on the tokio runtime the
/// telemetry was started on (the SDK's batch processor exports from a thread of its own).
#[derive(Debug, Clone)]
struct RuntimeHttpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeHttpClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request.map(reqwest::Body::from))?;
        let response = self
            .runtime
            .spawn(async move {
                let response = client.execute(request).await?;
                let mut builder = http::Response::builder().status(response.status());
                for (name, value) in response.headers() {
                    builder = builder.header(name, value);
                }
                let body = response.bytes().await?;
                Ok::<_, HttpError>(builder.body(body)?)
            })
            .await??;
        Ok(response)
    }
}

struct Exporting {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    parent: Context,
    target: TelemetryTarget,
    execution: ExecutionId,
    agent: String,
    snapshot_digest: String,
    attributes: Vec<KeyValue>,
}

/// Why errand's spans cannot be exported: the exporter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The HTTP client the exporter sends with.
    #[error("the OTLP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The exporter itself.
    #[error("the OTLP exporter for {endpoint}: {source}")]
    Exporter {
        /// The collector's base URL.
        endpoint: String,
        /// What the exporter's builder said.
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// A tracer provider exporting to `target` in batches, with a resource of `service` and
/// `attributes` only: not the SDK's detectors, so the process's own environment (an agent
/// image's `OTEL_*` variables) cannot relabel errand's spans. Must be called within a tokio
/// runtime, which carries the exports.
fn tracer_provider(
    target: &TelemetryTarget,
    service: &'static str,
    attributes: Vec<KeyValue>,
) -> Result<SdkTracerProvider, ExportError> {
    let client = RuntimeHttpClient {
        // The operator's collector, reached directly: never through the agent's egress proxy.
        client: reqwest::Client::builder()
            .no_proxy()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(ExportError::Client)?,
        runtime: tokio::runtime::Handle::current(),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(target.traces_url())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|source| ExportError::Exporter {
            endpoint: target.endpoint.clone(),
            source,
        })?;
    let resource = Resource::builder_empty()
        .with_service_name(service)
        .with_attributes(attributes)
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// The context errand's spans of the execution with `uid` start in: its trace, under its root
/// span (both derived from the uid).
fn execution_parent(uid: &str) -> Context {
    let ids = ExecutionTrace::of_uid(uid);
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes(ids.trace_id),
        SpanId::from_bytes(ids.root_span_id),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

/// Sends the spans `provider` still holds and stops it; an unreachable collector costs at most
/// the export timeout, and is only logged.
async fn shut_down(provider: &SdkTracerProvider) {
    let provider = provider.clone();
    let result =
        tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(EXPORT_TIMEOUT)).await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "exporting errand's spans"),
        Err(e) => tracing::warn!(error = %e, "exporting errand's spans"),
    }
}

/// The telemetry of one execution in this process: off (no `autoTelemetry`, or no endpoint)
/// or exporting errand's spans into the execution's trace. Cheap to clone.
#[derive(Clone, Default)]
pub struct ExecutionTelemetry {
    exporting: Option<Arc<Exporting>>,
}

impl fmt::Debug for ExecutionTelemetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.exporting {
            None => f.write_str("ExecutionTelemetry(off)"),
            Some(e) => write!(f, "ExecutionTelemetry({})", e.target.endpoint),
        }
    }
}

impl ExecutionTelemetry {
    /// No telemetry: spans are no-ops and the agent gets no variables.
    pub fn off() -> ExecutionTelemetry {
        ExecutionTelemetry::default()
    }

    /// Exports the spans of `execution` (of agent `agent`, from the snapshot with
    /// `snapshot_digest`) to `target`. Must be called within a tokio runtime, which carries
    /// the exports.
    pub fn start(
        target: &TelemetryTarget,
        execution: &ExecutionId,
        agent: &str,
        snapshot_digest: &str,
    ) -> Result<ExecutionTelemetry, ExportError> {
        let attributes: Vec<KeyValue> = trace::execution_attributes(execution, snapshot_digest)
            .into_iter()
            .map(|(key, value)| KeyValue::new(key, value))
            .collect();
        let provider = tracer_provider(target, RUNNER_SERVICE_NAME, attributes.clone())?;
        let tracer = provider.tracer("errand");
        let parent = execution_parent(&execution.uid);
        Ok(ExecutionTelemetry {
            exporting: Some(Arc::new(Exporting {
                provider,
                tracer,
                parent,
                target: target.clone(),
                execution: execution.clone(),
                agent: agent.to_owned(),
                snapshot_digest: snapshot_digest.to_owned(),
                attributes,
            })),
        })
    }

    /// The telemetry of the run `snapshot` describes: exporting to `target` when the snapshot
    /// asks for auto telemetry and a target is configured, off otherwise (also, with a
    /// warning, when the exporter cannot be built: telemetry never fails a run).
    pub fn for_snapshot(
        target: Option<&TelemetryTarget>,
        snapshot: &Snapshot,
        execution: &ExecutionId,
    ) -> ExecutionTelemetry {
        let Some(target) = target.filter(|_| snapshot.auto_telemetry) else {
            return ExecutionTelemetry::off();
        };
        ExecutionTelemetry::start(target, execution, &snapshot.agent.name, &snapshot.digest())
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "auto telemetry is off for this run");
                ExecutionTelemetry::off()
            })
    }

    /// Starts errand's span `name` (`stage`, `run`, `upload`) in the execution's trace,
    /// carrying the execution's attributes.
    pub fn span(&self, name: &'static str) -> ErrandSpan {
        ErrandSpan {
            span: self.exporting.as_ref().map(|e| {
                let mut span = e.tracer.start_with_context(name, &e.parent);
                span.set_attributes(e.attributes.clone());
                span
            }),
        }
    }

    /// The variables the agent gets for a run under `run` (none when telemetry is off).
    pub fn agent_env(&self, run: &ErrandSpan) -> Vec<(String, String)> {
        let (Some(e), Some(span)) = (&self.exporting, &run.span) else {
            return Vec::new();
        };
        let span_id = span.span_context().span_id().to_bytes();
        trace::agent_env(
            &e.target,
            &e.execution,
            &e.agent,
            &e.snapshot_digest,
            &span_id,
        )
    }

    /// Sends the spans still queued and stops exporting.
    pub async fn shutdown(&self) {
        let Some(exporting) = &self.exporting else {
            return;
        };
        shut_down(&exporting.provider).await;
    }
}

/// The controller's reconcile spans (`errand controller --export-reconcile-spans`), service
/// name `errand-controller`: each reconcile of an execution with `autoTelemetry: true` is a
/// `reconcile` span in that execution's trace. Off by default. Cheap to clone.
#[derive(Clone, Default)]
pub struct ReconcileSpans {
    exporting: Option<Arc<(SdkTracerProvider, SdkTracer)>>,
}

impl fmt::Debug for ReconcileSpans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.exporting.is_some() {
            "on"
        } else {
            "off"
        };
        write!(f, "ReconcileSpans({state})")
    }
}

/// The service name of the controller's spans.
pub const CONTROLLER_SERVICE_NAME: &str = "errand-controller";
/// The controller's span of one reconcile of an execution.
pub const SPAN_RECONCILE: &str = "reconcile";

impl ReconcileSpans {
    /// No reconcile spans.
    pub fn off() -> ReconcileSpans {
        ReconcileSpans::default()
    }

    /// Exports reconcile spans to `target`; within a tokio runtime.
    pub fn start(target: &TelemetryTarget) -> Result<ReconcileSpans, ExportError> {
        let provider = tracer_provider(target, CONTROLLER_SERVICE_NAME, Vec::new())?;
        let tracer = provider.tracer("errand-controller");
        Ok(ReconcileSpans {
            exporting: Some(Arc::new((provider, tracer))),
        })
    }

    /// Starts the span of a reconcile of `execution`, with its name, uid and namespace.
    pub fn span(&self, execution: &ExecutionId) -> ErrandSpan {
        ErrandSpan {
            span: self.exporting.as_ref().map(|exporting| {
                let mut span = exporting
                    .1
                    .start_with_context(SPAN_RECONCILE, &execution_parent(&execution.uid));
                span.set_attributes(
                    trace::execution_attributes(execution, "")
                        .into_iter()
                        .filter(|(_, value)| !value.is_empty())
                        .map(|(key, value)| KeyValue::new(key, value)),
                );
                span
            }),
        }
    }

    /// Sends the spans still queued and stops exporting.
    pub async fn shutdown(&self) {
        if let Some(exporting) = &self.exporting {
            shut_down(&exporting.0).await;
        }
    }
}

/// One of errand's spans; ends when [`ErrandSpan::end`] is called or it is dropped.
#[derive(Debug)]
pub struct ErrandSpan {
    span: Option<opentelemetry_sdk::trace::Span>,
}

impl ErrandSpan {
    /// Adds an attribute.
    pub fn set(&mut self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        if let Some(span) = &mut self.span {
            span.set_attribute(KeyValue::new(key, value));
        }
    }

    /// Ends the span, as failed with `error` when there is one.
    pub fn end(mut self, error: Option<&str>) {
        if let Some(span) = &mut self.span {
            match error {
                Some(message) => span.set_status(Status::error(message.to_owned())),
                None => span.set_status(Status::Ok),
            }
            span.end();
        }
    }
}
