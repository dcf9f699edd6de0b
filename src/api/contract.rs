//! The names every layer agrees on: accepted config formats, the environment the runner owns, the labels and annotations on what the controller creates, the containers and volumes of an execution's pod, and the condition types and reasons of its status.
//!
//! They are the contract between the CRDs (whose CEL rules are generated from them), the
//! resolver, the runner, the controller and the command line, so each is written once, here.

use std::fmt;

/// Agent config formats errand accepts (`config_format`).
pub const ACCEPTED_CONFIG_FORMATS: [&str; 2] = ["agents-spec-v1", "nemo-agents-spec-v1"];

/// Prefix of the environment variables the runner owns; none of them may be bound.
pub const RESERVED_ENV_PREFIX: &str = "ERRAND_";
/// Environment variable with the input text (when it fits in one environment string).
pub const ENV_INPUT: &str = "ERRAND_INPUT";
/// Environment variable with the path of a file holding the input text.
pub const ENV_INPUT_FILE: &str = "ERRAND_INPUT_FILE";
/// Environment variable with the directory whose contents become `output_artifacts`.
pub const ENV_ARTIFACTS_DIR: &str = "ERRAND_ARTIFACTS_DIR";
/// Environment variable with the file the agent may write its final answer to.
pub const ENV_RESPONSE_FILE: &str = "ERRAND_RESPONSE_FILE";
/// Environment variable with the path of the agent configuration (the snapshot's merged config).
pub const ENV_AGENT_CONFIG_PATH: &str = "AGENT_CONFIG_PATH";
/// The name of an AgentDeployment's Deployment and Service: `errand-<deployment>` (its name
/// is a DNS label of at most 56 characters, so this is one of at most 63).
pub fn deployment_service_name(deployment: &str) -> String {
    format!("errand-{deployment}")
}

/// Environment variable with the port a deployed agent server listens on.
pub const ENV_PORT: &str = "ERRAND_PORT";
/// The name of a deployed agent server's container port and of its Service's port; the
/// gateway finds the port in the Service's EndpointSlices by it.
pub const AGENT_SERVER_PORT_NAME: &str = "http";
/// Environment variable of an extension's step: the extension kind it runs as.
pub const ENV_EXTENSION_KIND: &str = "ERRAND_EXTENSION_KIND";
/// Environment variable of an extension's step: the execution's `extension.config` as JSON.
pub const ENV_EXTENSION_CONFIG: &str = "ERRAND_EXTENSION_CONFIG";
/// Environment variable of an extension's step: the file holding its config as JSON.
pub const ENV_EXTENSION_CONFIG_FILE: &str = "ERRAND_EXTENSION_CONFIG_FILE";
/// Environment variable of an extension's step: the directory holding the run's results as
/// files (`output_workdir.tar.gz`, `run_result.json`, ...), read-only input.
pub const ENV_EXTENSION_RESULTS_DIR: &str = "ERRAND_EXTENSION_RESULTS_DIR";
/// Environment variable of an extension's step: the directory where it writes one file or
/// directory per declared result name; errand saves each (a directory as a `tar.gz`).
pub const ENV_EXTENSION_OUTPUT_DIR: &str = "ERRAND_EXTENSION_OUTPUT_DIR";
/// Environment variable of an extension's step: the execution's name.
pub const ENV_EXECUTION_NAME: &str = "ERRAND_EXECUTION_NAME";
/// Environment variable of an extension's step: the execution's namespace.
pub const ENV_EXECUTION_NAMESPACE: &str = "ERRAND_EXECUTION_NAMESPACE";
/// The variables the runner sets outside the [`RESERVED_ENV_PREFIX`] family; reserved too.
pub const RESERVED_ENV_NAMES: [&str; 1] = [ENV_AGENT_CONFIG_PATH];

/// The results errand itself saves for every run (`store::keys::ResultName`); an
/// AgentExtension may declare none of them.
pub const RESULT_NAMES: [&str; 6] = [
    "input_workdir",
    "output_workdir",
    "output_artifacts",
    "run_result",
    "run_error",
    "manifest.json",
];
/// What a run whose agent ran to its end saves, in the order it saves them: the manifest last,
/// listing all the others (`&COMPLETED_RUN_RESULTS[..4]` is what a manifest lists).
pub const COMPLETED_RUN_RESULTS: [&str; 5] = [
    "input_workdir",
    "output_workdir",
    "output_artifacts",
    "run_result",
    "manifest.json",
];
/// What a run that did not get to its end (timed out, cancelled, failed to start) saves: as
/// [`COMPLETED_RUN_RESULTS`], with `run_error` in place of `run_result`.
pub const INTERRUPTED_RUN_RESULTS: [&str; 5] = [
    "input_workdir",
    "output_workdir",
    "output_artifacts",
    "run_error",
    "manifest.json",
];
/// What an AgentExtension's result name looks like: a store key segment and a file name.
pub const EXTENSION_RESULT_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$";

/// Label on every object the controller creates.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "errand";
/// Label with the execution's name (shortened with a hash when it does not fit a label value).
pub const EXECUTION_LABEL: &str = "errand.dev/execution";
/// Label with the execution's uid; selects the pods of exactly one execution.
pub const EXECUTION_UID_LABEL: &str = "errand.dev/execution-uid";
/// Label with the agent's name (shortened with a hash when it does not fit a label value).
pub const AGENT_LABEL: &str = "errand.dev/agent";
/// Kueue's queue label: a Job carrying it is admitted by Kueue.
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Annotation with the execution's full name; pods map back to their execution through it.
pub const EXECUTION_NAME_ANNOTATION: &str = "errand.dev/execution-name";
/// Annotation of an agent's pod with its run control (a JSON `RunControl`: a changed deadline,
/// a kill), which a downward-API volume projects into the agent container for the runner.
pub const CONTROL_ANNOTATION: &str = "errand.dev/control";
/// The volume of the projected run control, and where the agent container mounts it.
pub const CONTROL_VOLUME: &str = "errand-control";
/// Where the agent container finds its projected run control file (`<mount>/control`).
pub const CONTROL_MOUNT_PATH: &str = "/errand/control";
/// Label with an AgentDeployment's name on its children and pods (shortened with a hash
/// when it does not fit a label value); the Service selects the pods by it.
pub const DEPLOYMENT_LABEL: &str = "errand.dev/deployment";
/// Label with an AgentDeployment's uid on its children and pods.
pub const DEPLOYMENT_UID_LABEL: &str = "errand.dev/deployment-uid";
/// Annotation on an AgentDeployment during `errand redeploy`: the Agent the new one replaces,
/// removed once nothing references it (a re-run of an interrupted redeploy finds it here).
pub const REPLACED_AGENT_ANNOTATION: &str = "errand.dev/replaced-agent";
/// Annotation on an agent pod whose run reaches host names through errand's egress proxy:
/// its `egress.hosts` (JSON), which the proxy reads from the pod it finds at the caller's
/// address.
pub const EGRESS_HOSTS_ANNOTATION: &str = "errand.dev/egress-hosts";
/// Annotation on an agent pod whose models' credentials are proxied: the proxied models
/// (alias, real `base_url`, Secret and key; JSON), which the egress proxy's model route reads
/// from the pod it finds at the caller's address.
pub const MODEL_ROUTES_ANNOTATION: &str = "errand.dev/model-routes";
/// Annotation on an execution whose runner reported the run's end to a replica that does not
/// reconcile: the report, checked against the saved manifest and sealed under the signing key
/// (JSON). The reconciling replica believes only a seal it can verify for that execution.
pub const RUN_ENDED_ANNOTATION: &str = "errand.dev/run-ended";
/// Annotation with the snapshot's digest, on the snapshot ConfigMap and the Job.
pub const SNAPSHOT_DIGEST_ANNOTATION: &str = "errand.dev/snapshot-digest";
/// Annotation on an execution: the variables `execute --env` set, as errand shows them (JSON;
/// a masked value reads `***`). Display only: the values the agent gets are in the spec.
pub const SHOWN_ENV_ANNOTATION: &str = "errand.dev/env";
/// Annotation on an execution: how many bytes `execute` read from its standard input (which
/// became the execution's input).
pub const STDIN_BYTES_ANNOTATION: &str = "errand.dev/stdin-bytes";
/// Key of the snapshot document (canonical JSON) in an execution's snapshot ConfigMap.
pub const SNAPSHOT_KEY: &str = "snapshot.json";
/// Annotation on a Namespace: seconds its finished executions are kept when they set no
/// `ttlSecondsAfterFinished` of their own (overrides the controller's default).
pub const NAMESPACE_TTL_ANNOTATION: &str = "errand.dev/ttl-seconds-after-finished";
/// The reason of a Job's failure when its pod failure policy failed it: errand's Jobs have one
/// rule, a pod with condition `DisruptionTarget` (evicted, preempted, lost with its node).
pub const JOB_FAILED_BY_DISRUPTION: &str = "PodFailurePolicy";

/// The label on each execution an AgentSchedule created: the schedule's name.
pub const SCHEDULE_LABEL: &str = "errand.dev/schedule";
/// The annotation on each execution an AgentSchedule created: the scheduled time it runs for
/// (RFC 3339), which its name also encodes.
pub const SCHEDULED_TIME_ANNOTATION: &str = "errand.dev/scheduled-time";

/// Every label errand sets on what it creates, or reads; the book's generated reference lists
/// them (`docs/src/reference/labels-annotations.md`), and its test fails on one left out.
pub const LABELS: [&str; 8] = [
    MANAGED_BY_LABEL,
    EXECUTION_LABEL,
    EXECUTION_UID_LABEL,
    AGENT_LABEL,
    KUEUE_QUEUE_LABEL,
    DEPLOYMENT_LABEL,
    DEPLOYMENT_UID_LABEL,
    SCHEDULE_LABEL,
];
/// Every annotation errand sets or reads, listed in the same reference as [`LABELS`].
pub const ANNOTATIONS: [&str; 11] = [
    EXECUTION_NAME_ANNOTATION,
    CONTROL_ANNOTATION,
    REPLACED_AGENT_ANNOTATION,
    SNAPSHOT_DIGEST_ANNOTATION,
    EGRESS_HOSTS_ANNOTATION,
    MODEL_ROUTES_ANNOTATION,
    RUN_ENDED_ANNOTATION,
    SHOWN_ENV_ANNOTATION,
    STDIN_BYTES_ANNOTATION,
    NAMESPACE_TTL_ANNOTATION,
    SCHEDULED_TIME_ANNOTATION,
];

/// Name of the init container that installs errand and stages the workdir.
pub const STAGE_CONTAINER: &str = "errand-stage";
/// Name of the container that runs the agent under errand's runner.
pub const AGENT_CONTAINER: &str = "agent";
/// Name of the container that runs an execution's extension (on its AgentExtension's image)
/// once the agent's run succeeded and its results are saved.
pub const EXTENSION_CONTAINER: &str = "errand-extension";

/// The volume the stage container copies the errand binary into.
pub const BIN_VOLUME: &str = "errand-bin";
/// The working directory's volume.
pub const WORKSPACE_VOLUME: &str = "workspace";
/// The snapshot ConfigMap's volume.
pub const SNAPSHOT_VOLUME: &str = "snapshot";
/// The in-memory volume where `errand stage` leaves the grants for `run-agent`, which removes
/// them before the agent starts.
pub const GRANTS_VOLUME: &str = "grants";
/// The projected ServiceAccount token volume, mounted into the stage container only.
pub const GRANT_TOKEN_VOLUME: &str = "errand-grant-token";
/// The audience of that token: the controller's grant endpoint accepts no other, so a token
/// meant for the API server (or anything else) cannot be traded for grants, nor this one used
/// elsewhere.
pub const GRANT_TOKEN_AUDIENCE: &str = "errand.dev/grants";
/// The runner's scratch volume: input, response, logs and artifacts.
pub const SCRATCH_VOLUME: &str = "scratch";
/// The in-memory volume where `errand stage` leaves the extension's grants, mounted into the
/// stage and extension containers only (never the agent's).
pub const EXTENSION_GRANTS_VOLUME: &str = "extension-grants";
/// The volume where `run-agent` tells the extension's container that the agent's run ended
/// (read-only there); a wake-up only: the extension's runner reads how the run ended from the
/// store, which the agent cannot write.
pub const HANDOFF_VOLUME: &str = "handoff";
/// The extension step's own directories (results, output, working directory).
pub const EXTENSION_VOLUME: &str = "extension";

/// A condition of an execution's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// The spec was resolved and snapshotted (or not, with reason `InvalidSpec`).
    Resolved,
    /// The agent started.
    Started,
    /// The run succeeded (`kubectl wait --for=condition=Complete`).
    Complete,
    /// The run failed or was cancelled; the reason says which.
    Failed,
    /// The results are saved (or not, with reason `ResultsUploadFailed`).
    ResultsSaved,
    /// The controller's last attempts to move the execution on failed and it keeps retrying;
    /// the message holds the last error. Present only while that lasts.
    Retrying,
    /// An AgentDeployment has a pod that passes its readiness probe and serves requests; an
    /// AgentSchedule's spec is valid and it is not suspended.
    Ready,
    /// The execution's extension ran after the agent succeeded (reason `ExtensionSucceeded`),
    /// or failed (`ExtensionFailed`). Absent without an extension or while it has not ended.
    ExtensionSucceeded,
}

impl ConditionType {
    /// The condition's `type` as it appears in the status.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionType::Resolved => "Resolved",
            ConditionType::Started => "Started",
            ConditionType::Complete => "Complete",
            ConditionType::Failed => "Failed",
            ConditionType::ResultsSaved => "ResultsSaved",
            ConditionType::Retrying => "Retrying",
            ConditionType::Ready => "Ready",
            ConditionType::ExtensionSucceeded => "ExtensionSucceeded",
        }
    }
}

impl fmt::Display for ConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The machine-readable reason of a condition, of a Warning event and of a failed run record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The spec failed resolution or validation.
    InvalidSpec,
    /// The spec resolved and its snapshot was written.
    Resolved,
    /// The Job waits for Kueue to admit it.
    Queued,
    /// The pod is being scheduled, pulled or staged.
    PodStarting,
    /// The agent process started.
    AgentStarted,
    /// The agent exited 0 and its results were saved.
    Succeeded,
    /// The run passed its deadline (in the pod, or the Job's backstop).
    DeadlineExceeded,
    /// The pod did not start within `startTimeoutSeconds`.
    StartTimeout,
    /// An image could not be pulled within `startTimeoutSeconds`.
    ImagePullFailed,
    /// The pod could not be scheduled (or was refused by the node) within `startTimeoutSeconds`.
    Unschedulable,
    /// The agent exited non-zero, was killed, or could not be started.
    AgentFailed,
    /// The working directory could not be staged.
    StageFailed,
    /// The pod was evicted, preempted or otherwise disrupted (its `DisruptionTarget` condition
    /// says by what), or its Job was suspended under it.
    PodEvicted,
    /// The pod was deleted by something other than errand (`kubectl delete pod`, a script).
    PodDeleted,
    /// The pod's node stopped responding for longer than the pod tolerates, and the pod was
    /// evicted from it; errand never starts a second pod.
    NodeLost,
    /// The API server permanently refused one of the execution's children (a Job, ConfigMap
    /// or Secret): an admission policy, or a spec the API server's validation refuses.
    CreateRejected,
    /// The controller failed to reconcile the execution several times in a row (condition
    /// `Retrying`).
    ReconcileError,
    /// The run was cancelled on request.
    Cancelled,
    /// The Job disappeared before the run ended; it is never re-created.
    JobDeleted,
    /// Every result was saved.
    ResultsSaved,
    /// Some results could not be saved.
    ResultsUploadFailed,
    /// A local run's supervising process ended before the run did.
    SupervisorLost,
    /// An AgentDeployment has a ready pod.
    AgentReady,
    /// An AgentDeployment's pods are not ready (yet, or any more): its starting window runs.
    AgentNotReady,
    /// No pod of an AgentDeployment became ready within `startingTimeoutSeconds` of the start
    /// of its current uninterrupted Starting period.
    StartingTimeout,
    /// An AgentDeployment is being deleted with its children.
    Deleting,
    /// An AgentSchedule creates its runs when they are due.
    Scheduling,
    /// An AgentSchedule is suspended (`spec.suspend`): it creates no runs.
    Suspended,
    /// The extension ran and saved its results.
    ExtensionSucceeded,
    /// The extension exited non-zero, timed out, could not start or did not save its results;
    /// the execution is then `Failed` with this reason, and the agent's results stay.
    ExtensionFailed,
}

impl Reason {
    /// Every reason.
    pub const ALL: [Reason; 24] = [
        Reason::InvalidSpec,
        Reason::Resolved,
        Reason::Queued,
        Reason::PodStarting,
        Reason::AgentStarted,
        Reason::Succeeded,
        Reason::DeadlineExceeded,
        Reason::StartTimeout,
        Reason::ImagePullFailed,
        Reason::Unschedulable,
        Reason::AgentFailed,
        Reason::StageFailed,
        Reason::PodEvicted,
        Reason::PodDeleted,
        Reason::NodeLost,
        Reason::CreateRejected,
        Reason::ReconcileError,
        Reason::Cancelled,
        Reason::JobDeleted,
        Reason::ResultsSaved,
        Reason::ResultsUploadFailed,
        Reason::SupervisorLost,
        Reason::ExtensionSucceeded,
        Reason::ExtensionFailed,
    ];

    /// The reason as it appears in conditions, events and records (PascalCase).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::Resolved => "Resolved",
            Reason::Queued => "Queued",
            Reason::PodStarting => "PodStarting",
            Reason::AgentStarted => "AgentStarted",
            Reason::Succeeded => "Succeeded",
            Reason::DeadlineExceeded => "DeadlineExceeded",
            Reason::StartTimeout => "StartTimeout",
            Reason::ImagePullFailed => "ImagePullFailed",
            Reason::Unschedulable => "Unschedulable",
            Reason::AgentFailed => "AgentFailed",
            Reason::StageFailed => "StageFailed",
            Reason::PodEvicted => "PodEvicted",
            Reason::PodDeleted => "PodDeleted",
            Reason::NodeLost => "NodeLost",
            Reason::CreateRejected => "CreateRejected",
            Reason::ReconcileError => "ReconcileError",
            Reason::Cancelled => "Cancelled",
            Reason::JobDeleted => "JobDeleted",
            Reason::ResultsSaved => "ResultsSaved",
            Reason::ResultsUploadFailed => "ResultsUploadFailed",
            Reason::SupervisorLost => "SupervisorLost",
            Reason::AgentReady => "AgentReady",
            Reason::AgentNotReady => "AgentNotReady",
            Reason::StartingTimeout => "StartingTimeout",
            Reason::Deleting => "Deleting",
            Reason::Scheduling => "Scheduling",
            Reason::Suspended => "Suspended",
            Reason::ExtensionSucceeded => "ExtensionSucceeded",
            Reason::ExtensionFailed => "ExtensionFailed",
        }
    }

    /// The reason written as `text` (in a condition or a record), if it is one of errand's.
    pub fn parse(text: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
