//! The events the controller publishes: one Warning per failed execution, with the condition's PascalCase reason.

use kube::runtime::events::{Event, EventType};

use crate::api::contract::{ConditionType, Reason};
use crate::api::{AgentExecutionStatus, Phase};
use crate::resolve::conditions;

/// Longest event note the API server accepts.
const NOTE_LIMIT: usize = 1024;

/// The Warning event for a status that just became `Failed`, if it did. Progress, success and
/// cancellation (which the user asked for) are in the status only: an execution that goes as
/// planned costs no event write.
pub fn outcome_event(
    before: Option<&AgentExecutionStatus>,
    after: &AgentExecutionStatus,
) -> Option<Event> {
    if after.phase != Some(Phase::Failed) || before.and_then(|s| s.phase) == Some(Phase::Failed) {
        return None;
    }
    let reason = conditions::get(&after.conditions, ConditionType::Failed)?
        .reason
        .clone();
    let action = if reason == Reason::InvalidSpec.as_str() {
        "Resolve"
    } else if reason == Reason::CreateRejected.as_str() {
        "Create"
    } else {
        "Run"
    };
    let mut note = after.message.clone().unwrap_or_default();
    if note.len() > NOTE_LIMIT {
        let mut cut = NOTE_LIMIT;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    Some(Event {
        type_: EventType::Warning,
        reason,
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    })
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;
    use crate::api::AgentExecution;
    use crate::controller::execution::status;
    use crate::resolve::{InvalidSpec, Problem};

    #[test]
    fn an_outcome_is_published_once() {
        let execution = AgentExecution::test();
        let invalid = InvalidSpec {
            problems: vec![Problem::new("spec.agentRef.name", "x".repeat(3000))],
        };
        let failed = status::invalid(&execution, &invalid, Timestamp::UNIX_EPOCH);
        let event = outcome_event(None, &failed).unwrap();
        assert_eq!(event.reason, "InvalidSpec");
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.action, "Resolve");
        assert!(event.note.unwrap().len() <= NOTE_LIMIT);
        assert!(outcome_event(Some(&failed), &failed).is_none());
        assert!(outcome_event(None, &AgentExecutionStatus::default()).is_none());
        let mut succeeded = failed.clone();
        succeeded.phase = Some(Phase::Succeeded);
        assert!(
            outcome_event(None, &succeeded).is_none(),
            "success is in the status only"
        );
        let mut cancelled = failed;
        cancelled.phase = Some(Phase::Cancelled);
        assert!(
            outcome_event(None, &cancelled).is_none(),
            "the user asked for it"
        );
    }
}
