//! The lifecycle phase of an execution, which the execution's status and its notifications both carry.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Lifecycle phase of an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    /// Defined but held back (`spec.held`, `errand create`): nothing runs until it is started.
    Created,
    /// Accepted, not yet resolved.
    Pending,
    /// Resolved; Kueue holds the Job until its LocalQueue admits it. The message says why, in
    /// Kueue's words. The start timeout does not count this wait.
    Queued,
    /// Resolved (and admitted, when queued); the pod is being scheduled, pulled or staged.
    Starting,
    /// The agent is running.
    Running,
    /// The agent exited 0 and results are saved.
    Succeeded,
    /// The run failed; see the conditions' reason and the message.
    Failed,
    /// Stopped on request; partial results are saved.
    Cancelled,
}

impl Phase {
    /// Whether the execution can no longer change phase.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed | Phase::Cancelled)
    }
}
