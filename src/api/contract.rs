//! The names every layer agrees on: accepted config formats, the environment the runner owns, the labels and annotations on what the controller creates, and the containers and volumes of an execution's pod.
//!
//! They are the contract between the CRDs (whose CEL rules are generated from them), the
//! resolver, the runner, the controller and the command line, so each is written once, here.

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
/// The variables the runner sets outside the [`RESERVED_ENV_PREFIX`] family; reserved too.
pub const RESERVED_ENV_NAMES: [&str; 1] = [ENV_AGENT_CONFIG_PATH];

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
/// Annotation with the snapshot's digest, on the snapshot ConfigMap and the Job.
pub const SNAPSHOT_DIGEST_ANNOTATION: &str = "errand.dev/snapshot-digest";

/// Name of the init container that installs errand and stages the workdir.
pub const STAGE_CONTAINER: &str = "errand-stage";
/// Name of the container that runs the agent under errand's runner.
pub const AGENT_CONTAINER: &str = "agent";

/// The volume the stage container copies the errand binary into.
pub const BIN_VOLUME: &str = "errand-bin";
/// The working directory's volume.
pub const WORKSPACE_VOLUME: &str = "workspace";
/// The snapshot ConfigMap's volume.
pub const SNAPSHOT_VOLUME: &str = "snapshot";
/// The grants Secret's volume.
pub const GRANTS_VOLUME: &str = "grants";
/// The runner's scratch volume: input, response, logs and artifacts.
pub const SCRATCH_VOLUME: &str = "scratch";
