//! The local backend's AgentSchedules on disk: the object as the commands wrote it, and the status and supervisor its supervisor writes; admission as the webhook's.
//!
//! One directory per schedule, `schedules/<namespace>/<name>/`, with two writers kept apart:
//! `schedule.json` (metadata and spec) is written by the commands, `state.json` (status and
//! supervisor) only by the schedule's supervisor. Every write replaces its file whole.

use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::catalog::LocalCatalog;
use super::files::{ObjectFilesError, names_holding, read_record, remove_record, write_record};
use super::paths::DataDir;
use super::process::ProcessIdentity;
use crate::api::{AgentSchedule, AgentScheduleStatus};
use crate::resolve::schedule::{self, Timing};
use crate::resolve::{InvalidSpec, Problem, admit_creation, check_schedule, resolve_execution};

/// What a schedule's supervisor writes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ScheduleState {
    /// The status, planned as the controller plans it.
    pub status: AgentScheduleStatus,
    /// The supervisor.
    pub supervisor: Option<ProcessIdentity>,
}

/// The schedules in a data directory.
#[derive(Clone, Debug)]
pub struct ScheduleRecords {
    data: DataDir,
}

impl ScheduleRecords {
    /// The schedules of `data`.
    pub fn new(data: DataDir) -> Self {
        Self { data }
    }

    fn namespace_dir(&self, namespace: &str) -> PathBuf {
        self.data.root().join("schedules").join(namespace)
    }

    /// The directory of one schedule: its files and its supervisor's log.
    pub fn dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.namespace_dir(namespace).join(name)
    }

    /// Records a new schedule (generation 1, a new uid, created now); refused when one of
    /// that name exists.
    pub fn create(&self, schedule: &mut AgentSchedule) -> Result<(), ObjectFilesError> {
        let (namespace, name) = names(schedule);
        if self.dir(&namespace, &name).join("schedule.json").exists() {
            return Err(ObjectFilesError::AlreadyExists {
                kind: "AgentSchedule",
                name,
                namespace,
            });
        }
        let metadata = &mut schedule.metadata;
        metadata.generation = Some(1);
        metadata.uid = Some(super::record::generate_uid(&name));
        metadata.creation_timestamp = Some(Time(jiff::Timestamp::now()));
        self.write(schedule)
    }

    /// Replaces a schedule's object (its status is the supervisor's, in the state).
    pub fn write(&self, schedule: &AgentSchedule) -> Result<(), ObjectFilesError> {
        let (namespace, name) = names(schedule);
        let mut object = schedule.clone();
        object.status = None;
        let bytes = serde_json::to_vec_pretty(&object).expect("a schedule serializes");
        write_record(&self.dir(&namespace, &name).join("schedule.json"), &bytes)
    }

    /// Schedule `name` as the commands wrote it, with the status its supervisor wrote.
    pub fn read(&self, namespace: &str, name: &str) -> Result<AgentSchedule, ObjectFilesError> {
        let path = self.dir(namespace, name).join("schedule.json");
        if !path.exists() {
            return Err(ObjectFilesError::NotFound {
                kind: "AgentSchedule",
                name: name.to_owned(),
                namespace: namespace.to_owned(),
            });
        }
        let mut schedule: AgentSchedule = read_record(&path)?;
        schedule.status = Some(self.state(namespace, name).status);
        Ok(schedule)
    }

    /// What the supervisor of schedule `name` last wrote (nothing before it started).
    pub fn state(&self, namespace: &str, name: &str) -> ScheduleState {
        read_record(&self.dir(namespace, name).join("state.json")).unwrap_or_default()
    }

    /// Replaces what the supervisor of schedule `name` wrote.
    pub fn write_state(
        &self,
        namespace: &str,
        name: &str,
        state: &ScheduleState,
    ) -> Result<(), ObjectFilesError> {
        let bytes = serde_json::to_vec_pretty(state).expect("a state serializes");
        write_record(&self.dir(namespace, name).join("state.json"), &bytes)
    }

    /// The names of the schedules of `namespace`, sorted.
    pub fn names(&self, namespace: &str) -> Vec<String> {
        names_holding(&self.namespace_dir(namespace), "schedule.json")
    }

    /// Removes schedule `name`'s files.
    pub fn remove(&self, namespace: &str, name: &str) -> Result<(), ObjectFilesError> {
        let dir = self.dir(namespace, name);
        remove_record(&dir)
    }
}

/// Admits `schedule` as the API server and the webhook would: its schema and CEL rules, its
/// timing, then its template resolved against the local catalog as an execution's create.
/// Every problem names its field.
pub fn admit_schedule(data: &DataDir, schedule: &AgentSchedule) -> Result<Timing, InvalidSpec> {
    let object = serde_json::to_value(schedule).expect("a schedule serializes");
    let problems = check_schedule(&object);
    if !problems.is_empty() {
        return Err(InvalidSpec { problems });
    }
    let namespace = schedule.metadata.namespace.clone().unwrap_or_default();
    if namespace.is_empty() {
        return Err(InvalidSpec {
            problems: vec![Problem::new("metadata.namespace", "Required value")],
        });
    }
    let timing = schedule::check(&schedule.spec, jiff::Timestamp::now())?;
    let template = &schedule.spec.execution_template.spec;
    let resolution = resolve_execution(&namespace, template, &LocalCatalog::new(data.clone()));
    admit_creation(template, resolution).map_err(schedule::in_template)?;
    Ok(timing)
}

fn names(object: &AgentSchedule) -> (String, String) {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}
