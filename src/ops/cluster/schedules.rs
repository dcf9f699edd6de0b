//! AgentSchedules through the API server: the cluster's side of the schedule commands (the controller runs them).

use async_trait::async_trait;
use kube::Resource;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{Cluster, FIELD_MANAGER, api_error, execution_of};
use crate::api::{AgentExecution, AgentSchedule};
use crate::ops::Execution;
use crate::ops::backend::{ScheduleEntry, Schedules};
use crate::ops::{Error, ErrorCode};
use crate::resolve::schedule;

fn entry(schedule: AgentSchedule) -> ScheduleEntry {
    ScheduleEntry {
        schedule,
        supervisor_running: None,
    }
}

impl Cluster {
    async fn get_schedule(&self, name: &str) -> Result<AgentSchedule, Error> {
        self.api::<AgentSchedule>()
            .get_opt(name)
            .await
            .map_err(api_error)?
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::NotFound,
                    format!(
                        "no AgentSchedule named {name:?} in namespace {:?}",
                        self.namespace
                    ),
                )
            })
    }
}

#[async_trait]
impl Schedules for Cluster {
    async fn create_schedule(&self, schedule: &AgentSchedule) -> Result<ScheduleEntry, Error> {
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        self.api::<AgentSchedule>()
            .create(&params, schedule)
            .await
            .map(entry)
            .map_err(api_error)
    }

    async fn schedule(&self, name: &str) -> Result<ScheduleEntry, Error> {
        self.get_schedule(name).await.map(entry)
    }

    async fn schedules(&self) -> Result<Vec<ScheduleEntry>, Error> {
        let listed = self
            .api::<AgentSchedule>()
            .list(&ListParams::default())
            .await
            .map_err(api_error)?;
        Ok(listed.items.into_iter().map(entry).collect())
    }

    async fn set_suspend(&self, name: &str, suspend: bool) -> Result<ScheduleEntry, Error> {
        self.get_schedule(name).await?;
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let patch = json!({"spec": {"suspend": suspend}});
        self.api::<AgentSchedule>()
            .patch(name, &params, &Patch::Merge(&patch))
            .await
            .map(entry)
            .map_err(api_error)
    }

    async fn trigger(&self, name: &str) -> Result<Execution, Error> {
        let found = self.get_schedule(name).await?;
        let now = jiff::Timestamp::now();
        let mut execution =
            schedule::execution_for(&found, schedule::manual_execution_name(name, now), now);
        // Owned as the schedule's own runs are: its policy and history limits count it, and
        // deleting the schedule deletes it.
        let owner = found
            .controller_owner_ref(&())
            .ok_or_else(|| Error::new(ErrorCode::ClusterError, "the schedule has no uid"))?;
        execution.metadata.owner_references = Some(vec![owner]);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let created = self
            .api::<AgentExecution>()
            .create(&params, &execution)
            .await
            .map_err(api_error)?;
        Ok(execution_of(&created, self.store_url.as_deref()))
    }

    async fn delete_schedule(&self, name: &str) -> Result<(), Error> {
        self.get_schedule(name).await?;
        // Background: the garbage collector deletes the executions it owns.
        match self
            .api::<AgentSchedule>()
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(api_error(e)),
        }
    }
}
