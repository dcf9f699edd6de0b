//! Writing conditions, with the one rule of conditions: a transition time changes only with the status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::contract::{ConditionType, Reason};

/// Sets the conditions of one status, all stamped with the same generation and time.
pub struct ConditionWriter<'a> {
    conditions: &'a mut Vec<Condition>,
    generation: Option<i64>,
    now: Time,
}

impl<'a> ConditionWriter<'a> {
    /// A writer of `conditions` for the spec `generation`, at `now`.
    pub fn new(conditions: &'a mut Vec<Condition>, generation: Option<i64>, now: Time) -> Self {
        Self {
            conditions,
            generation,
            now,
        }
    }

    /// Sets condition `type_`, keeping its `lastTransitionTime` unless its status changes.
    pub fn set(&mut self, type_: ConditionType, status: bool, reason: Reason, message: &str) {
        let status = if status { "True" } else { "False" };
        let existing = self
            .conditions
            .iter_mut()
            .find(|c| c.type_ == type_.as_str());
        let transition = existing
            .as_ref()
            .filter(|c| c.status == status)
            .map_or_else(|| self.now.clone(), |c| c.last_transition_time.clone());
        let condition = Condition {
            type_: type_.as_str().to_owned(),
            status: status.to_owned(),
            reason: reason.as_str().to_owned(),
            message: message.to_owned(),
            observed_generation: self.generation,
            last_transition_time: transition,
        };
        match existing {
            Some(existing) => *existing = condition,
            None => self.conditions.push(condition),
        }
    }
}

/// The condition `type_`, if set.
pub fn get(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_.as_str())
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
        ConditionWriter::new(&mut conditions, Some(1), at(10)).set(
            ConditionType::Started,
            false,
            Reason::Queued,
            "",
        );
        ConditionWriter::new(&mut conditions, Some(1), at(20)).set(
            ConditionType::Started,
            false,
            Reason::PodStarting,
            "",
        );
        let started = get(&conditions, ConditionType::Started).unwrap();
        assert_eq!(started.last_transition_time, at(10));
        assert_eq!(started.reason, "PodStarting");
        ConditionWriter::new(&mut conditions, Some(1), at(30)).set(
            ConditionType::Started,
            true,
            Reason::AgentStarted,
            "",
        );
        assert_eq!(
            get(&conditions, ConditionType::Started)
                .unwrap()
                .last_transition_time,
            at(30)
        );
        assert_eq!(conditions.len(), 1);
    }
}
