//! Changing a local execution outside its run: holding a created one back and starting it, restarting a finished one in place, moving its deadline, and asking its runner for a kill or signals.
//!
//! Changes to a running execution go through its control file ([`ControlFile`]), under the
//! lock its runner takes before it stops the agent, so a change that commits first is honoured
//! and one that comes after the runner began stopping is refused.

use std::time::Duration;

use super::record::{ExecutionRecord, RecordError, Records};
use super::remove::results_of;
use crate::api::Phase;
use crate::runner::ScratchDir;
use crate::runner::control::{ControlFile, RunControl};
use crate::store::StoreError;
use crate::store::keys;

/// Why a lifecycle change was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// The execution is not in a state that allows the change.
    #[error("{0}")]
    InvalidState(String),
    /// The record could not be read or written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The old run's results could not be removed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The control file could not be written.
    #[error("the run control file: {0}")]
    Io(#[from] std::io::Error),
}

/// The control file of the execution `name`.
pub fn control_file(records: &Records, namespace: &str, name: &str) -> ControlFile {
    ControlFile::local(&records.dir(namespace, name))
}

/// Records a just prepared execution as `Created`: defined, not started, supervised by nobody.
pub fn hold_created(
    records: &Records,
    mut record: ExecutionRecord,
) -> Result<ExecutionRecord, RecordError> {
    record.phase = Phase::Created;
    record.supervisor = None;
    records.write(&record)?;
    Ok(record)
}

/// Makes a `Created` execution `Pending` under this process, which hands it to a supervisor.
pub fn release_created(
    records: &Records,
    namespace: &str,
    name: &str,
) -> Result<ExecutionRecord, LifecycleError> {
    let mut record = records.read(namespace, name)?;
    if record.phase != Phase::Created {
        return Err(LifecycleError::InvalidState(format!(
            "execution {name} is {:?}, not Created: only a created execution can be started",
            record.phase
        )));
    }
    record.phase = Phase::Pending;
    record.supervisor = crate::local::ProcessIdentity::current();
    records.write(&record)?;
    Ok(record)
}

/// What still runs of an ended execution's last run, which a restart must not overlap: its
/// supervisor, or processes of its agent's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leftover {
    /// The supervisor (this pid) has not exited yet.
    Supervisor(u32),
    /// Processes of the agent's process group (this id) still run.
    AgentGroup(i32),
}

/// What of `record`'s last run still runs, if anything.
pub fn leftover(records: &Records, record: &ExecutionRecord) -> Option<Leftover> {
    if let Some(supervisor) = record.supervisor.filter(|s| s.is_running()) {
        return Some(Leftover::Supervisor(supervisor.pid));
    }
    let scratch = ScratchDir::new(records.dir(&record.namespace, &record.name).join("scratch"));
    agent_group_alive(&scratch).map(Leftover::AgentGroup)
}

/// Waits up to `bound` until nothing of `record`'s last run runs (a run just stopped: its
/// supervisor writes the record before it exits, and the processes of a group just killed are
/// gone a moment later); what still runs after that.
pub async fn wait_until_gone(
    records: &Records,
    record: &ExecutionRecord,
    bound: Duration,
) -> Option<Leftover> {
    let deadline = std::time::Instant::now() + bound;
    loop {
        let left = leftover(records, record)?;
        if std::time::Instant::now() >= deadline {
            return Some(left);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Why a restart is refused while `left` still runs.
pub fn restart_refusal(name: &str, left: Leftover) -> LifecycleError {
    LifecycleError::InvalidState(match left {
        Leftover::Supervisor(pid) => format!(
            "execution {name}'s supervisor (pid {pid}) still runs; restart it once it has exited"
        ),
        Leftover::AgentGroup(group) => format!(
            "processes of execution {name}'s agent (process group {group}) still run; stop them (`kill -KILL -{group}`) before restarting"
        ),
    })
}

/// Makes a finished execution ready to run again in place, with the same snapshot and what the
/// user set on it (tags, variables, notifications): only once its supervisor and every process
/// of its agent's group are gone, refused before anything changes otherwise. The old run's
/// results and events are removed, and the execution gets a new uid, so nothing of the old run
/// is mistaken for the new one's.
pub async fn reset_for_restart(
    records: &Records,
    record: &ExecutionRecord,
) -> Result<ExecutionRecord, LifecycleError> {
    let name = &record.name;
    if !record.phase.is_terminal() {
        return Err(LifecycleError::InvalidState(format!(
            "execution {name} is {:?}: it could not be stopped",
            record.phase
        )));
    }
    if let Some(left) = leftover(records, record) {
        return Err(restart_refusal(name, left));
    }
    let dir = records.dir(&record.namespace, name);
    let scratch = ScratchDir::new(dir.join("scratch"));
    let (store, execution) = results_of(record)?;
    store
        .delete_prefix(&keys::results_prefix(&execution).map_err(StoreError::from)?)
        .await?;
    for leftover in [
        scratch.agent_group_file(),
        dir.join("control.json"),
        dir.join("events.ndjson"),
        scratch.stdout_log(),
        scratch.stderr_log(),
    ] {
        let _ = std::fs::remove_file(leftover);
    }
    let mut fresh = ExecutionRecord::pending(
        name.clone(),
        &record.namespace,
        &record.agent,
        record.snapshot_digest.clone(),
        &record.store,
        record.inherit_env,
    )
    .with_user_settings_of(record);
    fresh.rerun_of = record.rerun_of.clone();
    fresh.otlp_endpoint = record.otlp_endpoint.clone();
    fresh.created_at = record.created_at;
    records.write(&fresh)?;
    Ok(fresh)
}

/// The agent's process group of the last run in `scratch`, if a process of it still runs.
fn agent_group_alive(scratch: &ScratchDir) -> Option<i32> {
    let text = std::fs::read_to_string(scratch.agent_group_file()).ok()?;
    let group: i32 = text.trim().parse().ok()?;
    crate::runner::group_running(group).then_some(group)
}

/// A deadline change, accepted: when it was accepted and the deadline in effect from then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlineAccepted {
    /// When the change was written (the moment it is measured from).
    pub accepted_at: jiff::Timestamp,
    /// The deadline now: the one set, or after a clear the one `timeoutSeconds` gives (once the
    /// agent started; before, none is fixed yet).
    pub deadline_at: Option<jiff::Timestamp>,
}

/// Sets (`Some`) or clears (`None`) the deadline of a running execution, `in_seconds` from the
/// moment the change is written, serialized against its runner: once the runner began stopping
/// the agent (its deadline, a cancel or kill, or the agent's own exit) the change is refused.
pub fn change_deadline(
    records: &Records,
    record: &ExecutionRecord,
    timeout_seconds: i64,
    in_seconds: Option<u64>,
) -> Result<DeadlineAccepted, LifecycleError> {
    refuse_finished(record, "its deadline cannot change")?;
    let control = control_file(records, &record.namespace, &record.name);
    let accepted = control.update(|control: &mut RunControl| {
        if let Some(why) = &control.terminating {
            return Err(LifecycleError::InvalidState(terminating_message(
                &record.name,
                why,
            )));
        }
        let now = jiff::Timestamp::now();
        control.deadline = in_seconds.map(|seconds| now + Duration::from_secs(seconds));
        let own = record.started_at.map(|started| {
            started + Duration::from_secs(u64::try_from(timeout_seconds).unwrap_or(0))
        });
        Ok(DeadlineAccepted {
            accepted_at: now,
            deadline_at: control.deadline.or(own),
        })
    })??;
    Ok(accepted)
}

/// Asks the runner of a running execution to stop its agent at once with SIGKILL (`kill`), or
/// to send `signal` to its process group.
pub fn request_signal(
    records: &Records,
    record: &ExecutionRecord,
    signal: Option<&str>,
) -> Result<(), LifecycleError> {
    refuse_finished(record, "there is nothing to signal")?;
    if signal.is_some() && record.started_at.is_none() {
        return Err(LifecycleError::InvalidState(format!(
            "execution {} is {:?}: its agent has not started, so there is no process group to signal",
            record.name, record.phase
        )));
    }
    let control = control_file(records, &record.namespace, &record.name);
    control.update(|control: &mut RunControl| {
        if let Some(why) = &control.terminating {
            return Err(LifecycleError::InvalidState(terminating_message(
                &record.name,
                why,
            )));
        }
        match signal {
            Some(signal) => control.signals.push(signal.to_owned()),
            None => control.kill = true,
        }
        Ok(())
    })??;
    Ok(())
}

fn refuse_finished(record: &ExecutionRecord, what: &str) -> Result<(), LifecycleError> {
    if record.phase.is_terminal() {
        return Err(LifecycleError::InvalidState(format!(
            "execution {} already ended {:?}; {what}",
            record.name, record.phase
        )));
    }
    Ok(())
}

fn terminating_message(name: &str, why: &str) -> String {
    let began = match why {
        "deadline" => "its deadline passed",
        "cancel" => "it was cancelled",
        "kill" => "it was killed",
        "exited" => "its agent exited",
        other => other,
    };
    format!(
        "execution {name} is already being stopped ({began}); the change came after termination began"
    )
}
