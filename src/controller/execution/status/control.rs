//! The run control of a running execution, decided from its spec and status and its pod: whether to accept a deadline change (`spec.deadline`), what the pod's `errand.dev/control` annotation must say, and where the Job's backstop goes.
//!
//! The controller is the one writer that serializes changes on a cluster: a change is accepted
//! (and counted from) when the controller records it in `status.deadline`, and refused once the
//! run is being stopped (a cancel, a pod being deleted or finished) or when the deadline in
//! effect is within [`ACCEPT_MARGIN`], since the runner in the pod may already be stopping the
//! agent before the new annotation reaches it.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::observe::PodFacts;
use crate::api::{AgentExecution, DeadlineStatus};
use crate::runner::control::RunControl;

/// How close to the deadline in effect a change is still accepted: the kubelet refreshes the
/// pod's projected annotation within a few seconds, and the runner reads it every 200 ms.
pub const ACCEPT_MARGIN: Duration = Duration::from_secs(5);

/// What the run control of an execution needs now.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlPlan {
    /// `status.deadline` as it should be written (the answer to the latest change).
    pub deadline_status: Option<DeadlineStatus>,
    /// The pod's `errand.dev/control` annotation as it should be, when it differs from what the
    /// pod has and the pod runs.
    pub annotation: Option<String>,
    /// The deadline in effect, when a change set one (for the Job's backstop).
    pub deadline: Option<Timestamp>,
}

/// The run control of `execution` whose pod is `pod`, at `now`.
pub fn plan_control(
    execution: &AgentExecution,
    pod: Option<&PodFacts>,
    now: Timestamp,
) -> ControlPlan {
    let spec = &execution.spec;
    let previous = execution.status.as_ref().and_then(|s| s.deadline.clone());
    let mut deadline_status = previous.clone();
    if let Some(change) = spec
        .deadline
        .as_ref()
        .filter(|c| previous.as_ref().is_none_or(|p| p.request != c.request))
    {
        let overridden = previous
            .as_ref()
            .and_then(|p| p.deadline.as_ref())
            .map(|t| t.0);
        let own = pod
            .and_then(|p| p.agent_started_at.as_ref())
            .map(|started| {
                started.0 + Duration::from_secs(u64::try_from(spec.timeout_seconds).unwrap_or(0))
            });
        let in_effect = overridden.or(own);
        let refused = if spec.cancel {
            Some("it was cancelled".to_owned())
        } else if pod.is_some_and(|p| p.deleting || p.finished) {
            Some("its pod is stopping".to_owned())
        } else {
            in_effect
                .filter(|at| now + ACCEPT_MARGIN >= *at)
                .map(|at| format!("its deadline {at} has passed or is less than {}s away, so its runner may be stopping the agent", ACCEPT_MARGIN.as_secs()))
        };
        let name = execution.metadata.name.as_deref().unwrap_or_default();
        deadline_status = Some(match refused {
            Some(why) => DeadlineStatus {
                request: change.request.clone(),
                accepted_at: None,
                deadline: previous.as_ref().and_then(|p| p.deadline.clone()),
                refused: Some(format!(
                    "execution {name} is already being stopped ({why}); the change came after termination began"
                )),
            },
            None => DeadlineStatus {
                request: change.request.clone(),
                accepted_at: Some(Time(now)),
                deadline: change
                    .in_seconds
                    .map(|s| Time(now + Duration::from_secs(u64::try_from(s).unwrap_or(0)))),
                refused: None,
            },
        });
    }
    let deadline = deadline_status
        .as_ref()
        .and_then(|d| d.deadline.as_ref())
        .map(|t| t.0);
    let control = RunControl {
        deadline,
        kill: spec.kill && spec.cancel,
        ..RunControl::default()
    };
    let wanted = (control != RunControl::default())
        .then(|| serde_json::to_string(&control).expect("a control serializes"));
    let annotation = pod
        .filter(|p| !p.finished && !p.deleting)
        .and_then(|p| (wanted.is_some() && p.control != wanted).then(|| wanted.clone()))
        .flatten();
    ControlPlan {
        deadline_status,
        annotation,
        deadline,
    }
}

/// The Job's `activeDeadlineSeconds` for a run whose agent must stop at `deadline`, its Job
/// having started at `job_started`: the time until then plus the staging and upload allowance,
/// as the Job's first backstop was the whole budget.
pub fn job_deadline_seconds(
    deadline: Timestamp,
    job_started: Timestamp,
    staging_seconds: i64,
) -> i64 {
    let until = job_started.duration_until(deadline).as_secs().max(0);
    until.saturating_add(staging_seconds).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AgentExecutionSpec, AgentExecutionStatus, DeadlineChange};

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn running(started: i64) -> PodFacts {
        PodFacts {
            name: "pod".into(),
            agent_started_at: Some(Time(at(started))),
            ..PodFacts::default()
        }
    }

    fn execution(
        timeout: i64,
        change: Option<(&str, Option<i64>)>,
        previous: Option<DeadlineStatus>,
    ) -> AgentExecution {
        let mut execution = AgentExecution::new(
            "calc",
            AgentExecutionSpec {
                timeout_seconds: timeout,
                deadline: change.map(|(request, in_seconds)| DeadlineChange {
                    request: request.into(),
                    in_seconds,
                }),
                ..AgentExecutionSpec::default()
            },
        );
        execution.status = Some(AgentExecutionStatus {
            deadline: previous,
            ..AgentExecutionStatus::default()
        });
        execution
    }

    #[test]
    fn a_change_is_accepted_from_now_and_projected_into_the_pod() {
        let plan = plan_control(
            &execution(60, Some(("r1", Some(300))), None),
            Some(&running(0)),
            at(10),
        );
        let status = plan.deadline_status.unwrap();
        assert_eq!(status.accepted_at, Some(Time(at(10))));
        assert_eq!(status.deadline, Some(Time(at(310))));
        assert_eq!(plan.deadline, Some(at(310)));
        let annotation: RunControl = serde_json::from_str(&plan.annotation.unwrap()).unwrap();
        assert_eq!(annotation.deadline, Some(at(310)));
        // Answered once: the same request again changes nothing, and a pod that has it is left.
        let mut pod = running(0);
        pod.control = Some(serde_json::to_string(&annotation).unwrap());
        let again = plan_control(
            &execution(60, Some(("r1", Some(300))), Some(status.clone())),
            Some(&pod),
            at(200),
        );
        assert_eq!(again.deadline_status, Some(status));
        assert_eq!(again.annotation, None);
    }

    #[test]
    fn a_change_near_or_after_the_deadline_in_effect_or_after_a_cancel_is_refused() {
        // timeoutSeconds 60 from a start at 0: at 56 the runner may be stopping the agent.
        let plan = plan_control(
            &execution(60, Some(("r1", Some(300))), None),
            Some(&running(0)),
            at(56),
        );
        let status = plan.deadline_status.unwrap();
        assert!(status.refused.unwrap().contains("after termination began"));
        assert_eq!(
            (status.accepted_at, plan.deadline, plan.annotation),
            (None, None, None)
        );
        let mut cancelled = execution(60, Some(("r2", Some(300))), None);
        cancelled.spec.cancel = true;
        let refused = plan_control(&cancelled, Some(&running(0)), at(1))
            .deadline_status
            .unwrap();
        assert!(refused.refused.unwrap().contains("cancelled"));
        // A clear goes back to timeoutSeconds: nothing to project but what the pod had.
        let previous = DeadlineStatus {
            request: "r1".into(),
            accepted_at: Some(Time(at(10))),
            deadline: Some(Time(at(310))),
            refused: None,
        };
        let cleared = plan_control(
            &execution(60, Some(("r3", None)), Some(previous)),
            Some(&running(0)),
            at(20),
        );
        assert_eq!(cleared.deadline, None);
        assert_eq!(cleared.deadline_status.unwrap().deadline, None);
    }

    #[test]
    fn a_kill_is_projected_and_the_backstop_follows_the_deadline() {
        let mut killed = execution(60, None, None);
        killed.spec.cancel = true;
        killed.spec.kill = true;
        let annotation: RunControl = serde_json::from_str(
            &plan_control(&killed, Some(&running(0)), at(1))
                .annotation
                .unwrap(),
        )
        .unwrap();
        assert!(annotation.kill);
        assert_eq!(job_deadline_seconds(at(310), at(-5), 120), 435);
        assert_eq!(job_deadline_seconds(at(0), at(10), 0), 1);
    }
}
