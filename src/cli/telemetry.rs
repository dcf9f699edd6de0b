//! The `--otlp-endpoint` flag (`ERRAND_OTLP_ENDPOINT`): where auto telemetry goes, for `execute` locally, the controller, and `errand stage` / `run-agent` in pods.

use crate::telemetry::{InvalidEndpoint, TelemetryTarget};

/// Where executions with `autoTelemetry: true` send their traces.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TelemetryArgs {
    /// Base URL of the operator's OpenTelemetry collector (its OTLP/HTTP receiver, e.g.
    /// `http://otel-collector:4318`). Executions with `autoTelemetry: true` export errand's
    /// spans there and give the agent the standard `OTEL_*` variables and a `TRACEPARENT`;
    /// others get nothing. On a cluster the controller's setting (the chart's
    /// `telemetry.otlpEndpoint`) is the one that counts; `execute` only uses it locally.
    #[arg(long, env = "ERRAND_OTLP_ENDPOINT", value_name = "URL", value_parser = parse_endpoint)]
    pub otlp_endpoint: Option<TelemetryTarget>,
}

fn parse_endpoint(value: &str) -> Result<TelemetryTarget, InvalidEndpoint> {
    TelemetryTarget::parse("--otlp-endpoint", value)
}
