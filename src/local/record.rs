//! Execution records of the local backend: one JSON file per execution, found by name or unambiguous prefix.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::files::{create_private_dir, create_private_dir_all, write_private};
use super::paths::DataDir;
use super::process::ProcessIdentity;
use crate::api::contract::Reason;
use crate::api::{Phase, ResultEntry};
use crate::runner::outcome::Outcome;

/// Version of the record document.
pub const RECORD_SCHEMA_VERSION: u32 = 1;

/// What the local backend knows about one execution; the same fields `errand status` shows for
/// a cluster execution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExecutionRecord {
    /// Always [`RECORD_SCHEMA_VERSION`].
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
    pub notify: Option<super::notify::NotifySettings>,
    /// The notifications sent so far, each with how its delivery went.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<super::notify::NotificationEvent>,
}

impl ExecutionRecord {
    /// The notification event of this execution as it stands: a finished one is dated when the
    /// run ended (as a cluster's is), an output match when it is seen.
    pub fn notification(
        &self,
        kind: &str,
        matched: Option<crate::api::MatchedLine>,
    ) -> super::notify::NotificationEvent {
        let time = match self.completed_at {
            Some(ended) if kind == crate::api::EXECUTION_FINISHED => ended,
            _ => jiff::Timestamp::now(),
        };
        super::notify::NotificationEvent {
            event: crate::api::ExecutionEvent {
                kind: kind.to_owned(),
                time,
                execution: self.name.clone(),
                namespace: self.namespace.clone(),
                uid: self.uid.clone(),
                phase: self.phase,
                reason: self.reason.clone(),
                exit_code: self.exit_code,
                matched,
            },
            deliveries: Vec::new(),
        }
    }

    /// A new execution that has not started, supervised by this process (which runs it, or
    /// starts the detached supervisor that takes over).
    pub fn pending(
        name: String,
        namespace: &str,
        agent: &str,
        snapshot_digest: String,
        store: &str,
        inherit_env: bool,
    ) -> Self {
        Self {
            schema_version: RECORD_SCHEMA_VERSION,
            uid: generate_uid(&name),
            name,
            namespace: namespace.to_owned(),
            agent: agent.to_owned(),
            phase: Phase::Pending,
            reason: None,
            message: None,
            response: None,
            exit_code: None,
            timed_out: false,
            created_at: jiff::Timestamp::now(),
            started_at: None,
            completed_at: None,
            results: Vec::new(),
            snapshot_digest,
            image_id: None,
            rerun_of: None,
            store: store.to_owned(),
            cancel_requested: false,
            inherit_env,
            otlp_endpoint: None,
            supervisor: ProcessIdentity::current(),
            extension: None,
            tags: Vec::new(),
            env: std::collections::BTreeMap::new(),
            stdin_bytes: None,
            notify: None,
            notifications: Vec::new(),
        }
    }

    /// This record with what the user set on `from` (its tags, shown variables, notification
    /// sinks and watches, and standard input's size): what a restart or a rerun of `from`
    /// keeps. A watch starts at the new run's first line; no event of `from` is kept.
    pub fn with_user_settings_of(mut self, from: &ExecutionRecord) -> Self {
        self.tags = from.tags.clone();
        self.env = from.env.clone();
        self.stdin_bytes = from.stdin_bytes;
        self.notify = from.notify.clone().map(|mut notify| {
            for watch in &mut notify.output_matches {
                watch.stdout_from = 0;
                watch.stderr_from = 0;
            }
            notify
        });
        self
    }

    /// Seconds between start and end, when both are known.
    pub fn duration_seconds(&self) -> Option<f64> {
        let (start, end) = (self.started_at?, self.completed_at?);
        Some(end.duration_since(start).as_secs_f64())
    }

    /// The record of a run whose supervisor is gone before the run ended: failed, with reason
    /// `SupervisorLost`. Its results are whatever the supervisor had saved.
    pub fn supervisor_lost(mut self, now: jiff::Timestamp) -> Self {
        let pid = self.supervisor.map(|s| s.pid).unwrap_or_default();
        self.set_outcome(&Outcome::failed(
            Reason::SupervisorLost,
            format!(
                "the process supervising the run (pid {pid}) ended before the run did; it was killed or the machine restarted"
            ),
        ));
        self.completed_at = Some(now);
        self
    }

    /// Records how the run ended.
    pub fn set_outcome(&mut self, outcome: &Outcome) {
        self.phase = outcome.phase;
        self.reason = Some(outcome.reason.as_str().to_owned());
        self.message = Some(outcome.message.clone());
    }
}

/// Why a record could not be found or saved.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// No execution has this name.
    #[error("no execution named {0:?} in namespace {1:?}")]
    NotFound(String, String),
    /// An execution with this name exists already.
    #[error(
        "execution {0:?} already exists in namespace {1:?}; choose another name, or delete it first"
    )]
    AlreadyExists(String, String),
    /// The record file could not be read or written.
    #[error("execution record {path}: {message}")]
    Io {
        /// The record file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// The execution records in a data directory.
#[derive(Clone, Debug)]
pub struct Records {
    data: DataDir,
}

impl Records {
    /// The records in `data`.
    pub fn new(data: DataDir) -> Self {
        Self { data }
    }

    /// The file holding an execution's standard input (`execute --stdin`).
    pub fn stdin_file(&self, namespace: &str, name: &str) -> PathBuf {
        self.dir(namespace, name).join("stdin")
    }

    /// Appends a sent notification to the execution's events file.
    pub fn append_event(
        &self,
        namespace: &str,
        name: &str,
        event: &super::notify::NotificationEvent,
    ) -> std::io::Result<()> {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir(namespace, name).join("events.ndjson"))?;
        let line = serde_json::to_string(event).expect("an event serializes");
        file.write_all(format!("{line}\n").as_bytes())
    }

    /// The notifications sent for an execution, oldest first.
    pub fn events(&self, namespace: &str, name: &str) -> Vec<super::notify::NotificationEvent> {
        std::fs::read_to_string(self.dir(namespace, name).join("events.ndjson"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Keeps an execution's standard input beside its record (readable by its owner only).
    pub fn write_stdin(
        &self,
        namespace: &str,
        name: &str,
        bytes: &[u8],
    ) -> Result<(), RecordError> {
        let path = self.stdin_file(namespace, name);
        write_private(&path, bytes).map_err(|e| RecordError::Io {
            path,
            message: e.to_string(),
        })
    }

    /// The directory of one execution.
    pub fn dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.data.execution(namespace, name)
    }

    /// The pid of the process supervising the run, while that very process runs.
    pub fn supervisor_pid(&self, namespace: &str, name: &str) -> Option<i32> {
        let supervisor = self.read(namespace, name).ok()?.supervisor?;
        supervisor
            .is_running()
            .then(|| i32::try_from(supervisor.pid).ok())
            .flatten()
    }

    fn file(&self, namespace: &str, name: &str) -> PathBuf {
        self.dir(namespace, name).join("record.json")
    }

    /// The snapshot the execution runs from (canonical JSON), written right after its record.
    pub fn snapshot_file(&self, namespace: &str, name: &str) -> PathBuf {
        self.dir(namespace, name).join("snapshot.json")
    }

    /// Reads the snapshot the execution runs from.
    pub fn snapshot(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<crate::resolve::Snapshot, RecordError> {
        let path = self.snapshot_file(namespace, name);
        std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|message| RecordError::Io { path, message })
    }

    /// Reads the record of the execution named exactly `name`.
    pub fn read(&self, namespace: &str, name: &str) -> Result<ExecutionRecord, RecordError> {
        let path = self.file(namespace, name);
        let bytes = std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                RecordError::NotFound(name.to_owned(), namespace.to_owned())
            }
            _ => RecordError::Io {
                path: path.clone(),
                message: e.to_string(),
            },
        })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|value| crate::resolve::decode(value).map_err(|p| p.to_string()))
            .map_err(|message| RecordError::Io { path, message })
    }

    /// Reads the record of `name` as it stands: a run that has not ended although its supervisor
    /// is gone is recorded, from now on, as failed with reason `SupervisorLost`.
    pub fn read_current(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ExecutionRecord, RecordError> {
        let record = self.read(namespace, name)?;
        let lost =
            !record.phase.is_terminal() && record.supervisor.is_some_and(|s| !s.is_running());
        if !lost {
            return Ok(record);
        }
        // A supervisor writes its last record before it exits: read again now that it is gone.
        let record = self.read(namespace, name)?;
        if record.phase.is_terminal() {
            return Ok(record);
        }
        let record = record.supervisor_lost(jiff::Timestamp::now());
        self.write(&record)?;
        Ok(record)
    }

    /// Saves `record`, replacing the previous version atomically.
    pub fn write(&self, record: &ExecutionRecord) -> Result<(), RecordError> {
        let path = self.file(&record.namespace, &record.name);
        let bytes = serde_json::to_vec_pretty(record).expect("a record always serializes");
        write_private(&path, &bytes).map_err(|e| RecordError::Io {
            path,
            message: e.to_string(),
        })
    }

    /// Creates the record of a new execution; refuses a name that is taken.
    pub fn create(&self, record: &ExecutionRecord) -> Result<(), RecordError> {
        let dir = self.dir(&record.namespace, &record.name);
        create_private_dir_all(dir.parent().expect("an execution dir has a parent"))
            .and_then(|()| create_private_dir(&dir))
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    RecordError::AlreadyExists(record.name.clone(), record.namespace.clone())
                }
                _ => RecordError::Io {
                    path: dir,
                    message: e.to_string(),
                },
            })?;
        self.write(record)
    }

    /// Every namespace that has executions, sorted.
    pub fn namespaces(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.data.all_executions()) else {
            return Vec::new();
        };
        let mut namespaces: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().to_str().map(str::to_owned))
            .filter(|name| crate::resolve::object_name(name).is_ok())
            .collect();
        namespaces.sort();
        namespaces
    }

    /// Every execution name in `namespace`, sorted.
    pub fn names(&self, namespace: &str) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.data.executions(namespace)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                e.path()
                    .join("record.json")
                    .exists()
                    .then(|| e.file_name().to_str().map(str::to_owned))?
            })
            .collect();
        names.sort();
        names
    }

    /// Removes an execution's directory (record, snapshot, workspace, logs).
    pub fn remove(&self, namespace: &str, name: &str) -> Result<(), RecordError> {
        let dir = self.dir(namespace, name);
        std::fs::remove_dir_all(&dir).map_err(|e| RecordError::Io {
            path: dir,
            message: e.to_string(),
        })
    }
}

/// A fresh execution name: `<agent>-<5 random base-36 characters>`, within 63 characters.
pub fn generate_name(agent: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(std::process::id().to_le_bytes());
    hasher.update(jiff::Timestamp::now().as_nanosecond().to_le_bytes());
    hasher.update(agent.as_bytes());
    let suffix: String = hasher.finalize()[..5]
        .iter()
        .map(|b| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[usize::from(*b) % 36]))
        .collect();
    let stem: String = agent
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(56)
        .collect();
    let stem = stem.trim_matches('-').to_ascii_lowercase();
    if stem.is_empty() {
        format!("run-{suffix}")
    } else {
        format!("{stem}-{suffix}")
    }
}

/// A unique id for an execution or a deployment (hex, 32 characters).
pub(super) fn generate_uid(name: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update(std::process::id().to_le_bytes());
    hasher.update(jiff::Timestamp::now().as_nanosecond().to_le_bytes());
    hex::encode(&hasher.finalize()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_whose_supervisor_is_gone_is_failed_and_its_record_says_so() {
        let home = tempfile::tempdir().unwrap();
        let records = Records::new(DataDir::new(home.path()));
        let me = ProcessIdentity::current().unwrap();
        let record = ExecutionRecord {
            phase: Phase::Running,
            ..ExecutionRecord::pending("run-1".into(), "default", "a", String::new(), "", false)
        };
        records.create(&record).unwrap();
        assert_eq!(records.read_current("default", "run-1").unwrap(), record);
        assert_eq!(
            records.supervisor_pid("default", "run-1"),
            Some(me.pid as i32)
        );

        let gone = ExecutionRecord {
            supervisor: Some(ProcessIdentity {
                start_time: me.start_time + 1,
                ..me
            }),
            ..record
        };
        records.write(&gone).unwrap();
        assert_eq!(records.supervisor_pid("default", "run-1"), None);
        let current = records.read_current("default", "run-1").unwrap();
        assert_eq!(
            (current.phase, current.reason.as_deref()),
            (Phase::Failed, Some("SupervisorLost"))
        );
        assert!(current.completed_at.is_some());
        assert_eq!(
            records.read("default", "run-1").unwrap(),
            current,
            "recorded"
        );
    }

    #[test]
    fn generated_names_are_valid_object_names() {
        for agent in ["calculator", "My_Agent!", "", &"x".repeat(80)] {
            let name = generate_name(agent);
            assert!(crate::resolve::object_name(&name).is_ok(), "{name}");
            assert!(name.len() <= 63, "{name}");
        }
    }
}
