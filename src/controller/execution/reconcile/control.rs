//! Run control in the reconcile: holding a created execution back, and carrying out the [`status::plan_control`] of a running one (the pod's control annotation, the Job's backstop).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;

use super::Reconciler;
use crate::api::contract::CONTROL_ANNOTATION;
use crate::api::{AgentExecutionStatus, Phase};
use crate::controller::error::{Error, Result};
use crate::controller::execution::status::{self, ControlPlan, Facts};

impl Reconciler<'_> {
    /// A held execution (`spec.held`, `errand create`): phase `Created`, nothing created until
    /// `held` is cleared.
    pub(super) async fn hold(&self) -> Result<Action> {
        let mut status = self.execution.status.clone().unwrap_or_default();
        status.phase = Some(Phase::Created);
        status.observed_generation = self.execution.metadata.generation;
        self.write_status(status).await?;
        Ok(Action::await_change())
    }

    /// Carries out `plan`: projects the run control into the running pod and moves the Job's
    /// `activeDeadlineSeconds` with the deadline; returns `status` with the deadline answer.
    pub(super) async fn apply_control(
        &self,
        plan: &ControlPlan,
        facts: &Facts,
        job: Option<&Job>,
        job_name: &str,
        mut status: AgentExecutionStatus,
    ) -> Result<AgentExecutionStatus> {
        let namespace = self.owner.namespace.as_str();
        if let (Some(annotation), Some(pod)) = (&plan.annotation, &facts.pod) {
            let patch = json!({"metadata": {"annotations": {CONTROL_ANNOTATION: annotation}}});
            match Api::<Pod>::namespaced(self.ctx.client.clone(), namespace)
                .patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                // Gone meanwhile: the next reconcile sees how the run ended.
                Err(kube::Error::Api(e)) if e.is_not_found() => {}
                Err(e) => return Err(Error::kube(format!("annotating pod {}", pod.name))(e)),
            }
        }
        if let Some(seconds) = self.backstop(plan, facts)
            && job.and_then(|j| j.spec.as_ref()?.active_deadline_seconds) != Some(seconds)
        {
            let patch = json!({"spec": {"activeDeadlineSeconds": seconds}});
            Api::<Job>::namespaced(self.ctx.client.clone(), namespace)
                .patch(job_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::kube(format!(
                    "moving the deadline of Job {job_name}"
                )))?;
        }
        if !status.phase.is_some_and(Phase::is_terminal) || plan.deadline_status.is_some() {
            status.deadline.clone_from(&plan.deadline_status);
        }
        Ok(status)
    }

    /// The Job's `activeDeadlineSeconds` the run needs: from the changed deadline, or back
    /// from `timeoutSeconds` once a change was cleared; none when no change was ever accepted.
    fn backstop(&self, plan: &ControlPlan, facts: &Facts) -> Option<i64> {
        let job_started = facts.job.as_ref()?.started?;
        let staging = self.ctx.config.staging_budget_seconds;
        if let Some(deadline) = plan.deadline {
            return Some(status::job_deadline_seconds(deadline, job_started, staging));
        }
        let ever_changed = plan
            .deadline_status
            .as_ref()
            .is_some_and(|d| d.accepted_at.is_some() || d.deadline.is_some());
        let started = facts.pod.as_ref()?.agent_started_at.as_ref()?.0;
        let timeout = std::time::Duration::from_secs(
            u64::try_from(self.execution.spec.timeout_seconds).unwrap_or(0),
        );
        ever_changed.then(|| status::job_deadline_seconds(started + timeout, job_started, staging))
    }
}
