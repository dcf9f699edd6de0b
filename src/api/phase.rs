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
    /// Every phase, in lifecycle order: what the docs list and what every filter accepts.
    pub const ALL: [Phase; 8] = [
        Phase::Created,
        Phase::Pending,
        Phase::Queued,
        Phase::Starting,
        Phase::Running,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Cancelled,
    ];

    /// The phase as the status spells it (`Running`).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Created => "Created",
            Phase::Pending => "Pending",
            Phase::Queued => "Queued",
            Phase::Starting => "Starting",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Cancelled => "Cancelled",
        }
    }

    /// The phase named `value`, in any case (`running`, `Running`).
    pub fn parse(value: &str) -> Option<Phase> {
        Phase::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(value))
    }

    /// Whether the execution can no longer change phase.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed | Phase::Cancelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_is_listed_and_spelled_as_serde_spells_it() {
        let schema = schemars::schema_for!(Phase).to_value();
        let names: Vec<&str> = schema["enum"]
            .as_array()
            .or_else(|| schema["oneOf"].as_array())
            .expect("the phases")
            .iter()
            .map(|v| v.as_str().or_else(|| v["const"].as_str()).unwrap())
            .collect();
        let listed: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(names, listed);
        for phase in Phase::ALL {
            assert_eq!(serde_json::to_value(phase).unwrap(), phase.as_str());
            assert_eq!(Phase::parse(&phase.as_str().to_lowercase()), Some(phase));
        }
    }
}
