//! What one status write tells the operator's metrics: each latency of a run and the size of its results, once, on the write that first shows it.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::AgentExecutionStatus;
use crate::api::contract::{ConditionType, Reason};
use crate::resolve::conditions;

/// The observations a status change makes, each `None` unless this change is the one that
/// first shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timings {
    /// Seconds Kueue held the Job (condition `Started` with reason `Queued`), on the change that
    /// ends the wait.
    pub queue_wait: Option<f64>,
    /// Seconds from the execution's creation to its agent's start.
    pub start_latency: Option<f64>,
    /// Seconds the agent ran, on the change to a terminal phase.
    pub run_duration: Option<f64>,
    /// Seconds from the execution's creation to its terminal phase.
    pub completed_after: Option<f64>,
    /// Bytes of the results saved, on the change to a terminal phase.
    pub results_bytes: Option<u64>,
}

/// What changing an execution created at `created` from `before` to `after` at `now`
/// observes.
pub fn timings(
    created: Option<&Time>,
    before: Option<&AgentExecutionStatus>,
    after: &AgentExecutionStatus,
    now: Timestamp,
) -> Timings {
    let seconds = |from: &Time, to: Timestamp| to.duration_since(from.0).as_secs_f64().max(0.0);
    let was_terminal = before
        .and_then(|s| s.phase)
        .is_some_and(crate::api::Phase::is_terminal);
    let ends = !was_terminal && after.phase.is_some_and(crate::api::Phase::is_terminal);
    let started_before = before.is_some_and(|s| s.start_time.is_some());
    let queued_since = before
        .and_then(|s| conditions::get(&s.conditions, ConditionType::Started))
        .filter(|c| c.reason == Reason::Queued.as_str())
        .map(|c| &c.last_transition_time);
    let still_queued = conditions::get(&after.conditions, ConditionType::Started)
        .is_some_and(|c| c.reason == Reason::Queued.as_str());
    Timings {
        queue_wait: queued_since
            .filter(|_| !still_queued)
            .map(|since| seconds(since, now)),
        start_latency: match (created, &after.start_time) {
            (Some(created), Some(start)) if !started_before => Some(seconds(created, start.0)),
            _ => None,
        },
        run_duration: match (&after.start_time, &after.completion_time) {
            (Some(start), Some(done)) if ends => Some(seconds(start, done.0)),
            _ => None,
        },
        completed_after: match (created, &after.completion_time) {
            (Some(created), Some(done)) if ends => Some(seconds(created, done.0)),
            _ => None,
        },
        results_bytes: ends.then(|| after.results.iter().map(|r| r.size).sum()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use super::*;
    use crate::api::{Phase, ResultEntry};

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(1_700_000_000 + second).unwrap())
    }

    fn started(reason: Reason, since: i64) -> Vec<Condition> {
        vec![Condition {
            type_: ConditionType::Started.as_str().to_owned(),
            status: if reason == Reason::AgentStarted {
                "True"
            } else {
                "False"
            }
            .to_owned(),
            reason: reason.as_str().to_owned(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: at(since),
        }]
    }

    fn status(phase: Phase, conditions: Vec<Condition>) -> AgentExecutionStatus {
        AgentExecutionStatus {
            phase: Some(phase),
            conditions,
            ..AgentExecutionStatus::default()
        }
    }

    #[test]
    fn each_latency_is_observed_once_on_the_change_that_shows_it() {
        let created = at(0);
        let queued = status(Phase::Queued, started(Reason::Queued, 1));
        // Admitted by Kueue at +31: the queue wait ends, nothing else yet.
        let starting = status(Phase::Starting, started(Reason::PodStarting, 1));
        let seen = timings(Some(&created), Some(&queued), &starting, at(31).0);
        assert_eq!(
            seen,
            Timings {
                queue_wait: Some(30.0),
                ..Timings::default()
            }
        );
        assert_eq!(
            timings(Some(&created), Some(&queued), &queued, at(40).0),
            Timings::default(),
            "still queued"
        );

        let mut running = status(Phase::Running, started(Reason::AgentStarted, 45));
        running.start_time = Some(at(45));
        let seen = timings(Some(&created), Some(&starting), &running, at(46).0);
        assert_eq!(seen.start_latency, Some(45.0));
        assert_eq!(
            timings(Some(&created), Some(&running), &running, at(50).0),
            Timings::default(),
            "a status that shows nothing new observes nothing"
        );

        let mut done = running.clone();
        done.phase = Some(Phase::Succeeded);
        done.completion_time = Some(at(105));
        done.results = ["input_workdir", "run_result"]
            .map(|name| ResultEntry {
                name: name.to_owned(),
                size: 1000,
                sha256: String::new(),
            })
            .to_vec();
        let seen = timings(Some(&created), Some(&running), &done, at(106).0);
        assert_eq!(
            seen,
            Timings {
                run_duration: Some(60.0),
                completed_after: Some(105.0),
                results_bytes: Some(2000),
                ..Timings::default()
            }
        );
        assert_eq!(
            timings(Some(&created), Some(&done), &done, at(200).0),
            Timings::default(),
            "a terminal status is counted once"
        );
    }
}
