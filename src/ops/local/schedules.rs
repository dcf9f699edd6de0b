//! AgentSchedules on this machine: the local side of the schedule commands, each schedule run by a detached supervisor (`schedule_supervisor.rs`) that creates its executions when they are due.
//!
//! A schedule is admitted as the API server and the webhook would admit it
//! ([`admit_schedule`]); its executions carry the tag `schedule.<name>`, by which the
//! supervisor, `trigger` and `delete` find them.

use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Local;
use super::detached::start_supervisor;
use crate::api::AgentSchedule;
use crate::local::{ScheduleRecords, admit_schedule};
use crate::ops::Execution;
use crate::ops::backend::{Backend, ScheduleEntry, Schedules};
use crate::ops::execute::{CreateOptions, ExecutionRequest, RunInputs};
use crate::ops::{Error, ErrorCode};
use crate::resolve::schedule;

/// How long `schedule delete` waits for a supervisor to stop.
const SUPERVISOR_EXIT: Duration = Duration::from_secs(30);
/// How often that wait looks again.
const POLL: Duration = Duration::from_millis(100);

impl Local {
    /// The schedule records.
    pub fn schedule_records(&self) -> ScheduleRecords {
        ScheduleRecords::new(self.data.clone())
    }

    /// Starts a supervisor for schedule `name` unless one runs.
    fn ensure_schedule_supervised(&self, name: &str) -> Result<(), Error> {
        let records = self.schedule_records();
        records.read(&self.namespace, name)?;
        if records
            .state(&self.namespace, name)
            .supervisor
            .is_some_and(|s| s.is_running())
        {
            return Ok(());
        }
        let log_path = records.dir(&self.namespace, name).join("supervisor.log");
        start_supervisor(self, "__serve-schedule", name, &log_path, |pid| {
            records
                .state(&self.namespace, name)
                .supervisor
                .is_some_and(|s| s.pid == pid)
        })
    }

    /// Schedule `name` with its status and whether its supervisor runs.
    fn schedule_entry(&self, name: &str) -> Result<ScheduleEntry, Error> {
        let records = self.schedule_records();
        let schedule = records.read(&self.namespace, name)?;
        let running = records
            .state(&self.namespace, name)
            .supervisor
            .is_some_and(|s| s.is_running());
        Ok(ScheduleEntry {
            schedule,
            supervisor_running: Some(running),
        })
    }

    /// The executions of schedule `name`: those tagged `schedule.<name>`.
    pub(super) async fn schedule_runs(&self, name: &str) -> Result<Vec<Execution>, Error> {
        let tag = schedule::schedule_tag(name);
        let mut runs = self.executions().await?;
        runs.retain(|r| r.tags.contains(&tag));
        Ok(runs)
    }

    /// Creates the execution `name` of `schedule` for `scheduled`, tagged as the schedule's,
    /// and lets it run detached.
    pub(super) async fn start_run(
        &self,
        schedule: &AgentSchedule,
        name: String,
        scheduled: jiff::Timestamp,
    ) -> Result<Execution, Error> {
        let schedule_name = schedule.metadata.name.clone().unwrap_or_default();
        let execution = schedule::execution_for(schedule, name, scheduled);
        let request = ExecutionRequest {
            spec: execution.spec,
            name: execution.metadata.name,
            pushed: None,
            inputs: RunInputs {
                tags: vec![schedule::schedule_tag(&schedule_name)],
                ..RunInputs::default()
            },
        };
        let options = CreateOptions::default();
        let record = request.create(self, &options).await?;
        self.detach(&record, &options).await
    }

    /// Stops schedule `name`'s supervisor, if one runs, and waits until it is gone.
    async fn stop_schedule_supervisor(&self, name: &str) -> Result<(), Error> {
        let records = self.schedule_records();
        let deadline = tokio::time::Instant::now() + SUPERVISOR_EXIT;
        loop {
            let Some(supervisor) = records
                .state(&self.namespace, name)
                .supervisor
                .filter(|s| s.is_running())
            else {
                return Ok(());
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorCode::Timeout,
                    format!(
                        "the supervisor of AgentSchedule {name:?} (pid {}) did not stop within {}s",
                        supervisor.pid,
                        SUPERVISOR_EXIT.as_secs()
                    ),
                ));
            }
            if let Ok(pid) = i32::try_from(supervisor.pid) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[async_trait]
impl Schedules for Local {
    async fn create_schedule(&self, schedule: &AgentSchedule) -> Result<ScheduleEntry, Error> {
        admit_schedule(&self.data, schedule)?;
        let name = schedule.metadata.name.clone().unwrap_or_default();
        self.schedule_records().create(&mut schedule.clone())?;
        self.ensure_schedule_supervised(&name)?;
        self.schedule_entry(&name)
    }

    async fn schedule(&self, name: &str) -> Result<ScheduleEntry, Error> {
        self.schedule_entry(name)
    }

    async fn schedules(&self) -> Result<Vec<ScheduleEntry>, Error> {
        let names = self.schedule_records().names(&self.namespace);
        names.iter().map(|name| self.schedule_entry(name)).collect()
    }

    async fn set_suspend(&self, name: &str, suspend: bool) -> Result<ScheduleEntry, Error> {
        let records = self.schedule_records();
        let mut schedule = records.read(&self.namespace, name)?;
        if schedule.spec.suspend != suspend {
            schedule.spec.suspend = suspend;
            schedule.metadata.generation = Some(schedule.metadata.generation.unwrap_or(1) + 1);
            records.write(&schedule)?;
        }
        if !suspend {
            self.ensure_schedule_supervised(name)?;
        }
        self.schedule_entry(name)
    }

    async fn trigger(&self, name: &str) -> Result<Execution, Error> {
        let schedule = self.schedule_records().read(&self.namespace, name)?;
        let now = jiff::Timestamp::now();
        self.start_run(&schedule, schedule::manual_execution_name(name, now), now)
            .await
    }

    async fn delete_schedule(&self, name: &str) -> Result<(), Error> {
        let records = self.schedule_records();
        records.read(&self.namespace, name)?;
        self.stop_schedule_supervisor(name).await?;
        for run in self.schedule_runs(name).await? {
            self.delete(&run).await?;
        }
        Ok(records.remove(&self.namespace, name)?)
    }
}
