//! The `errand.dev/v1alpha1` custom resources (Agent, AgentEnvironment, Fileset, AgentExecution, AgentDeployment, AgentSchedule and the cluster-scoped AgentRuntime and AgentExtension) and the objects of the `data.errand.dev/v1alpha1` API.
// kube's `printcolumn(type_ = ...)` repeated once per column reads to clippy as a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

mod agent;
mod common;
pub mod contract;
pub mod crds;
pub mod data;
mod deployment;
mod environment;
mod execution;
mod extension;
mod fileset;
mod notify;
mod phase;
mod runtime;
mod schedule;
pub mod tags;

pub use agent::{Agent, AgentConfig, AgentSpec, AgentStatus, RuntimeContainer, RuntimeSecurity};
pub use common::{Reference, ResultEntry};
pub use deployment::{
    AgentDeployment, AgentDeploymentSpec, AgentDeploymentStatus, DEFAULT_AGENT_PORT,
    DEFAULT_FAILURE_THRESHOLD, DEFAULT_HEALTH_PATH, DEFAULT_PROBE_TIMEOUT_SECONDS,
    DEFAULT_STARTING_TIMEOUT_SECONDS, DeploymentPhase, MAX_REPLICAS, Readiness,
};
pub use environment::{
    ALLOWED_COMPUTE_KEYS, AgentEnvironment, AgentEnvironmentSpec, AgentEnvironmentStatus, Compute,
    ComputeResources, DEFAULT_HOST_PORTS, Egress, EgressHost, EgressRule, EnvironmentOverlay, GPU,
    MAX_TOLERATIONS, ModelCredentials, OVERCOMMITTABLE_COMPUTE_KEYS, TAINT_EFFECTS,
    TOLERATION_OPERATORS,
};
pub use execution::{
    AgentExecution, AgentExecutionSpec, AgentExecutionStatus, ArtifactMount,
    DEFAULT_TIMEOUT_SECONDS, DeadlineChange, DeadlineStatus, Extension, MAX_INPUT_BYTES,
    MAX_TIMEOUT_SECONDS, MAX_TTL_SECONDS_AFTER_FINISHED, RERUN_TAKES_THE_SNAPSHOT, SnapshotRef,
    Workdir,
};
pub use extension::{
    AgentExtension, AgentExtensionSpec, DEFAULT_EXTENSION_TIMEOUT_SECONDS, MAX_EXTENSION_RESULTS,
};
pub use fileset::{Fileset, FilesetSpec, FilesetStatus};
pub use notify::{
    CLOUDEVENTS_CONTENT_TYPE, CloudEvent, DeliveryState, EXECUTION_FINISHED, ExecutionEvent,
    MAX_WEBHOOK_URL_BYTES, MatchedLine, NotifySpec, NotifyStatus, OUTPUT_MATCHED, SecretKeyRef,
    WebhookDelivery, WebhookSink,
};
pub use phase::Phase;
pub use runtime::{AgentRuntime, AgentRuntimeSpec};
pub use schedule::{
    AgentSchedule, AgentScheduleSpec, AgentScheduleStatus, ConcurrencyPolicy,
    DEFAULT_FAILED_HISTORY, DEFAULT_SUCCESSFUL_HISTORY, ExecutionTemplate, MAX_SCHEDULE_NAME,
    TemplateMetadata,
};

/// The API group of every errand resource.
pub const GROUP: &str = "errand.dev";
/// The API version of every errand resource.
pub const VERSION: &str = "v1alpha1";
