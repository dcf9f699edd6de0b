//! The starting window of an AgentDeployment: when its current uninterrupted Starting period began, and whether it has lasted too long.
//!
//! The rules, each a test below: the window is measured from the start of the current
//! uninterrupted Starting period; losing readiness after Ready opens a fresh window; recovering
//! readiness ends it; anything else written while Starting (a new message, a scale, a
//! controller restart) keeps it. A deployment that failed stays failed until its spec changes,
//! which opens a fresh window.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::api::DeploymentPhase;

/// What the window is decided from: what was recorded and what is seen now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowFacts {
    /// The phase the status records.
    pub recorded: Option<DeploymentPhase>,
    /// When the recorded Starting period began (`status.startingSince`).
    pub starting_since: Option<Timestamp>,
    /// Whether the spec changed since the status was written (`observedGeneration` behind).
    pub spec_changed: bool,
    /// Whether a pod is ready now.
    pub serving: bool,
    /// `startingTimeoutSeconds`; `None` (0 in the spec) when the window never closes.
    pub timeout: Option<Duration>,
    /// The time of the decision.
    pub now: Timestamp,
}

/// Where the deployment stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// A pod is ready: no window runs.
    Ready,
    /// No pod is ready; the window opened at `since` and closes at `closes` (never, without
    /// a timeout).
    Starting {
        /// The start of the uninterrupted Starting period.
        since: Timestamp,
        /// When it fails if no pod is ready by then.
        closes: Option<Timestamp>,
    },
    /// The window closed with no pod ready: the deployment is Failed (or already was).
    Expired {
        /// When the failed Starting period began, when known.
        since: Option<Timestamp>,
    },
}

/// Decides the window from `facts`.
pub fn starting_window(facts: WindowFacts) -> Window {
    let failed = facts.recorded == Some(DeploymentPhase::Failed);
    if failed && !facts.spec_changed {
        // Failed is kept until the spec changes, even if a pod becomes ready later: whoever
        // waited for the deployment has been told it failed.
        return Window::Expired {
            since: facts.starting_since,
        };
    }
    if facts.serving {
        return Window::Ready;
    }
    let since = match (facts.recorded, facts.starting_since) {
        // Still Starting: the same period goes on, whatever else changed.
        (Some(DeploymentPhase::Starting), Some(since)) => since,
        // First seen, just lost its readiness, or failed and changed: a fresh window.
        _ => facts.now,
    };
    let closes = facts.timeout.map(|timeout| {
        SignedDuration::try_from(timeout)
            .ok()
            .and_then(|timeout| since.checked_add(timeout).ok())
            .unwrap_or(Timestamp::MAX)
    });
    match closes {
        Some(closes) if facts.now >= closes => Window::Expired { since: Some(since) },
        closes => Window::Starting { since, closes },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(60);

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    /// A deployment recorded in `recorded` since `since`, seen at `now`.
    fn facts(recorded: Option<DeploymentPhase>, since: Option<i64>, now: i64) -> WindowFacts {
        WindowFacts {
            recorded,
            starting_since: since.map(at),
            spec_changed: false,
            serving: false,
            timeout: Some(TIMEOUT),
            now: at(now),
        }
    }

    fn starting(since: i64) -> Window {
        Window::Starting {
            since: at(since),
            closes: Some(at(since + 60)),
        }
    }

    #[test]
    fn a_new_deployment_opens_its_window_when_first_seen() {
        assert_eq!(starting_window(facts(None, None, 5)), starting(5));
    }

    #[test]
    fn the_window_is_measured_from_the_start_of_the_uninterrupted_starting_period() {
        let starting_phase = Some(DeploymentPhase::Starting);
        assert_eq!(
            starting_window(facts(starting_phase, Some(0), 59)),
            starting(0)
        );
        assert_eq!(
            starting_window(facts(starting_phase, Some(0), 60)),
            Window::Expired { since: Some(at(0)) },
            "60 s after the period began, with a 60 s window"
        );
    }

    #[test]
    fn status_updates_while_starting_do_not_reset_the_window() {
        // Every reconcile while Starting rewrites the status (a new message, a replica count,
        // a controller restart re-reading it); each sees the recorded start and keeps it.
        for now in [10, 20, 30, 40, 50] {
            assert_eq!(
                starting_window(facts(Some(DeploymentPhase::Starting), Some(0), now)),
                starting(0),
                "at {now}"
            );
        }
        let scaled = WindowFacts {
            spec_changed: true,
            ..facts(Some(DeploymentPhase::Starting), Some(0), 61)
        };
        assert_eq!(
            starting_window(scaled),
            Window::Expired { since: Some(at(0)) },
            "a spec change while Starting does not interrupt the period either"
        );
    }

    #[test]
    fn losing_readiness_after_ready_opens_a_fresh_window() {
        // It was Starting from 0 to 50 (close to its end), then Ready; at 500 it loses its
        // readiness: the window starts at 500, not 0, and still runs at 559.
        let lost = facts(Some(DeploymentPhase::Ready), None, 500);
        assert_eq!(starting_window(lost), starting(500));
        assert_eq!(
            starting_window(facts(Some(DeploymentPhase::Starting), Some(500), 559)),
            starting(500)
        );
        assert_eq!(
            starting_window(facts(Some(DeploymentPhase::Starting), Some(500), 560)),
            Window::Expired {
                since: Some(at(500))
            }
        );
    }

    #[test]
    fn recovering_readiness_ends_the_window() {
        let recovered = WindowFacts {
            serving: true,
            ..facts(Some(DeploymentPhase::Starting), Some(0), 59)
        };
        assert_eq!(starting_window(recovered), Window::Ready);
        // ...even past the deadline, as long as it was not recorded Failed yet.
        let late = WindowFacts {
            serving: true,
            ..facts(Some(DeploymentPhase::Starting), Some(0), 90)
        };
        assert_eq!(starting_window(late), Window::Ready);
    }

    #[test]
    fn a_failed_deployment_stays_failed_until_its_spec_changes() {
        let ready_later = WindowFacts {
            serving: true,
            ..facts(Some(DeploymentPhase::Failed), Some(0), 120)
        };
        assert_eq!(
            starting_window(ready_later),
            Window::Expired { since: Some(at(0)) }
        );
        let redeployed = WindowFacts {
            spec_changed: true,
            ..facts(Some(DeploymentPhase::Failed), Some(0), 120)
        };
        assert_eq!(starting_window(redeployed), starting(120));
    }

    #[test]
    fn a_zero_timeout_never_closes_the_window() {
        let forever = WindowFacts {
            timeout: None,
            ..facts(Some(DeploymentPhase::Starting), Some(0), 1_000_000)
        };
        assert_eq!(
            starting_window(forever),
            Window::Starting {
                since: at(0),
                closes: None
            }
        );
    }
}
