//! An AgentDeployment's status as a pure function of what was recorded and what is observed: phase, conditions, the starting window and when to look again.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::window::{Window, WindowFacts, starting_window};
use crate::api::contract::{ConditionType, Reason};
use crate::api::{AgentDeploymentStatus, DeploymentPhase, SnapshotRef};
use crate::resolve::conditions::ConditionWriter;

/// What the reconcile saw of a deployment whose snapshot is in place.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The resolved agent's name.
    pub agent: String,
    /// The snapshot the Deployment runs.
    pub snapshot: SnapshotRef,
    /// [`crate::resolve::source_digest`] of the spec the snapshot was taken from.
    pub source_digest: String,
    /// Pods asked for.
    pub replicas: i32,
    /// Pods that pass their readiness probe (the Deployment's `status.readyReplicas`).
    pub ready_replicas: i32,
    /// The Service's address.
    pub address: String,
    /// Why the spec's current agent or environment could not be resolved, when a redeploy
    /// slipped past admission: the previous snapshot keeps serving.
    pub refused_redeploy: Option<String>,
    /// `startingTimeoutSeconds`, `None` when 0.
    pub timeout: Option<Duration>,
    /// The time of the decision.
    pub now: Timestamp,
}

/// The status to write and when to reconcile again without an event.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The new status.
    pub status: AgentDeploymentStatus,
    /// When the starting window closes, if one runs.
    pub recheck_after: Option<Duration>,
}

/// The status of a deployment with its children in place.
pub fn decide(previous: &AgentDeploymentStatus, observed: &Observed) -> Decision {
    let window = starting_window(WindowFacts {
        recorded: previous.phase,
        starting_since: previous.starting_since.as_ref().map(|t| t.0),
        spec_changed: previous.observed_generation != observed.generation,
        serving: observed.ready_replicas > 0,
        timeout: observed.timeout,
        now: observed.now,
    });
    let mut status = AgentDeploymentStatus {
        agent: Some(observed.agent.clone()),
        snapshot: Some(observed.snapshot.clone()),
        source_digest: Some(observed.source_digest.clone()),
        replicas: observed.replicas,
        ready_replicas: observed.ready_replicas,
        address: Some(observed.address.clone()),
        observed_generation: observed.generation,
        conditions: previous.conditions.clone(),
        ..AgentDeploymentStatus::default()
    };
    let ready_count = format!(
        "{}/{} pods ready",
        observed.ready_replicas, observed.replicas
    );
    let mut conditions = ConditionWriter::new(
        &mut status.conditions,
        observed.generation,
        Time(observed.now),
    );
    match &observed.refused_redeploy {
        None => conditions.set(ConditionType::Resolved, true, Reason::Resolved, ""),
        Some(message) => {
            conditions.set(ConditionType::Resolved, false, Reason::InvalidSpec, message);
        }
    }
    let recheck_after = match window {
        Window::Ready => {
            conditions.set(ConditionType::Ready, true, Reason::AgentReady, &ready_count);
            conditions.set(ConditionType::Failed, false, Reason::AgentReady, "");
            status.phase = Some(DeploymentPhase::Ready);
            status.message = Some(ready_count);
            None
        }
        Window::Starting { since, closes } => {
            let message = match closes {
                Some(closes) => format!("{ready_count}; fails if none is ready by {closes}"),
                None => ready_count,
            };
            conditions.set(ConditionType::Ready, false, Reason::AgentNotReady, &message);
            conditions.set(ConditionType::Failed, false, Reason::AgentNotReady, "");
            status.phase = Some(DeploymentPhase::Starting);
            status.starting_since = Some(Time(since));
            status.message = Some(message);
            closes.map(|closes| {
                Duration::try_from(closes.duration_since(observed.now)).unwrap_or(Duration::ZERO)
            })
        }
        Window::Expired { since } => {
            let seconds = observed.timeout.unwrap_or_default().as_secs();
            let message = format!(
                "no pod became ready within startingTimeoutSeconds ({seconds}s); change the \
                 spec (redeploy) to start again"
            );
            conditions.set(
                ConditionType::Ready,
                false,
                Reason::StartingTimeout,
                &message,
            );
            conditions.set(
                ConditionType::Failed,
                true,
                Reason::StartingTimeout,
                &message,
            );
            status.phase = Some(DeploymentPhase::Failed);
            status.starting_since = since.map(Time);
            status.message = Some(message);
            // The generation it failed in stays recorded, so only a spec change restarts it.
            status.observed_generation = previous
                .observed_generation
                .filter(|_| previous.phase == Some(DeploymentPhase::Failed))
                .or(observed.generation);
            None
        }
    };
    Decision {
        status,
        recheck_after,
    }
}

/// The status of a deployment whose first resolution failed: Failed with reason
/// `InvalidSpec`, nothing created. A change to the spec resolves it again.
pub fn invalid(
    previous: &AgentDeploymentStatus,
    generation: Option<i64>,
    message: &str,
    now: Timestamp,
) -> AgentDeploymentStatus {
    let mut status = AgentDeploymentStatus {
        phase: Some(DeploymentPhase::Failed),
        conditions: previous.conditions.clone(),
        message: Some(message.to_owned()),
        observed_generation: generation,
        ..AgentDeploymentStatus::default()
    };
    let mut conditions = ConditionWriter::new(&mut status.conditions, generation, Time(now));
    conditions.set(ConditionType::Resolved, false, Reason::InvalidSpec, message);
    conditions.set(ConditionType::Ready, false, Reason::InvalidSpec, message);
    conditions.set(ConditionType::Failed, true, Reason::InvalidSpec, message);
    status
}

/// The status of a deployment being deleted: Terminating, the rest as it was.
pub fn terminating(previous: &AgentDeploymentStatus, now: Timestamp) -> AgentDeploymentStatus {
    let mut status = AgentDeploymentStatus {
        phase: Some(DeploymentPhase::Terminating),
        message: Some("deleting the deployment and its children".to_owned()),
        ..previous.clone()
    };
    let generation = status.observed_generation;
    ConditionWriter::new(&mut status.conditions, generation, Time(now)).set(
        ConditionType::Ready,
        false,
        Reason::Deleting,
        "the deployment is being deleted",
    );
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::conditions::get as condition;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn observed(ready: i32, now: i64) -> Observed {
        Observed {
            generation: Some(1),
            agent: "calculator".into(),
            snapshot: SnapshotRef {
                config_map: "errand-calc-agent-0123456789".into(),
                digest: "sha256:0123".into(),
            },
            source_digest: "sha256:abcd".into(),
            replicas: 1,
            ready_replicas: ready,
            address: "http://errand-calc.team-a.svc".into(),
            refused_redeploy: None,
            timeout: Some(Duration::from_secs(60)),
            now: at(now),
        }
    }

    /// The statuses of a deployment reconciled at each of `steps` (ready pods, time).
    fn run(steps: &[(i32, i64)]) -> Vec<Decision> {
        let mut status = AgentDeploymentStatus::default();
        steps
            .iter()
            .map(|&(ready, now)| {
                let decision = decide(&status, &observed(ready, now));
                status = decision.status.clone();
                decision
            })
            .collect()
    }

    #[test]
    fn a_deployment_starts_then_is_ready_with_its_address_and_snapshot() {
        let decisions = run(&[(0, 0), (1, 10)]);
        let starting = &decisions[0];
        assert_eq!(starting.status.phase, Some(DeploymentPhase::Starting));
        assert_eq!(starting.status.starting_since, Some(Time(at(0))));
        assert_eq!(starting.recheck_after, Some(Duration::from_secs(60)));
        let ready = &decisions[1].status;
        assert_eq!(ready.phase, Some(DeploymentPhase::Ready));
        assert_eq!(ready.starting_since, None);
        assert_eq!(ready.ready_replicas, 1);
        assert_eq!(
            ready.address.as_deref(),
            Some("http://errand-calc.team-a.svc")
        );
        assert_eq!(ready.snapshot.as_ref().unwrap().digest, "sha256:0123");
        assert_eq!(ready.observed_generation, Some(1));
        let condition = condition(&ready.conditions, ConditionType::Ready).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", "AgentReady")
        );
    }

    #[test]
    fn a_deployment_never_ready_fails_when_its_window_closes_and_stays_failed() {
        let decisions = run(&[(0, 0), (0, 30), (0, 60), (1, 70)]);
        assert_eq!(decisions[1].recheck_after, Some(Duration::from_secs(30)));
        let failed = &decisions[2].status;
        assert_eq!(failed.phase, Some(DeploymentPhase::Failed));
        let condition = condition(&failed.conditions, ConditionType::Failed).unwrap();
        assert_eq!(condition.reason, "StartingTimeout");
        assert!(failed.message.as_deref().unwrap().contains("60s"));
        assert_eq!(decisions[3].status.phase, Some(DeploymentPhase::Failed));
    }

    #[test]
    fn readiness_lost_after_ready_gets_a_fresh_window_and_recovering_ends_it() {
        let decisions = run(&[(0, 0), (1, 50), (0, 100), (0, 159), (1, 170), (0, 400)]);
        let phases: Vec<_> = decisions.iter().map(|d| d.status.phase.unwrap()).collect();
        use DeploymentPhase::{Ready, Starting};
        assert_eq!(
            phases,
            [Starting, Ready, Starting, Starting, Ready, Starting]
        );
        assert_eq!(decisions[2].status.starting_since, Some(Time(at(100))));
        assert_eq!(decisions[3].status.starting_since, Some(Time(at(100))));
        assert_eq!(decisions[5].status.starting_since, Some(Time(at(400))));
    }

    #[test]
    fn a_refused_redeploy_keeps_serving_and_says_why() {
        let mut status = decide(&AgentDeploymentStatus::default(), &observed(1, 0)).status;
        status = decide(
            &status,
            &Observed {
                refused_redeploy: Some("spec.agentRef.name: Agent \"v2\" not found".into()),
                ..observed(1, 10)
            },
        )
        .status;
        assert_eq!(status.phase, Some(DeploymentPhase::Ready));
        let resolved = condition(&status.conditions, ConditionType::Resolved).unwrap();
        assert_eq!(
            (resolved.status.as_str(), resolved.reason.as_str()),
            ("False", "InvalidSpec")
        );
    }

    #[test]
    fn an_invalid_deployment_fails_and_a_deleted_one_is_terminating() {
        let failed = invalid(
            &AgentDeploymentStatus::default(),
            Some(1),
            "spec.agentRef.name: Agent \"nope\" not found",
            at(0),
        );
        assert_eq!(failed.phase, Some(DeploymentPhase::Failed));
        assert_eq!(
            condition(&failed.conditions, ConditionType::Failed)
                .unwrap()
                .reason,
            "InvalidSpec"
        );
        let going = terminating(&failed, at(1));
        assert_eq!(going.phase, Some(DeploymentPhase::Terminating));
    }
}
