//! Every deadline and budget the controller computes, over the whole `i64` range of both
//! timeouts: a spec is refused, or it becomes a valid Job, and nothing overflows.

use proptest::prelude::*;

use super::*;
use crate::api::{AgentExecutionSpec, MAX_TIMEOUT_SECONDS};
use crate::controller::build::ExecutionOwner;
use crate::controller::execution::build;
use crate::resolve::{InMemoryCatalog, RunBudget, RunLimits, resolve_execution};

fn spec(timeout: i64, start: Option<i64>) -> AgentExecutionSpec {
    let agent = serde_json::from_value(json!({
        "runtime": {"image": "errand.local/calculator:dev", "command": ["sh"]},
        "config": {"config_format": "agents-spec-v1", "name": "calculator"},
    }))
    .unwrap();
    AgentExecutionSpec {
        agent: Some(agent),
        timeout_seconds: timeout,
        start_timeout_seconds: start,
        ..AgentExecutionSpec::default()
    }
}

fn timeout_seconds() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        Just(i64::MAX),
        Just(i64::MIN),
        Just(0),
        -2i64..=2,
        (MAX_TIMEOUT_SECONDS - 2)..=(MAX_TIMEOUT_SECONDS + 2),
        1..=MAX_TIMEOUT_SECONDS,
    ]
}

proptest! {
    #[test]
    fn any_timeouts_are_refused_or_make_a_valid_job(
        timeout in timeout_seconds(),
        start in prop::option::of(timeout_seconds()),
        url_limit in prop::option::of(Just(MAX_TIMEOUT_SECONDS)),
        now in 0i64..4_000_000_000,
    ) {
        let now = Timestamp::from_second(now).unwrap();
        let config = ControllerConfig::new("errand.local/errand:dev");
        let limits = RunLimits {
            allowance: config.allowance(),
            max_url_lifetime_seconds: url_limit,
            telemetry_configured: false,
            ..RunLimits::default()
        };
        let mut execution = execution(None);
        execution.spec = spec(timeout, start);
        let resolved = resolve_execution(NS, &execution.spec, &InMemoryCatalog::default())
            .and_then(|s| validate::validate(s, &config, &limits));
        let in_range = |s: i64| (1..=MAX_TIMEOUT_SECONDS).contains(&s);
        match resolved {
            Err(invalid) => {
                prop_assert!(
                    !in_range(timeout) || !start.is_none_or(in_range) || url_limit.is_some(),
                    "{invalid}"
                );
                prop_assert!(invalid.problems.iter().all(|p| p.field == "spec.timeoutSeconds"
                    || p.field == "spec.startTimeoutSeconds"), "{invalid}");
            }
            Ok(snapshot) => {
                prop_assert!(in_range(timeout) && start.is_none_or(in_range));
                let owner = ExecutionOwner::of(&execution).unwrap();
                let job = build::job(&owner, &snapshot, &config);
                let deadline = job.spec.unwrap().active_deadline_seconds.unwrap();
                prop_assert!(deadline > snapshot.timeout_seconds);
                prop_assert!(deadline <= 2 * MAX_TIMEOUT_SECONDS + config.staging_budget_seconds);
                let budget = RunBudget::of(&snapshot, config.allowance());
                prop_assert!(budget.urls_expire_at(now) > now);
                prop_assert!(start_recheck(snapshot.start_timeout_seconds) <= MAX_RECHECK);
            }
        }
        // What the shell computes without validation holds for anything.
        prop_assert!(start_recheck(start.unwrap_or(timeout)) <= MAX_RECHECK);
        let starting = status::starting(
            &execution,
            "calculator",
            SnapshotRef::default(),
            "errand-calc",
            None,
            now,
        );
        execution.status = Some(starting);
        let facts = status::facts(Some(&owned_job()), &[], None, now);
        let decision = status::decide(&execution, &facts);
        if let Some(after) = decision.recheck_after {
            prop_assert!(recheck_delay(after) <= MAX_RECHECK);
        }
    }
}
