//! The `AgentExecution` resource: one run of an agent, its inputs and everything it produced.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::core::Rule;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::agent::AgentSpec;
use super::common::{Reference, ResultEntry};
use super::environment::{AgentEnvironmentSpec, Egress};
use super::notify::{NotifySpec, NotifyStatus};
use super::phase::Phase;

/// Timeout of an execution that sets none: one hour.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 3600;
/// The longest `timeoutSeconds` and `startTimeoutSeconds`: seven days, which is also as long
/// as an S3 or GCS presigned URL can last.
pub const MAX_TIMEOUT_SECONDS: i64 = 7 * 24 * 3600;
/// The largest `input`, in bytes of UTF-8: 256 KiB. It travels in the execution and in its
/// snapshot ConfigMap, which the API server caps at 1 MiB; larger input belongs in a Fileset.
pub const MAX_INPUT_BYTES: usize = 256 * 1024;

/// The longest an execution may be kept after it finishes, when a lifetime is set: 366 days.
/// Whoever needs results longer keeps them without a lifetime and deletes them by hand.
pub const MAX_TTL_SECONDS_AFTER_FINISHED: i64 = 366 * 24 * 3600;

/// Why a rerun sets nothing but `rerunOf`, `ttlSecondsAfterFinished` and `cancel`.
pub const RERUN_TAKES_THE_SNAPSHOT: &str = "a rerun takes its input, environment, workdir, \
     extension, queue and timeouts from the snapshot of the execution it reruns: leave them unset";

/// Spec fields that never change after creation (everything but `cancel`, `kill`, `held` and
/// `deadline`, which have their own transition rules).
const IMMUTABLE_SPEC_FIELDS: [&str; 14] = [
    "agentRef",
    "agent",
    "input",
    "environmentRef",
    "environment",
    "workdir",
    "timeoutSeconds",
    "startTimeoutSeconds",
    "autoTelemetry",
    "extension",
    "queueName",
    "ttlSecondsAfterFinished",
    "rerunOf",
    "notify",
];

/// The CEL transition rule that keeps every spec field but `cancel` as it was created.
/// Each field is compared with presence, so adding or removing an optional field is caught too.
fn immutable_except_cancel() -> Rule {
    let rule = IMMUTABLE_SPEC_FIELDS
        .iter()
        .map(|f| {
            format!(
                "(has(self.{f}) == has(oldSelf.{f}) && (!has(self.{f}) || self.{f} == oldSelf.{f}))"
            )
        })
        .collect::<Vec<_>>()
        .join(" && ");
    Rule::new(rule).message("spec is immutable except cancel")
}

/// One run of an agent, to completion.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "errand.dev",
    version = "v1alpha1",
    kind = "AgentExecution",
    doc = "One run of an agent, to completion, and everything it produced.",
    namespaced,
    status = "AgentExecutionStatus",
    shortname = "aex",
    shortname = "exec",
    printcolumn(name = "Agent", type_ = "string", json_path = ".status.agent"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Duration", type_ = "string", json_path = ".status.duration"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    ),
    printcolumn(
        name = "Rerun-Of",
        type_ = "string",
        json_path = ".spec.rerunOf.name",
        priority = "1"
    )
)]
#[x_kube(validation = Rule::new("(has(self.agentRef) ? 1 : 0) + (has(self.agent) ? 1 : 0) + (has(self.rerunOf) ? 1 : 0) == 1").message("exactly one of agentRef, agent or rerunOf must be set"))]
#[x_kube(validation = Rule::new("!has(self.rerunOf) || ((!has(self.input) || self.input == '') && !has(self.environmentRef) && !has(self.environment) && !has(self.workdir) && !has(self.extension) && !has(self.queueName) && !has(self.startTimeoutSeconds) && (!has(self.autoTelemetry) || !self.autoTelemetry))").message(RERUN_TAKES_THE_SNAPSHOT))]
#[x_kube(validation = Rule::new("!(has(self.environmentRef) && has(self.environment))").message("at most one of environmentRef or environment may be set"))]
#[x_kube(validation = immutable_except_cancel())]
#[x_kube(validation = Rule::new("!has(self.kill) || !self.kill || self.cancel").message("kill needs cancel: a kill is a cancel without the grace period"))]
#[x_kube(validation = Rule::new("!has(self.held) || !self.held || (has(oldSelf.held) && oldSelf.held)").message("held can only be set when the execution is created"))]
#[x_kube(validation = Rule::new("!oldSelf.cancel || (has(self.deadline) == has(oldSelf.deadline) && (!has(self.deadline) || self.deadline == oldSelf.deadline))").message("the deadline cannot change after a cancel: termination began"))]
#[serde(rename_all = "camelCase")]
pub struct AgentExecutionSpec {
    /// The Agent to run, by name in this namespace. Exactly one of `agentRef` or `agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_ref: Option<Reference>,
    /// An inline agent definition. Exactly one of `agentRef` or `agent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSpec>,
    /// The input given to the agent (`ERRAND_INPUT`, `ERRAND_INPUT_FILE`): at most 256 KiB
    /// (262144 bytes). Pass larger input as a file in the working directory (a Fileset).
    #[serde(default)]
    #[schemars(length(max = MAX_INPUT_BYTES))]
    pub input: String,
    /// The AgentEnvironment to merge in, by name in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_ref: Option<Reference>,
    /// An inline environment. At most one of `environmentRef` or `environment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<AgentEnvironmentSpec>,
    /// Narrows its environment's `egress`, never widens it: every range must lie inside one of
    /// the environment's, on ports that rule allows. `allow: []` allows nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    /// The working directory staged into `/workspace` before the agent starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<Workdir>,
    /// Seconds the agent may run before it is stopped (SIGTERM, grace, SIGKILL), at most
    /// 604800 (7 days). Results are still saved after a timeout.
    #[serde(default = "default_timeout_seconds")]
    #[schemars(range(min = 1, max = MAX_TIMEOUT_SECONDS))]
    pub timeout_seconds: i64,
    /// Seconds the pod may wait to start (scheduling, image pull) before the execution fails,
    /// at most 604800 (7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TIMEOUT_SECONDS))]
    pub start_timeout_seconds: Option<i64>,
    /// Turn on the agent's telemetry export automatically.
    #[serde(default)]
    pub auto_telemetry: bool,
    /// An optional extension that changes how the run is driven.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<Extension>,
    /// Kueue LocalQueue to submit the Job to; the Job is then created suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    /// Seconds after the run finishes (Succeeded, Failed or Cancelled) when the execution is
    /// deleted, and its results and children with it. 0 deletes it as soon as it finishes.
    /// Without it, the namespace's `errand.dev/ttl-seconds-after-finished` annotation applies,
    /// else the controller's default (which may be none: kept until deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_TTL_SECONDS_AFTER_FINISHED))]
    pub ttl_seconds_after_finished: Option<i64>,
    /// Run again, in this namespace, the execution named here, exactly as it ran: everything
    /// comes from its snapshot (agent config, environment, secrets references, compute, the
    /// workdir at its digests, input, timeouts, queue), and on a cluster the agent's image is
    /// pinned to the digest its run reported (`status.imageID`). Exactly one of `agentRef`,
    /// `agent` or `rerunOf`; with `rerunOf`, only `ttlSecondsAfterFinished` and `cancel` may be
    /// set besides (`timeoutSeconds` is not read). `errand rerun NAME` writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<Reference>,
    /// Set to true to stop the run; partial results are saved. Can only go from false to true.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self || !oldSelf").message("cancel can only change from false to true"))]
    pub cancel: bool,
    /// With `cancel`: stop the agent at once with SIGKILL, without its grace period (`errand
    /// kill --signal KILL`); partial results are still saved. Can only go from false to true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[x_kube(validation = Rule::new("self || !oldSelf").message("kill can only change from false to true"))]
    pub kill: bool,
    /// Defined but not started (`errand create`): the controller creates nothing and shows
    /// phase `Created` until this is cleared (`errand start`). Can only go from true to false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    #[x_kube(validation = Rule::new("!self || oldSelf").message("held can only change from true to false"))]
    pub held: bool,
    /// A change of the run's deadline (`errand deadline set|clear`), accepted by the controller
    /// in `status.deadline`; may change while the execution runs, never after a cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DeadlineChange>,
    /// Where the controller sends the run's end: a signed CloudEvent POSTed to a webhook,
    /// retried with backoff, recorded in `status.notify` (`errand execute --notify-webhook`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<NotifySpec>,
}

/// A change of a running execution's deadline. The controller accepts it once (per `request`)
/// and records in `status.deadline` when, and the deadline from then on; the agent's runner
/// learns it through the pod's `errand.dev/control` annotation, and the Job's
/// `activeDeadlineSeconds` backstop moves with it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadlineChange {
    /// Seconds from the moment the controller accepts the change, at most 604800 (7 days);
    /// none: back to the deadline `timeoutSeconds` gives (counted from the agent's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_TIMEOUT_SECONDS))]
    pub in_seconds: Option<i64>,
    /// Tells this change apart from earlier ones (any new value each time, such as a random id).
    #[schemars(length(min = 1, max = 64))]
    pub request: String,
}

/// How the controller answered the last deadline change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeadlineStatus {
    /// The `spec.deadline.request` this answers.
    pub request: String,
    /// When the controller accepted it: the moment `inSeconds` counts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<Time>,
    /// The deadline in effect from then on (none: `timeoutSeconds` from the agent's start, not
    /// fixed before it starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Time>,
    /// Why the change was refused (termination had begun, or the run had ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

fn default_timeout_seconds() -> i64 {
    DEFAULT_TIMEOUT_SECONDS
}

impl Default for AgentExecutionSpec {
    /// An empty spec with the same defaults the API server applies.
    fn default() -> Self {
        Self {
            agent_ref: None,
            agent: None,
            input: String::new(),
            environment_ref: None,
            environment: None,
            egress: None,
            workdir: None,
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            start_timeout_seconds: None,
            auto_telemetry: false,
            extension: None,
            queue_name: None,
            ttl_seconds_after_finished: None,
            rerun_of: None,
            cancel: false,
            kill: false,
            held: false,
            deadline: None,
            notify: None,
        }
    }
}

/// The working directory: a base Fileset and Filesets mounted at paths inside it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Workdir {
    /// Base content: `fileset` or `fileset#subpath/` (only that subtree, re-rooted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Filesets (or parts of them) placed at paths inside the workdir; they win over the base.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.all(a, self.filter(b, b.mountPath == a.mountPath || b.mountPath.startsWith(a.mountPath + '/')).size() == 1)").message("mount paths must not overlap"))]
    pub artifact_mounts: Vec<ArtifactMount>,
}

/// A Fileset (or a path in it) mounted into the workdir.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactMount {
    /// What to mount: `fileset` or `fileset#path`.
    #[serde(rename = "ref")]
    #[schemars(length(min = 1, max = 512))]
    pub fileset_ref: String,
    /// Where to mount it, relative to the workdir: no leading `/`, no `.` or `..` segments.
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new("!self.startsWith('/')").message("mountPath must be relative"))]
    #[x_kube(validation = Rule::new("!self.matches('(^|/)[.][.]?(/|$)')").message("mountPath must not contain '.' or '..' segments"))]
    #[x_kube(validation = Rule::new("!self.endsWith('/') && !self.contains('//')").message("mountPath must not end in '/' or contain '//'"))]
    pub mount_path: String,
}

/// An extension that changes how the run is driven.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Extension {
    /// Kind of extension: an installed AgentExtension's `extensionKind`.
    pub kind: String,
    /// Settings of the extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "extension_config_schema")]
    pub config: Option<Map<String, Value>>,
}

fn extension_config_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    super::common::preserved_object("Settings of the extension.")
}

/// Observed state of an execution.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentExecutionStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Name of the resolved agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Standard conditions: `Resolved`, `Started`, `Complete`, `Failed`, `ResultsSaved`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The immutable snapshot everything in the run comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
    /// The agent's image by digest, as the kubelet reported it when the agent's container
    /// started (its container status `imageID`): what `errand rerun` pins the rerun to.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Name of the Job that runs the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// When the agent started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the run reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// How long the run took, for display (for example `1m20s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Exit code of the agent process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// A short human message: while `Queued`, why Kueue has not admitted the Job yet; on
    /// failure it ends with the tail of the agent's stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The saved results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ResultEntry>,
    /// The GPUs the agent's container was given, as the runner saw them in
    /// `NVIDIA_VISIBLE_DEVICES` (set by the node's device plugin), once the run ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_devices: Vec<String>,
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How the controller answered the last `spec.deadline` change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DeadlineStatus>,
    /// How the delivery of the run's end to `spec.notify` went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<NotifyStatus>,
}

/// Where the execution's snapshot is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRef {
    /// Name of the immutable ConfigMap that holds the snapshot.
    pub config_map: String,
    /// sha256 of the snapshot's canonical JSON, as `sha256:<hex>`.
    pub digest: String,
}
