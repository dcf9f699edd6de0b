//! The run budget: how long a run may take from its Job's start to its last upload, and whether the store's signed URLs can last that long.
//!
//! One budget answers both questions, so the Job's backstop deadline and the grants' expiry
//! can never disagree: the deadline covers the start timeout, the run timeout and the staging
//! and upload allowance; the URLs last that long plus the termination grace, during which a
//! stopped runner still uploads partial results. The arithmetic saturates, so no timeout a
//! spec can hold makes it overflow.

use jiff::{SignedDuration, Timestamp};

use super::outbound_policy::OutboundPolicy;
use super::{InvalidSpec, Problem, Snapshot};
use std::sync::Arc;

/// What the cluster adds to every run's own timeouts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunAllowance {
    /// Seconds for staging the working directory and uploading the results.
    pub staging_seconds: i64,
    /// Seconds a pod gets between SIGTERM and SIGKILL to stop the agent and save partial results.
    pub grace_seconds: i64,
}

/// The time one run may take, from its timeouts and the cluster's allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunBudget {
    /// Seconds the pod may take to start.
    pub start_timeout_seconds: i64,
    /// Seconds the agent may run.
    pub timeout_seconds: i64,
    /// Seconds the extension's step may run after it (0 without an extension).
    pub extension_seconds: i64,
    /// What the cluster adds.
    pub allowance: RunAllowance,
}

impl RunBudget {
    /// The budget of the run `snapshot` describes.
    pub fn of(snapshot: &Snapshot, allowance: RunAllowance) -> Self {
        Self {
            start_timeout_seconds: snapshot.start_timeout_seconds,
            timeout_seconds: snapshot.timeout_seconds,
            extension_seconds: snapshot.extension.as_ref().map_or(0, |e| e.timeout_seconds),
            allowance,
        }
    }

    /// The Job's `activeDeadlineSeconds`: start timeout + timeout + the extension's timeout +
    /// staging allowance. It is a backstop; the runners' own deadlines fire first.
    pub fn job_deadline_seconds(&self) -> i64 {
        self.start_timeout_seconds
            .saturating_add(self.timeout_seconds)
            .saturating_add(self.extension_seconds)
            .saturating_add(self.allowance.staging_seconds)
    }

    /// How long the run's signed URLs must last: the Job's deadline plus the termination grace.
    pub fn url_lifetime_seconds(&self) -> i64 {
        self.job_deadline_seconds()
            .saturating_add(self.allowance.grace_seconds)
    }

    /// When URLs signed at `now` for this run must expire (the end of time when the budget
    /// outlasts it).
    pub fn urls_expire_at(&self, now: Timestamp) -> Timestamp {
        let lifetime = self.url_lifetime_seconds();
        now.checked_add(SignedDuration::from_secs(lifetime))
            .unwrap_or(if lifetime < 0 {
                Timestamp::MIN
            } else {
                Timestamp::MAX
            })
    }

    /// Checks that URLs lasting at most `max_url_lifetime_seconds` (no limit when `None`) cover
    /// the run. The problem names `spec.timeoutSeconds`, the part of the budget a user sets.
    pub fn check_url_lifetime(&self, max_url_lifetime_seconds: Option<i64>) -> Result<(), Problem> {
        let Some(max) = max_url_lifetime_seconds else {
            return Ok(());
        };
        let needed = self.url_lifetime_seconds();
        if (1..=max).contains(&needed) {
            return Ok(());
        }
        Err(Problem::new(
            "spec.timeoutSeconds",
            format!(
                "{}: with the start timeout and the staging and upload budget the run needs \
                 signed store URLs valid for {needed}s, and this store's last at most {max}s",
                self.timeout_seconds
            ),
        ))
    }
}

/// What a cluster puts around every run beyond its spec: the allowance it adds, how long its
/// store's signed URLs can last, and whether it has somewhere to send auto telemetry. The
/// webhook and the controller (and the local backend, with its own settings) check a snapshot
/// against the same limits, so a run the installation cannot serve is refused at submission,
/// or failed as `InvalidSpec` before anything is created.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// What the cluster adds to each run's timeouts.
    pub allowance: RunAllowance,
    /// The longest a signed store URL may last, in seconds (`None`: no limit).
    pub max_url_lifetime_seconds: Option<i64>,
    /// Whether an OTLP endpoint is configured (the chart's `telemetry.otlpEndpoint`,
    /// `--otlp-endpoint`): without one, `autoTelemetry: true` is refused rather than ignored.
    pub telemetry_configured: bool,
    /// What a run's egress ranges may not lie inside.
    pub outbound: Arc<OutboundPolicy>,
    /// Whether errand's egress proxy serves runs' host names (egress denied by default and a
    /// proxy configured): without it, `egress.hosts` is refused rather than ignored.
    pub egress_proxy: bool,
    /// Whether errand's egress proxy carries runs' model calls (a proxy and the signing key
    /// its placeholder tokens are made with): without it, `modelCredentials: Proxied` is
    /// refused rather than ignored.
    pub model_proxy: bool,
}

impl RunLimits {
    /// The budget of the run `snapshot` describes.
    pub fn budget(&self, snapshot: &Snapshot) -> RunBudget {
        RunBudget::of(snapshot, self.allowance)
    }

    /// Checks that no egress range of `snapshot` lies inside a range the outbound policy
    /// denies and that its host names have a proxy (what a deployment is checked for).
    pub fn check_egress(&self, snapshot: &Snapshot) -> Result<(), InvalidSpec> {
        let problems = self.egress_problems(snapshot);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InvalidSpec { problems })
        }
    }

    /// The egress ranges of `snapshot` inside denied ones, and its host names and proxied
    /// models when this installation has no proxy for them.
    fn egress_problems(&self, snapshot: &Snapshot) -> Vec<Problem> {
        let mut problems = super::egress::against_policy(snapshot, &self.outbound);
        problems.extend(super::egress::hosts_without_proxy(
            snapshot,
            self.egress_proxy,
        ));
        problems.extend(super::model_credentials::models_without_proxy(
            snapshot,
            self.model_proxy,
        ));
        problems
    }

    /// Checks that the run `snapshot` describes fits these limits.
    pub fn check(&self, snapshot: &Snapshot) -> Result<(), InvalidSpec> {
        let mut problems: Vec<Problem> = self
            .budget(snapshot)
            .check_url_lifetime(self.max_url_lifetime_seconds)
            .err()
            .into_iter()
            .collect();
        if snapshot.auto_telemetry && !self.telemetry_configured {
            problems.push(Problem::new(
                "spec.autoTelemetry",
                "no OpenTelemetry collector is configured to send the telemetry to (the chart's \
                 telemetry.otlpEndpoint; locally --otlp-endpoint or ERRAND_OTLP_ENDPOINT)",
            ));
        }
        problems.extend(self.egress_problems(snapshot));
        if problems.is_empty() {
            Ok(())
        } else {
            Err(InvalidSpec { problems })
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn budget(start: i64, timeout: i64, staging: i64, grace: i64) -> RunBudget {
        RunBudget {
            start_timeout_seconds: start,
            timeout_seconds: timeout,
            extension_seconds: 0,
            allowance: RunAllowance {
                staging_seconds: staging,
                grace_seconds: grace,
            },
        }
    }

    #[test]
    fn the_job_deadline_leaves_out_the_grace_and_the_urls_include_it() {
        let budget = budget(600, 3600, 900, 120);
        assert_eq!(budget.job_deadline_seconds(), 5100);
        assert_eq!(budget.url_lifetime_seconds(), 5220);
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(
            budget.urls_expire_at(now),
            Timestamp::from_second(1_800_005_220).unwrap()
        );
    }

    #[test]
    fn a_run_longer_than_the_urls_last_is_a_problem_of_its_timeout() {
        let run = budget(600, 3600, 900, 120);
        assert_eq!(run.check_url_lifetime(None), Ok(()));
        assert_eq!(run.check_url_lifetime(Some(5220)), Ok(()));
        let problem = run.check_url_lifetime(Some(600)).unwrap_err();
        assert_eq!(problem.field, "spec.timeoutSeconds");
        assert_eq!(
            problem.to_string(),
            "spec.timeoutSeconds: 3600: with the start timeout and the staging and upload budget \
             the run needs signed store URLs valid for 5220s, and this store's last at most 600s"
        );
    }

    #[test]
    fn the_end_of_time_bounds_the_expiry() {
        let forever = budget(i64::MAX, i64::MAX, 900, 120);
        assert_eq!(forever.url_lifetime_seconds(), i64::MAX);
        assert_eq!(forever.urls_expire_at(Timestamp::now()), Timestamp::MAX);
        assert!(forever.check_url_lifetime(Some(600)).is_err());
    }

    proptest! {
        #[test]
        fn no_budget_overflows(
            start in any::<i64>(),
            timeout in any::<i64>(),
            staging in any::<i64>(),
            grace in any::<i64>(),
            max in any::<Option<i64>>(),
            now in Timestamp::MIN.as_second()..=Timestamp::MAX.as_second(),
        ) {
            let budget = budget(start, timeout, staging, grace);
            let deadline = budget.job_deadline_seconds();
            let lifetime = budget.url_lifetime_seconds();
            let now = Timestamp::from_second(now).unwrap();
            let expires = budget.urls_expire_at(now);
            let fits = budget.check_url_lifetime(max).is_ok();
            if grace >= 0 {
                prop_assert!(lifetime >= deadline);
            }
            prop_assert_eq!(expires >= now, lifetime >= 0);
            if let Some(max) = max {
                prop_assert_eq!(fits, (1..=max).contains(&lifetime));
            }
        }
    }

    #[test]
    fn an_extension_is_admitted_and_its_timeout_extends_the_job_deadline() {
        use crate::api::{AgentExecutionSpec, Extension};
        use crate::resolve::{InMemoryCatalog, resolve_execution};
        let mut spec = AgentExecutionSpec::test();
        let without =
            resolve_execution(crate::testing::NS, &spec, &InMemoryCatalog::test()).unwrap();
        spec.extension = Some(Extension {
            kind: "analysis".into(),
            config: None,
        });
        let with = resolve_execution(crate::testing::NS, &spec, &InMemoryCatalog::test()).unwrap();
        let limits = RunLimits::default();
        assert_eq!(limits.check(&with), Ok(()));
        let step = with.extension.as_ref().unwrap().timeout_seconds;
        assert!(step > 0);
        assert_eq!(limits.budget(&without).extension_seconds, 0);
        assert_eq!(
            limits.budget(&with).job_deadline_seconds(),
            limits.budget(&without).job_deadline_seconds() + step
        );
    }
}
