//! An execution as every command shows it and `-o json` prints it, whichever backend runs it: the answer's contract, kept apart from the local backend's disk record ([`ExecutionRecord`]).

use serde::Serialize;

use crate::api::{Phase, ResultEntry};
use crate::local::{ExecutionRecord, ProcessIdentity};

/// An execution as every command shows it: what it runs, how it stands and ended, and where its
/// results are. The local backend reads it off its record; the cluster backend off the
/// AgentExecution and its status.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Execution {
    /// The version of this execution document (`1`).
    pub schema_version: u32,
    /// The execution's name.
    pub name: String,
    /// Its namespace (workspace).
    pub namespace: String,
    /// A unique id that keeps a re-used name's results apart.
    pub uid: String,
    /// The agent that runs.
    pub agent: String,
    /// Lifecycle phase.
    pub phase: Phase,
    /// Machine-readable reason of how the run ended (`Succeeded`, `AgentFailed`,
    /// `DeadlineExceeded`, ...), as the execution's condition carries it on a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened, as on a cluster; on failure it ends with the tail of the agent's stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The agent's response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// The agent's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Whether the deadline passed.
    #[serde(default)]
    pub timed_out: bool,
    /// When the execution was submitted.
    pub created_at: jiff::Timestamp,
    /// When the agent started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<jiff::Timestamp>,
    /// When the execution ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<jiff::Timestamp>,
    /// The saved results.
    #[serde(default)]
    pub results: Vec<ResultEntry>,
    /// Digest of the snapshot the run came from.
    pub snapshot_digest: String,
    /// The agent's image by digest as the kubelet reported it (`status.imageID`); a local run
    /// has no image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The execution this one reran (`errand rerun`), whose snapshot it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<String>,
    /// URL of the store holding the results.
    pub store: String,
    /// Whether a cancel was requested.
    #[serde(default)]
    pub cancel_requested: bool,
    /// Whether the agent gets the caller's whole environment (`execute --inherit-env`) rather
    /// than only its resolved environment with `PATH`, `HOME`, `LANG` and `TZ`.
    #[serde(default)]
    pub inherit_env: bool,
    /// Where the run's auto telemetry goes (`autoTelemetry: true` with `--otlp-endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// The process that supervises the run (the `execute` command itself, or the detached
    /// supervisor of `--no-wait`). A run that is not finished while it no longer runs is
    /// reported as failed with reason `SupervisorLost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supervisor: Option<ProcessIdentity>,
    /// How the execution's extension step ended, once it ran (after the agent succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<crate::runner::ExtensionSummary>,
    /// Its tags (`execute --tag`, `errand tag set`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The variables the execution itself sets (`execute --env`, `--env-file`) as errand shows
    /// them: the value of a masked one (`--mask`) reads `***`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// How many bytes it was given on standard input (`execute --stdin`, `--stdin-file`, or a
    /// pipe): locally the agent's standard input, on a cluster its input file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_bytes: Option<u64>,
    /// Where its notifications go (`execute --notify-command`, `--notify-file`, `notify set`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<crate::local::notify::NotifySettings>,
    /// The notifications sent so far, each with how its delivery went.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<crate::local::notify::NotificationEvent>,
}

impl Execution {
    /// Seconds between start and end, when both are known.
    pub fn duration_seconds(&self) -> Option<f64> {
        let (start, end) = (self.started_at?, self.completed_at?);
        Some(end.duration_since(start).as_secs_f64())
    }
}

impl From<ExecutionRecord> for Execution {
    fn from(record: ExecutionRecord) -> Self {
        Self {
            schema_version: record.schema_version,
            name: record.name,
            namespace: record.namespace,
            uid: record.uid,
            agent: record.agent,
            phase: record.phase,
            reason: record.reason,
            message: record.message,
            response: record.response,
            exit_code: record.exit_code,
            timed_out: record.timed_out,
            created_at: record.created_at,
            started_at: record.started_at,
            completed_at: record.completed_at,
            results: record.results,
            snapshot_digest: record.snapshot_digest,
            image_id: record.image_id,
            rerun_of: record.rerun_of,
            store: record.store,
            cancel_requested: record.cancel_requested,
            inherit_env: record.inherit_env,
            otlp_endpoint: record.otlp_endpoint,
            supervisor: record.supervisor,
            extension: record.extension,
            tags: record.tags,
            env: record.env,
            stdin_bytes: record.stdin_bytes,
            notify: record.notify,
            notifications: record.notifications,
        }
    }
}
