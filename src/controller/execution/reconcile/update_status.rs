//! Update status: write the status with server-side apply when it changed, then count the completion and publish the failure event.

use jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::Reconciler;
use crate::api::AgentExecutionStatus;
use crate::controller::config::FIELD_MANAGER;
use crate::controller::error::{Error, Result};
use crate::controller::execution::events::outcome_event;
use crate::controller::execution::status;
use crate::resolve::InvalidSpec;

impl Reconciler<'_> {
    /// Records an execution that cannot run as `Failed` with reason `InvalidSpec`; it waits
    /// for a change (its spec is immutable, so in practice for its deletion).
    pub(super) async fn refuse(&self, invalid: &InvalidSpec) -> Result<Action> {
        info!(execution = %self.owner.name, namespace = %self.owner.namespace, "invalid spec: {invalid}");
        let status = status::invalid(self.execution, invalid, Timestamp::now());
        self.write_status(status).await?;
        Ok(Action::await_change())
    }

    /// Records an execution one of whose children the API server refused for good as `Failed`
    /// with reason `CreateRejected` and the API server's `message`; it waits for a change (in
    /// practice its deletion), since a retry would be refused the same way.
    pub(super) async fn reject(&self, message: &str) -> Result<Action> {
        info!(execution = %self.owner.name, namespace = %self.owner.namespace, "children refused: {message}");
        let status = status::rejected(self.execution, message, Timestamp::now());
        self.write_status(status).await?;
        Ok(Action::await_change())
    }

    /// Writes `status` with server-side apply unless it equals the current one, then records
    /// the latencies it shows and publishes the failure event.
    pub(super) async fn write_status(&self, status: AgentExecutionStatus) -> Result<()> {
        let (execution, ctx) = (self.execution, self.ctx);
        if execution.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let name = execution.name_any();
        let patch = serde_json::json!({
            "apiVersion": crate::api::GROUP.to_owned() + "/" + crate::api::VERSION,
            "kind": "AgentExecution",
            "status": status,
        });
        debug!(execution = %name, phase = ?status.phase, "writing status");
        let updated = self
            .api
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(Error::kube(format!("writing the status of {name}")))?;
        debug!(execution = %name, "status written");
        ctx.remember(updated);
        ctx.metrics.observe(&status::timings(
            execution.metadata.creation_timestamp.as_ref(),
            execution.status.as_ref(),
            &status,
            Timestamp::now(),
        ));
        if let Some(event) = outcome_event(execution.status.as_ref(), &status) {
            let reference = execution.object_ref(&());
            if let Err(e) = ctx.recorder.publish(&event, &reference).await {
                warn!(execution = %name, "publishing event {}: {e}", event.reason);
            }
        }
        Ok(())
    }
}
