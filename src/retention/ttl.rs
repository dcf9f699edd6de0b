//! When a finished execution expires: its lifetime after finishing (`ttlSecondsAfterFinished`, else its namespace's annotation, else the controller's default) and what to do until then.

use std::time::Duration;

use jiff::Timestamp;

use crate::api::contract::ConditionType;
use crate::api::{AgentExecution, Phase};

/// The longest the controller waits before looking at a finished execution again, so a
/// lifetime's end is never scheduled further out than a timer can hold and a clock step is
/// corrected within a day.
pub const MAX_RECHECK: Duration = Duration::from_secs(24 * 3600);

/// Where an execution's lifetime comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifetimeSource {
    /// The execution's own `spec.ttlSecondsAfterFinished`.
    Execution,
    /// Its namespace's `errand.dev/ttl-seconds-after-finished` annotation.
    Namespace,
    /// The controller's default (`--default-ttl-seconds-after-finished`).
    Controller,
}

impl LifetimeSource {
    /// The source as logs and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            LifetimeSource::Execution => "execution",
            LifetimeSource::Namespace => "namespace",
            LifetimeSource::Controller => "controller",
        }
    }
}

/// How long a finished execution is kept, and who said so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// Seconds after finishing.
    pub seconds: i64,
    /// Who set it.
    pub source: LifetimeSource,
}

/// The lifetime of an execution: its own, else its namespace's, else the controller's
/// default; `None` keeps it until it is deleted.
pub fn lifetime(
    execution: Option<i64>,
    namespace: Option<i64>,
    controller: Option<i64>,
) -> Option<Lifetime> {
    let of = |seconds: Option<i64>, source| seconds.map(|seconds| Lifetime { seconds, source });
    of(execution, LifetimeSource::Execution)
        .or(of(namespace, LifetimeSource::Namespace))
        .or(of(controller, LifetimeSource::Controller))
}

/// Reads a lifetime as the namespace annotation and the controller's flag spell it: whole
/// seconds from 0 to [`crate::api::MAX_TTL_SECONDS_AFTER_FINISHED`].
pub fn parse_seconds(value: &str) -> Result<i64, InvalidLifetime> {
    let seconds: i64 = value
        .trim()
        .parse()
        .map_err(|_| InvalidLifetime::NotSeconds {
            value: value.to_owned(),
        })?;
    crate::resolve::lifetime_seconds(seconds)?;
    Ok(seconds)
}

/// Why a lifetime as the annotation or the flag spells it is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidLifetime {
    /// Not a whole number.
    #[error("{value:?} is not a whole number of seconds")]
    NotSeconds {
        /// The text given.
        value: String,
    },
    /// A whole number out of the bounds.
    #[error(transparent)]
    OutOfRange(#[from] crate::resolve::InvalidValue),
}

/// What to do about an execution's retention now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retention {
    /// Not finished, or no lifetime applies: kept until someone deletes it.
    Kept,
    /// Not expired yet: look again after this long (at most [`MAX_RECHECK`]).
    RecheckIn(Duration),
    /// Its lifetime ran out: delete it (its results and children go with it).
    Expired {
        /// When it finished.
        finished: Timestamp,
        /// The lifetime that ran out.
        lifetime: Lifetime,
    },
}

/// When a finished execution finished: its `completionTime`, else when its `Complete` or
/// `Failed` condition last changed, else when it was created (a finished execution without
/// any of these still expires).
pub fn finished_at(execution: &AgentExecution) -> Option<Timestamp> {
    let status = execution.status.as_ref()?;
    if !status.phase.is_some_and(Phase::is_terminal) {
        return None;
    }
    let ended = [ConditionType::Complete, ConditionType::Failed];
    let from_conditions = || {
        status
            .conditions
            .iter()
            .filter(|c| c.status == "True" && ended.iter().any(|t| t.as_str() == c.type_))
            .map(|c| c.last_transition_time.0)
            .max()
    };
    status
        .completion_time
        .as_ref()
        .map(|t| t.0)
        .or_else(from_conditions)
        .or_else(|| execution.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// Decides an execution's retention at `now` under `lifetime`.
pub fn decide(execution: &AgentExecution, lifetime: Option<Lifetime>, now: Timestamp) -> Retention {
    let (Some(finished), Some(lifetime)) = (finished_at(execution), lifetime) else {
        return Retention::Kept;
    };
    let expires = finished
        .checked_add(jiff::SignedDuration::from_secs(lifetime.seconds.max(0)))
        .unwrap_or(Timestamp::MAX);
    if now >= expires {
        return Retention::Expired { finished, lifetime };
    }
    let left = now.duration_until(expires).unsigned_abs();
    Retention::RecheckIn(left.min(MAX_RECHECK))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;
    use crate::api::AgentExecutionStatus;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn finished(phase: Phase, completion: Option<i64>) -> AgentExecution {
        let mut execution = AgentExecution::new("calc", Default::default());
        execution.metadata.creation_timestamp = Some(Time(at(0)));
        execution.status = Some(AgentExecutionStatus {
            phase: Some(phase),
            completion_time: completion.map(|s| Time(at(s))),
            ..Default::default()
        });
        execution
    }

    fn ttl(seconds: i64) -> Option<Lifetime> {
        lifetime(Some(seconds), None, None)
    }

    #[test]
    fn the_execution_wins_over_its_namespace_which_wins_over_the_controller() {
        let source = |l: Option<Lifetime>| l.map(|l| (l.seconds, l.source));
        assert_eq!(
            source(lifetime(Some(5), Some(60), Some(3600))),
            Some((5, LifetimeSource::Execution))
        );
        assert_eq!(
            source(lifetime(None, Some(60), Some(3600))),
            Some((60, LifetimeSource::Namespace))
        );
        assert_eq!(
            source(lifetime(None, None, Some(3600))),
            Some((3600, LifetimeSource::Controller))
        );
        assert_eq!(source(lifetime(None, None, None)), None);
        assert_eq!(
            source(lifetime(Some(0), Some(60), None)),
            Some((0, LifetimeSource::Execution)),
            "0 is a lifetime (delete at once), not an absence"
        );
    }

    #[test]
    fn a_finished_execution_expires_its_lifetime_after_its_completion() {
        let done = finished(Phase::Succeeded, Some(100));
        assert_eq!(
            decide(&done, ttl(30), at(100)),
            Retention::RecheckIn(Duration::from_secs(30))
        );
        assert_eq!(
            decide(&done, ttl(30), at(129)),
            Retention::RecheckIn(Duration::from_secs(1))
        );
        let expired = decide(&done, ttl(30), at(130));
        assert_eq!(
            expired,
            Retention::Expired {
                finished: at(100),
                lifetime: ttl(30).unwrap()
            }
        );
        assert!(matches!(
            decide(&done, ttl(0), at(100)),
            Retention::Expired { .. }
        ));
    }

    #[test]
    fn running_executions_and_those_without_a_lifetime_are_kept() {
        for phase in [
            Phase::Pending,
            Phase::Queued,
            Phase::Starting,
            Phase::Running,
        ] {
            let live = finished(phase, None);
            assert_eq!(decide(&live, ttl(0), at(1_000_000)), Retention::Kept);
        }
        let done = finished(Phase::Failed, Some(10));
        assert_eq!(decide(&done, None, at(1_000_000)), Retention::Kept);
        let mut unknown = finished(Phase::Cancelled, Some(10));
        unknown.status = None;
        assert_eq!(decide(&unknown, ttl(0), at(20)), Retention::Kept);
    }

    #[test]
    fn a_long_lifetime_is_looked_at_again_within_a_day() {
        let done = finished(Phase::Succeeded, Some(0));
        let year = crate::api::MAX_TTL_SECONDS_AFTER_FINISHED;
        assert_eq!(
            decide(&done, ttl(year), at(0)),
            Retention::RecheckIn(MAX_RECHECK)
        );
        assert!(matches!(
            decide(&done, ttl(year), at(year)),
            Retention::Expired { .. }
        ));
    }

    #[test]
    fn without_a_completion_time_the_end_condition_or_the_creation_counts() {
        let mut done = finished(Phase::Failed, None);
        assert_eq!(finished_at(&done), Some(at(0)), "the creation");
        done.status.as_mut().unwrap().conditions = vec![Condition {
            type_: "Failed".into(),
            status: "True".into(),
            reason: "InvalidSpec".into(),
            message: String::new(),
            last_transition_time: Time(at(7)),
            observed_generation: None,
        }];
        assert_eq!(finished_at(&done), Some(at(7)), "the Failed condition");
        assert_eq!(
            decide(&done, ttl(3), at(10)),
            Retention::Expired {
                finished: at(7),
                lifetime: ttl(3).unwrap()
            }
        );
    }

    #[test]
    fn lifetimes_are_whole_seconds_within_the_bounds() {
        assert_eq!(parse_seconds("0"), Ok(0));
        assert_eq!(parse_seconds(" 3600 "), Ok(3600));
        assert!(
            parse_seconds("-1")
                .unwrap_err()
                .to_string()
                .contains("out of range")
        );
        assert!(
            parse_seconds("1h")
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
        let too_long = (crate::api::MAX_TTL_SECONDS_AFTER_FINISHED + 1).to_string();
        assert!(
            parse_seconds(&too_long)
                .unwrap_err()
                .to_string()
                .contains("366 days")
        );
    }
}
