//! The events the controller publishes: one per outcome, with the condition's PascalCase reason.

use kube::runtime::events::{Event, EventType};

use super::status::conditions;
use crate::api::{AgentExecutionStatus, Phase};

/// Longest event note the API server accepts.
const NOTE_LIMIT: usize = 1024;

/// The event for a status that just became terminal, if it did. Progress in between is in
/// the status; events are kept to outcomes so an execution costs few API writes.
pub fn outcome_event(
    before: Option<&AgentExecutionStatus>,
    after: &AgentExecutionStatus,
) -> Option<Event> {
    let phase = after.phase.filter(|p| p.is_terminal())?;
    if before.and_then(|s| s.phase) == Some(phase) {
        return None;
    }
    let (type_, condition) = match phase {
        Phase::Succeeded => (EventType::Normal, conditions::COMPLETE),
        Phase::Cancelled => (EventType::Normal, conditions::FAILED),
        _ => (EventType::Warning, conditions::FAILED),
    };
    let reason = conditions::get(&after.conditions, condition)?
        .reason
        .clone();
    let action = if reason == conditions::reason::INVALID_SPEC {
        "Resolve"
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
        type_,
        reason,
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::api::AgentExecution;
    use crate::controller::status;
    use crate::resolve::{InvalidSpec, Problem};

    #[test]
    fn an_outcome_is_published_once() {
        let execution = AgentExecution::new("calc", Default::default());
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
    }
}
