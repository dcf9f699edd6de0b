//! Leader election through a `coordination.k8s.io/v1` Lease, so two replicas never reconcile at once.
//!
//! A replica reconciles only after it holds the Lease and stops (the process exits) as soon as
//! it cannot renew within the renew deadline, before the Lease can expire for the others.
//! Writes use the Lease's resourceVersion, so two candidates never both win a round. A
//! candidate tries again when the holder's Lease expires if that comes before its next retry,
//! so a leader that dies is replaced within the lease duration of its last renewal.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tracing::{info, warn};

/// How a replica takes part in the election.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// How often candidates and the leader try.
    pub retry_period: Duration,
    /// Create the Lease when it does not exist. Off when an installer (the Helm chart) owns
    /// it: then a Lease deleted while uninstalling is never created again by a replica that is
    /// about to stop, and the replica steps down instead.
    pub create_lease: bool,
}

impl LeaseSettings {
    /// The usual timings of Kubernetes controllers (15s / 10s / 2s).
    pub fn new(name: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            create_lease: true,
        }
    }
}

/// What a candidate should do with the Lease it read.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// Another replica holds a Lease valid until then.
    Wait {
        /// When the Lease expires unless renewed.
        until: Timestamp,
    },
    /// Write this spec (create when there was no Lease, else replace).
    Write(LeaseSpec),
}

/// How long a candidate that saw a Lease valid `until` waits before its next try at `now`:
/// the retry period, or less when the Lease expires sooner.
pub fn next_try_in(retry_period: Duration, until: Option<Timestamp>, now: Timestamp) -> Duration {
    let Some(until) = until else {
        return retry_period;
    };
    let left = until.duration_since(now);
    Duration::try_from(left)
        .unwrap_or(Duration::ZERO)
        .min(retry_period)
}

/// Decides, from the current Lease spec, whether `identity` may hold the Lease at `now`.
pub fn claim(
    current: Option<&LeaseSpec>,
    identity: &str,
    duration: Duration,
    now: Timestamp,
) -> Claim {
    let seconds = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX);
    let fresh = |transitions: i32| LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(seconds),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    let Some(current) = current else {
        return Claim::Write(fresh(0));
    };
    let holder = current.holder_identity.as_deref().unwrap_or_default();
    if holder == identity {
        return Claim::Write(LeaseSpec {
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(seconds),
            ..current.clone()
        });
    }
    let valid_for =
        SignedDuration::from_secs(i64::from(current.lease_duration_seconds.unwrap_or(seconds)));
    let until = current.renew_time.as_ref().map(|renewed| {
        renewed
            .0
            .saturating_add(valid_for)
            .expect("a lease duration fits")
    });
    match until {
        Some(until) if !holder.is_empty() && now < until => Claim::Wait { until },
        _ => Claim::Write(fresh(current.lease_transitions.unwrap_or(0) + 1)),
    }
}

/// Who holds the Lease after a round.
#[derive(Debug, PartialEq)]
enum Holder {
    /// This replica.
    This,
    /// Another replica, until then (unknown when a write lost a race or there is no Lease).
    Another { until: Option<Timestamp> },
}

/// One round: read the Lease and claim or renew it.
async fn try_hold(api: &Api<Lease>, settings: &LeaseSettings) -> Result<Holder, kube::Error> {
    let current = api.get_opt(&settings.name).await?;
    if current.is_none() && !settings.create_lease {
        warn!(lease = %settings.name, "the lease does not exist and is not this replica's to create");
        return Ok(Holder::Another { until: None });
    }
    let spec = current.as_ref().and_then(|l| l.spec.as_ref());
    let spec = match claim(
        spec,
        &settings.identity,
        settings.lease_duration,
        Timestamp::now(),
    ) {
        Claim::Write(spec) => spec,
        Claim::Wait { until } => return Ok(Holder::Another { until: Some(until) }),
    };
    // The Lease read keeps its metadata (and resourceVersion, so two candidates never both
    // win): labels and annotations of a Lease the chart installed survive every renewal.
    let metadata = match &current {
        Some(lease) => ObjectMeta {
            managed_fields: None,
            ..lease.metadata.clone()
        },
        None => ObjectMeta {
            name: Some(settings.name.clone()),
            ..ObjectMeta::default()
        },
    };
    let lease = Lease {
        metadata,
        spec: Some(spec),
    };
    let written = match current {
        None => api.create(&PostParams::default(), &lease).await,
        Some(_) => {
            api.replace(&settings.name, &PostParams::default(), &lease)
                .await
        }
    };
    match written {
        Ok(_) => Ok(Holder::This),
        Err(kube::Error::Api(status)) if status.is_conflict() || status.is_already_exists() => {
            Ok(Holder::Another { until: None })
        }
        Err(e) => Err(e),
    }
}

/// Waits until this replica holds the Lease.
pub async fn acquire(api: &Api<Lease>, settings: &LeaseSettings) {
    loop {
        let until = match try_hold(api, settings).await {
            Ok(Holder::This) => {
                info!(lease = %settings.name, identity = %settings.identity, "acquired the lease");
                return;
            }
            Ok(Holder::Another { until }) => until,
            Err(e) => {
                warn!(lease = %settings.name, "reading or writing the lease: {e}");
                None
            }
        };
        let wait = next_try_in(settings.retry_period, until, Timestamp::now());
        tokio::time::sleep(wait).await;
    }
}

/// Renews the Lease every retry period; returns when it could not be renewed within the renew
/// deadline, at which point this replica must stop reconciling.
pub async fn keep(api: &Api<Lease>, settings: &LeaseSettings) {
    let mut last_renewal = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(settings.retry_period).await;
        match try_hold(api, settings).await {
            Ok(Holder::This) => last_renewal = tokio::time::Instant::now(),
            Ok(Holder::Another { .. }) => {
                warn!(lease = %settings.name, "another replica holds the lease");
                return;
            }
            Err(e) => warn!(lease = %settings.name, "renewing the lease: {e}"),
        }
        if last_renewal.elapsed() >= settings.renew_deadline {
            warn!(lease = %settings.name, "could not renew the lease in time");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn held_by(identity: &str, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(identity.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(at(renewed))),
            acquire_time: Some(MicroTime(at(0))),
            lease_transitions: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn the_first_candidate_creates_the_lease() {
        let Claim::Write(spec) = claim(None, "a", D, at(0)) else {
            panic!()
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn a_valid_lease_of_another_replica_is_respected_until_it_expires() {
        assert_eq!(
            claim(Some(&held_by("b", 10)), "a", D, at(24)),
            Claim::Wait { until: at(25) }
        );
    }

    #[test]
    fn a_candidate_tries_again_when_the_lease_expires_if_that_comes_first() {
        let retry = Duration::from_secs(2);
        assert_eq!(next_try_in(retry, Some(at(25)), at(20)), retry);
        let soon = at(25) - SignedDuration::from_millis(300);
        assert_eq!(
            next_try_in(retry, Some(at(25)), soon),
            Duration::from_millis(300)
        );
        assert_eq!(next_try_in(retry, Some(at(25)), at(26)), Duration::ZERO);
        assert_eq!(next_try_in(retry, None, at(26)), retry);
    }

    #[test]
    fn an_expired_lease_is_taken_over() {
        let Claim::Write(spec) = claim(Some(&held_by("b", 10)), "a", D, at(25)) else {
            panic!()
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_transitions, Some(4));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(25))));
    }

    #[test]
    fn the_holder_renews_without_a_transition() {
        let Claim::Write(spec) = claim(Some(&held_by("a", 10)), "a", D, at(12)) else {
            panic!()
        };
        assert_eq!(spec.renew_time, Some(MicroTime(at(12))));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(spec.lease_transitions, Some(3));
    }
}
