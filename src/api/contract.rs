//! Names every layer agrees on: the condition types of an execution's status and their machine-readable reasons.

use std::fmt;

/// A condition of an execution's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// The spec was resolved and snapshotted (or not, with reason `InvalidSpec`).
    Resolved,
    /// The agent started.
    Started,
    /// The run succeeded (`kubectl wait --for=condition=Complete`).
    Complete,
    /// The run failed or was cancelled; the reason says which.
    Failed,
    /// The results are saved (or not, with reason `ResultsUploadFailed`).
    ResultsSaved,
}

impl ConditionType {
    /// The condition's `type` as it appears in the status.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConditionType::Resolved => "Resolved",
            ConditionType::Started => "Started",
            ConditionType::Complete => "Complete",
            ConditionType::Failed => "Failed",
            ConditionType::ResultsSaved => "ResultsSaved",
        }
    }
}

impl fmt::Display for ConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The machine-readable reason of a condition, of a Warning event and of a failed run record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The spec failed resolution or validation.
    InvalidSpec,
    /// The spec resolved and its snapshot was written.
    Resolved,
    /// The Job waits for Kueue to admit it.
    Queued,
    /// The pod is being scheduled, pulled or staged.
    PodStarting,
    /// The agent process started.
    AgentStarted,
    /// The agent exited 0 and its results were saved.
    Succeeded,
    /// The run passed its deadline (in the pod, or the Job's backstop).
    DeadlineExceeded,
    /// The pod did not start within `startTimeoutSeconds`.
    StartTimeout,
    /// An image could not be pulled within `startTimeoutSeconds`.
    ImagePullFailed,
    /// The pod could not be scheduled (or was refused by the node) within `startTimeoutSeconds`.
    Unschedulable,
    /// The agent exited non-zero, was killed, or could not be started.
    AgentFailed,
    /// The working directory could not be staged.
    StageFailed,
    /// The pod was evicted, preempted or otherwise disrupted.
    PodEvicted,
    /// The run was cancelled on request.
    Cancelled,
    /// The Job disappeared before the run ended; it is never re-created.
    JobDeleted,
    /// Every result was saved.
    ResultsSaved,
    /// Some results could not be saved.
    ResultsUploadFailed,
}

impl Reason {
    /// The reason as it appears in conditions, events and records (PascalCase).
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::Resolved => "Resolved",
            Reason::Queued => "Queued",
            Reason::PodStarting => "PodStarting",
            Reason::AgentStarted => "AgentStarted",
            Reason::Succeeded => "Succeeded",
            Reason::DeadlineExceeded => "DeadlineExceeded",
            Reason::StartTimeout => "StartTimeout",
            Reason::ImagePullFailed => "ImagePullFailed",
            Reason::Unschedulable => "Unschedulable",
            Reason::AgentFailed => "AgentFailed",
            Reason::StageFailed => "StageFailed",
            Reason::PodEvicted => "PodEvicted",
            Reason::Cancelled => "Cancelled",
            Reason::JobDeleted => "JobDeleted",
            Reason::ResultsSaved => "ResultsSaved",
            Reason::ResultsUploadFailed => "ResultsUploadFailed",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
