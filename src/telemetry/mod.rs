//! Auto telemetry (`autoTelemetry: true`): the execution's trace, the `OTEL_*` settings the agent gets, and the runner's spans exported to the operator's OTLP endpoint.
//!
//! [`trace`] is the pure part: which trace an execution is (derived from its uid, so the
//! controller, the runner in each container and the agent agree without talking to each
//! other), and which variables the agent receives. [`export`] sends errand's own spans there
//! over OTLP/HTTP with protobuf bodies.

pub mod export;
pub mod trace;

pub use export::{ErrandSpan, ExecutionTelemetry, ExportError, ReconcileSpans};
pub use trace::{ExecutionTrace, InvalidEndpoint, OTLP_PROTOCOL, TelemetryTarget};
