//! When a webhook delivery is tried, what an endpoint's answer means, and the record each attempt leaves in `status.notify.webhook`: decisions as data, no I/O.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{DeliveryState, WebhookDelivery};

/// Attempts before a delivery is given up (`Failed`).
pub const MAX_ATTEMPTS: u32 = 8;
/// The wait after the first failed attempt; it doubles after each one.
pub const FIRST_RETRY_DELAY: Duration = Duration::from_secs(2);
/// The longest wait between two attempts.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);
/// How long one attempt may take (connect, send, answer).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// What the endpoint made of one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// It answered with this HTTP status.
    Answered(u16),
    /// No answer, for this reason (a class: the detail, which may name addresses, goes to the
    /// controller's log only).
    Unanswered(Unanswered),
}

/// Why an attempt got no answer: what a tenant may learn of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// The URL's host is an address the controller's outbound policy denies.
    RefusedByPolicy,
    /// No answer within [`ATTEMPT_TIMEOUT`].
    Timeout,
    /// The host did not resolve, or refused or dropped the connection, or TLS failed.
    Unreachable,
    /// The signing Secret or its key could not be read.
    SigningKeyUnreadable,
    /// The `urlFrom` Secret or its key could not be read.
    UrlUnreadable,
    /// The URL (the spec's, or the `urlFrom` Secret's value) is not an absolute http(s) URL
    /// without user information.
    InvalidUrl,
}

impl Unanswered {
    /// The `lastError` of an attempt that ended so: its class, then what it means.
    pub fn message(self) -> String {
        match self {
            Unanswered::RefusedByPolicy => "refused-by-policy: the URL's address is one the \
                controller may not send to (ask the operator to allow it in outbound.allow)"
                .to_owned(),
            Unanswered::Timeout => format!(
                "timeout: the endpoint did not answer within {}s",
                ATTEMPT_TIMEOUT.as_secs()
            ),
            Unanswered::Unreachable => {
                "unreachable: the host did not resolve, or the connection or TLS failed".to_owned()
            }
            Unanswered::SigningKeyUnreadable => "signing-key-unreadable: the signing Secret or \
                its key could not be read"
                .to_owned(),
            Unanswered::UrlUnreadable => {
                "url-unreadable: the urlFrom Secret or its key could not be read".to_owned()
            }
            Unanswered::InvalidUrl => "invalid-url: the URL (or the urlFrom Secret's value) is \
                not an absolute http(s) URL without user information"
                .to_owned(),
        }
    }

    /// Whether another attempt may fare better: not when the policy refused the address.
    fn retryable(self) -> bool {
        self != Unanswered::RefusedByPolicy
    }
}

/// The `lastError` of an answer with `status` that did not deliver: its class and the status.
fn answered_message(status: u16) -> String {
    let class = match status {
        300..=399 => "http-3xx",
        400..=499 => "http-4xx",
        500..=599 => "http-5xx",
        _ => "http-other",
    };
    let redirect = if (300..400).contains(&status) {
        "; redirects are not followed"
    } else {
        ""
    };
    format!("{class}: the endpoint answered HTTP {status}{redirect}")
}

/// What to do about an execution's webhook now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Make an attempt.
    Attempt,
    /// Look again after this long.
    WaitFor(Duration),
    /// Nothing more: delivered or given up.
    Done,
}

/// The next step of a delivery that stands at `delivery` (`None`: not tried yet).
pub fn next_step(delivery: Option<&WebhookDelivery>, now: Timestamp) -> Step {
    let Some(delivery) = delivery else {
        return Step::Attempt;
    };
    if delivery.state != DeliveryState::Pending {
        return Step::Done;
    }
    let due = delivery.next_attempt_time.as_ref().map(|t| t.0);
    match due.map(|due| now.duration_until(due)) {
        Some(wait) if wait.is_positive() => {
            Step::WaitFor(Duration::try_from(wait).unwrap_or(MAX_RETRY_DELAY))
        }
        _ => Step::Attempt,
    }
}

/// The wait after `failed` failed attempts: [`FIRST_RETRY_DELAY`], doubling, at most
/// [`MAX_RETRY_DELAY`].
pub fn retry_delay(failed: u32) -> Duration {
    let doublings = failed.saturating_sub(1).min(16);
    FIRST_RETRY_DELAY
        .saturating_mul(1 << doublings)
        .min(MAX_RETRY_DELAY)
}

/// Whether an answer with `status` is worth another attempt: timeouts, rate limits and server
/// errors are; any other 4xx (the endpoint refused this request) and 3xx (redirects are not
/// followed: the signed request goes only where the spec says) are not.
fn retryable(status: u16) -> bool {
    matches!(status, 408 | 429) || status >= 500
}

/// The record after an attempt that ended in `outcome` at `now`, following `previous`.
pub fn record_attempt(
    previous: Option<&WebhookDelivery>,
    event_id: &str,
    outcome: &AttemptOutcome,
    now: Timestamp,
) -> WebhookDelivery {
    let attempts = previous.map_or(0, |p| p.attempts).saturating_add(1);
    let (status, unanswered) = match outcome {
        AttemptOutcome::Answered(status) => (Some(*status), None),
        AttemptOutcome::Unanswered(why) => (None, Some(*why)),
    };
    let state = match (status, unanswered) {
        (Some(200..=299), _) => DeliveryState::Delivered,
        (Some(code), _) if !retryable(code) => DeliveryState::Failed,
        (_, Some(why)) if !why.retryable() => DeliveryState::Failed,
        _ if attempts >= MAX_ATTEMPTS => DeliveryState::Failed,
        _ => DeliveryState::Pending,
    };
    let error = unanswered.map(Unanswered::message).or_else(|| {
        status
            .filter(|_| state != DeliveryState::Delivered)
            .map(answered_message)
    });
    let at = |t: Timestamp| Some(Time(t));
    WebhookDelivery {
        event_id: event_id.to_owned(),
        state,
        attempts,
        last_attempt_time: at(now),
        last_status_code: status,
        last_error: error,
        delivered_time: (state == DeliveryState::Delivered)
            .then_some(now)
            .and_then(at),
        next_attempt_time: (state == DeliveryState::Pending)
            .then(|| now + retry_delay(attempts))
            .and_then(at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-30T22:00:00Z".parse().unwrap()
    }

    #[test]
    fn the_first_attempt_is_made_at_once() {
        assert_eq!(next_step(None, now()), Step::Attempt);
    }

    #[test]
    fn a_2xx_answer_delivers_it() {
        let record = record_attempt(
            None,
            "u/execution.finished",
            &AttemptOutcome::Answered(204),
            now(),
        );
        assert_eq!(record.state, DeliveryState::Delivered);
        assert_eq!(record.attempts, 1);
        assert_eq!(record.delivered_time, Some(Time(now())));
        assert_eq!(record.last_error, None);
        assert_eq!(record.next_attempt_time, None);
        assert_eq!(next_step(Some(&record), now()), Step::Done);
    }

    #[test]
    fn server_errors_and_timeouts_are_retried_with_doubling_waits() {
        let mut record: Option<WebhookDelivery> = None;
        let mut at = now();
        let mut waits = Vec::new();
        for attempt in 1..=MAX_ATTEMPTS {
            let outcome = if attempt % 2 == 0 {
                AttemptOutcome::Unanswered(Unanswered::Unreachable)
            } else {
                AttemptOutcome::Answered(503)
            };
            let next = record_attempt(record.as_ref(), "id", &outcome, at);
            assert_eq!(next.attempts, attempt);
            assert_ne!(
                next_step(Some(&next), at),
                Step::Attempt,
                "never twice at once"
            );
            if let Some(due) = &next.next_attempt_time {
                waits.push(due.0.duration_since(at).as_secs());
                assert_eq!(next_step(Some(&next), due.0), Step::Attempt);
                at = due.0;
            }
            record = Some(next);
        }
        assert_eq!(waits, [2, 4, 8, 16, 32, 64, 128]);
        let last = record.unwrap();
        assert_eq!(last.state, DeliveryState::Failed, "attempts ran out");
        assert_eq!(
            last.last_error.as_deref(),
            Some("unreachable: the host did not resolve, or the connection or TLS failed")
        );
        assert_eq!(next_step(Some(&last), at), Step::Done);
    }

    #[test]
    fn a_pending_delivery_waits_until_it_is_due() {
        let record = record_attempt(None, "id", &AttemptOutcome::Answered(500), now());
        assert_eq!(record.state, DeliveryState::Pending);
        assert_eq!(record.last_status_code, Some(500));
        assert_eq!(
            record.last_error.as_deref(),
            Some("http-5xx: the endpoint answered HTTP 500")
        );
        assert_eq!(
            next_step(Some(&record), now() + Duration::from_millis(500)),
            Step::WaitFor(Duration::from_millis(1500))
        );
    }

    #[test]
    fn a_refusal_is_not_retried_but_rate_limits_are() {
        for code in [400, 401, 404, 410, 301] {
            let record = record_attempt(None, "id", &AttemptOutcome::Answered(code), now());
            assert_eq!(record.state, DeliveryState::Failed, "{code}");
            assert_eq!(record.next_attempt_time, None);
        }
        for code in [408, 429, 500, 502] {
            let record = record_attempt(None, "id", &AttemptOutcome::Answered(code), now());
            assert_eq!(record.state, DeliveryState::Pending, "{code}");
        }
    }

    #[test]
    fn waits_are_capped() {
        assert_eq!(retry_delay(1), FIRST_RETRY_DELAY);
        assert_eq!(retry_delay(40), MAX_RETRY_DELAY);
    }

    #[test]
    fn a_refusal_by_the_outbound_policy_ends_the_delivery_naming_only_its_class() {
        let record = record_attempt(
            None,
            "id",
            &AttemptOutcome::Unanswered(Unanswered::RefusedByPolicy),
            now(),
        );
        assert_eq!(record.state, DeliveryState::Failed);
        assert_eq!(record.next_attempt_time, None);
        let error = record.last_error.unwrap();
        assert!(error.starts_with("refused-by-policy: "), "{error}");
        assert!(
            !error.chars().any(|c| c.is_ascii_digit()),
            "no address: {error}"
        );
        for why in [Unanswered::Timeout, Unanswered::SigningKeyUnreadable] {
            let record = record_attempt(None, "id", &AttemptOutcome::Unanswered(why), now());
            assert_eq!(record.state, DeliveryState::Pending, "{why:?}");
        }
        let redirect = record_attempt(None, "id", &AttemptOutcome::Answered(302), now());
        assert_eq!(
            redirect.last_error.as_deref(),
            Some("http-3xx: the endpoint answered HTTP 302; redirects are not followed")
        );
    }
}
