//! The `AgentDeployment` resource: an agent run as a long-lived service (a Deployment behind a ClusterIP Service) instead of once.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::agent::AgentSpec;
use super::common::Reference;
use super::environment::AgentEnvironmentSpec;
use super::execution::SnapshotRef;

/// The port the agent server listens on when the deployment names none.
pub const DEFAULT_AGENT_PORT: i32 = 8000;
/// The path the readiness probe asks when the deployment names none.
pub const DEFAULT_HEALTH_PATH: &str = "/health";
/// How long a deployment may stay Starting when it sets no `startingTimeoutSeconds`: one hour.
pub const DEFAULT_STARTING_TIMEOUT_SECONDS: i64 = 3600;
/// The most replicas a deployment may ask for.
pub const MAX_REPLICAS: i32 = 100;

/// An agent served by a long-running Deployment, reached through errand's gateway.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "errand.dev",
    version = "v1alpha1",
    kind = "AgentDeployment",
    doc = "An agent run as a long-lived service: a Deployment of its agent server behind a ClusterIP Service.",
    namespaced,
    status = "AgentDeploymentStatus",
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 56").message("metadata.name must be a DNS label (lowercase letters, digits and '-', starting with a letter) of at most 56 characters: it names the Service errand-<name>"),
    shortname = "adep",
    printcolumn(name = "Agent", type_ = "string", json_path = ".status.agent"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Address",
        type_ = "string",
        json_path = ".status.address",
        priority = 1
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    )
)]
#[x_kube(validation = Rule::new("(has(self.agentRef) ? 1 : 0) + (has(self.agent) ? 1 : 0) == 1").message("exactly one of agentRef or agent must be set"))]
#[x_kube(validation = Rule::new("!(has(self.environmentRef) && has(self.environment))").message("at most one of environmentRef or environment may be set"))]
#[serde(rename_all = "camelCase")]
pub struct AgentDeploymentSpec {
    /// The Agent to serve, by name in this namespace. Exactly one of `agentRef` or `agent`.
    /// Changing it redeploys: the new agent is resolved and checked first, then rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_ref: Option<Reference>,
    /// An inline agent definition. Exactly one of `agentRef` or `agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSpec>,
    /// The AgentEnvironment to merge in, by name in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_ref: Option<Reference>,
    /// An inline environment. At most one of `environmentRef` or `environment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<AgentEnvironmentSpec>,
    /// How many pods serve the agent (1 to 100).
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = MAX_REPLICAS))]
    pub replicas: i32,
    /// The port the agent server listens on in its container (default 8000).
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// The readiness probe: an HTTP GET of `path` on the port.
    #[serde(default)]
    pub readiness: Readiness,
    /// Seconds a deployment may stay Starting before it is marked Failed, counted from the
    /// start of the current uninterrupted Starting period (a deployment that was Ready and
    /// lost readiness gets a fresh window). 0 disables the limit. Default 3600.
    #[serde(default = "default_starting_timeout_seconds")]
    #[schemars(range(min = 0, max = super::MAX_TIMEOUT_SECONDS))]
    pub starting_timeout_seconds: i64,
}

fn default_replicas() -> i32 {
    1
}

fn default_port() -> i32 {
    DEFAULT_AGENT_PORT
}

fn default_starting_timeout_seconds() -> i64 {
    DEFAULT_STARTING_TIMEOUT_SECONDS
}

impl Default for AgentDeploymentSpec {
    /// An empty spec with the same defaults the API server applies.
    fn default() -> Self {
        Self {
            agent_ref: None,
            agent: None,
            environment_ref: None,
            environment: None,
            replicas: default_replicas(),
            port: DEFAULT_AGENT_PORT,
            readiness: Readiness::default(),
            starting_timeout_seconds: DEFAULT_STARTING_TIMEOUT_SECONDS,
        }
    }
}

/// How the agent server's readiness is probed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    /// The path of the HTTP GET (default `/health`); any 2xx or 3xx answer is ready.
    #[serde(default = "default_health_path")]
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("path must start with '/'"))]
    pub path: String,
    /// Seconds one probe may take (default 1).
    #[serde(default = "default_probe_timeout_seconds")]
    #[schemars(range(min = 1, max = 60))]
    pub timeout_seconds: i32,
    /// Failed probes in a row before a pod counts as not ready (default 12).
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_threshold: i32,
}

fn default_health_path() -> String {
    DEFAULT_HEALTH_PATH.to_owned()
}

/// Seconds a readiness probe may take, by default.
pub const DEFAULT_PROBE_TIMEOUT_SECONDS: i32 = 1;
/// Failed readiness probes in a row that make a ready pod unready, by default.
pub const DEFAULT_FAILURE_THRESHOLD: i32 = 12;

fn default_probe_timeout_seconds() -> i32 {
    DEFAULT_PROBE_TIMEOUT_SECONDS
}

fn default_failure_threshold() -> i32 {
    DEFAULT_FAILURE_THRESHOLD
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            path: default_health_path(),
            timeout_seconds: default_probe_timeout_seconds(),
            failure_threshold: default_failure_threshold(),
        }
    }
}

/// Lifecycle phase of a deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeploymentPhase {
    /// No pod is ready yet (or none is any more); the starting window runs.
    Starting,
    /// At least one pod is ready and serves requests.
    Ready,
    /// The spec cannot be served (reason `InvalidSpec`), or no pod became ready within the
    /// starting window (reason `StartingTimeout`). A change to the spec starts it again.
    Failed,
    /// The deployment is being deleted with its children.
    Terminating,
}

impl DeploymentPhase {
    /// The phase as it appears in the status.
    pub const fn as_str(self) -> &'static str {
        match self {
            DeploymentPhase::Starting => "Starting",
            DeploymentPhase::Ready => "Ready",
            DeploymentPhase::Failed => "Failed",
            DeploymentPhase::Terminating => "Terminating",
        }
    }
}

/// Observed state of a deployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentDeploymentStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DeploymentPhase>,
    /// Name of the resolved agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Standard conditions: `Resolved`, `Ready`, `Failed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The snapshot the pods run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
    /// sha256 of the agent and environment fields of the spec the snapshot was taken from:
    /// the snapshot is taken again only when they change (a redeploy), never for an edit of
    /// the Agent or AgentEnvironment objects themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_digest: Option<String>,
    /// Pods that pass their readiness probe.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Pods asked for.
    #[serde(default)]
    pub replicas: i32,
    /// The Service's in-cluster address, `http://<service>.<namespace>.svc:<port>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// When the current uninterrupted Starting period began; absent unless Starting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_since: Option<Time>,
    /// A short human message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
