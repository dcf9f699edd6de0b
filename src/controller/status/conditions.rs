//! Condition types, reasons and the one rule of conditions: a transition time changes only with the status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition: the spec was resolved and snapshotted (or not, with reason `InvalidSpec`).
pub const RESOLVED: &str = "Resolved";
/// Condition: the agent started.
pub const STARTED: &str = "Started";
/// Condition: the run succeeded (`kubectl wait --for=condition=Complete`).
pub const COMPLETE: &str = "Complete";
/// Condition: the run failed or was cancelled; the reason says which.
pub const FAILED: &str = "Failed";
/// Condition: the results are saved (or not, with reason `ResultsUploadFailed`).
pub const RESULTS_SAVED: &str = "ResultsSaved";

/// Machine-readable reasons of the conditions and events.
pub mod reason {
    /// The spec failed resolution or validation.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The spec resolved and its snapshot was written.
    pub const RESOLVED: &str = "Resolved";
    /// The Job waits for Kueue to admit it.
    pub const QUEUED: &str = "Queued";
    /// The pod is being scheduled, pulled or staged.
    pub const POD_STARTING: &str = "PodStarting";
    /// The agent process started.
    pub const AGENT_STARTED: &str = "AgentStarted";
    /// The agent exited 0 and its results were saved.
    pub const SUCCEEDED: &str = "Succeeded";
    /// The run passed its deadline (in the pod, or the Job's backstop).
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    /// The pod did not start within `startTimeoutSeconds`.
    pub const START_TIMEOUT: &str = "StartTimeout";
    /// An image could not be pulled within `startTimeoutSeconds`.
    pub const IMAGE_PULL_FAILED: &str = "ImagePullFailed";
    /// The pod could not be scheduled (or was refused by the node) within `startTimeoutSeconds`.
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    /// The agent exited non-zero, was killed, or could not be started.
    pub const AGENT_FAILED: &str = "AgentFailed";
    /// The working directory could not be staged.
    pub const STAGE_FAILED: &str = "StageFailed";
    /// The pod was evicted, preempted or otherwise disrupted.
    pub const POD_EVICTED: &str = "PodEvicted";
    /// The run was cancelled on request.
    pub const CANCELLED: &str = "Cancelled";
    /// The Job disappeared before the run ended; it is never re-created.
    pub const JOB_DELETED: &str = "JobDeleted";
    /// Every result was saved.
    pub const RESULTS_SAVED: &str = "ResultsSaved";
    /// Some results could not be saved.
    pub const RESULTS_UPLOAD_FAILED: &str = "ResultsUploadFailed";
}

/// Sets condition `type_`, keeping its `lastTransitionTime` unless its status changes.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) {
    let status = if status { "True" } else { "False" };
    let transition = conditions
        .iter()
        .find(|c| c.type_ == type_)
        .filter(|c| c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    let condition = Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time: transition,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => *existing = condition,
        None => conditions.push(condition),
    }
}

/// The condition `type_`, if set.
pub fn get<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    #[test]
    fn the_transition_time_changes_only_with_the_status() {
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            STARTED,
            false,
            "Queued",
            "",
            Some(1),
            &at(10),
        );
        set(
            &mut conditions,
            STARTED,
            false,
            "PodStarting",
            "",
            Some(1),
            &at(20),
        );
        let started = get(&conditions, STARTED).unwrap();
        assert_eq!(started.last_transition_time, at(10));
        assert_eq!(started.reason, "PodStarting");
        set(
            &mut conditions,
            STARTED,
            true,
            "AgentStarted",
            "",
            Some(1),
            &at(30),
        );
        assert_eq!(
            get(&conditions, STARTED).unwrap().last_transition_time,
            at(30)
        );
        assert_eq!(conditions.len(), 1);
    }
}
