//! The schedule plan on a fake clock: due, missed, held, replaced and catch-up runs, history limits and the checks at create.

use jiff::Timestamp;

use super::*;
use crate::api::{AgentScheduleSpec, ConcurrencyPolicy, ExecutionTemplate, Reference};

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn spec(schedule: &str) -> AgentScheduleSpec {
    let template = serde_json::json!({"agentRef": {"name": "calculator"}, "input": "1+1"});
    AgentScheduleSpec {
        schedule: schedule.to_owned(),
        time_zone: None,
        execution_template: ExecutionTemplate {
            metadata: Default::default(),
            spec: serde_json::from_value(template).unwrap(),
        },
        concurrency_policy: ConcurrencyPolicy::Allow,
        starting_deadline_seconds: None,
        suspend: false,
        successful_executions_history_limit: 3,
        failed_executions_history_limit: 1,
    }
}

fn run(minute: &str, state: RunState) -> Run {
    let scheduled = at(&format!("2026-01-01T00:{minute}:00Z"));
    Run {
        name: execution_name("nightly", scheduled),
        scheduled,
        state,
    }
}

fn plan_at(spec: &AgentScheduleSpec, last: Option<&str>, runs: &[Run], now: &str) -> Plan {
    let timing = check(spec, at(now)).unwrap();
    plan(
        &Observed {
            name: "nightly",
            spec,
            created: at("2026-01-01T00:00:00Z"),
            last_schedule: last.map(at),
            runs,
            now: at(now),
        },
        &timing,
    )
}

#[test]
fn a_due_time_starts_one_run_named_for_its_minute_and_the_next_time_is_woken_for() {
    let every_minute = spec("* * * * *");
    let plan = plan_at(
        &every_minute,
        Some("2026-01-01T00:04:00Z"),
        &[],
        "2026-01-01T00:05:02Z",
    );
    assert_eq!(plan.due, Due::Start(at("2026-01-01T00:05:00Z")));
    assert_eq!(plan.missed, 0);
    assert_eq!(plan.last_schedule, Some(at("2026-01-01T00:05:00Z")));
    assert_eq!(plan.next, Some(at("2026-01-01T00:06:00Z")));
    assert_eq!(plan.wake_at, plan.next);
    assert_eq!(
        execution_name("nightly", at("2026-01-01T00:05:00Z")),
        "nightly-29453765"
    );
    // Nothing due yet at 00:05:30 once 00:05 ran.
    let quiet = plan_at(
        &every_minute,
        Some("2026-01-01T00:05:00Z"),
        &[],
        "2026-01-01T00:05:30Z",
    );
    assert_eq!(quiet.due, Due::Nothing);
    // A restart at the scheduled second finds the execution made before the status write.
    let made = [run("05", RunState::Active)];
    let again = plan_at(
        &every_minute,
        Some("2026-01-01T00:04:00Z"),
        &made,
        "2026-01-01T00:05:01Z",
    );
    assert_eq!(again.due, Due::Started(at("2026-01-01T00:05:00Z")));
    assert_eq!(again.last_schedule, Some(at("2026-01-01T00:05:00Z")));
}

#[test]
fn after_an_outage_one_catch_up_run_starts_for_the_latest_time_or_none_past_the_deadline() {
    let mut every_minute = spec("* * * * *");
    // Down from 00:01:30 to 00:04:40: 00:02, 00:03 and 00:04 passed.
    let plan = plan_at(
        &every_minute,
        Some("2026-01-01T00:01:00Z"),
        &[],
        "2026-01-01T00:04:40Z",
    );
    assert_eq!(plan.due, Due::Start(at("2026-01-01T00:04:00Z")));
    assert_eq!(plan.missed, 2);
    every_minute.starting_deadline_seconds = Some(30);
    let late = plan_at(
        &every_minute,
        Some("2026-01-01T00:01:00Z"),
        &[],
        "2026-01-01T00:04:40Z",
    );
    assert_eq!(
        late.due,
        Due::Missed(at("2026-01-01T00:04:00Z")),
        "no run past the deadline"
    );
    assert_eq!(
        late.last_schedule,
        Some(at("2026-01-01T00:04:00Z")),
        "counted once"
    );
    every_minute.starting_deadline_seconds = Some(50);
    let late = plan_at(
        &every_minute,
        Some("2026-01-01T00:01:00Z"),
        &[],
        "2026-01-01T00:04:40Z",
    );
    assert_eq!(late.due, Due::Start(at("2026-01-01T00:04:00Z")));
    // A year of every-minute times: still one run, for the latest.
    let long = plan_at(
        &spec("* * * * *"),
        Some("2025-01-01T00:00:00Z"),
        &[],
        "2026-01-01T00:04:40Z",
    );
    assert_eq!(long.due, Due::Start(at("2026-01-01T00:04:00Z")));
    assert!(long.missed >= TOO_MANY_MISSED);
}

#[test]
fn forbid_holds_a_due_run_while_one_is_active_and_replace_cancels_the_active_ones() {
    let active = [run("04", RunState::Active)];
    let mut forbid = spec("* * * * *");
    forbid.concurrency_policy = ConcurrencyPolicy::Forbid;
    let held = plan_at(
        &forbid,
        Some("2026-01-01T00:04:00Z"),
        &active,
        "2026-01-01T00:05:10Z",
    );
    assert_eq!(held.due, Due::Held(at("2026-01-01T00:05:00Z")));
    assert_eq!(
        held.last_schedule,
        Some(at("2026-01-01T00:04:00Z")),
        "a held time stays due"
    );
    forbid.starting_deadline_seconds = Some(20);
    let held = plan_at(
        &forbid,
        Some("2026-01-01T00:04:00Z"),
        &active,
        "2026-01-01T00:05:10Z",
    );
    assert_eq!(
        held.wake_at,
        Some(at("2026-01-01T00:05:20Z")),
        "woken when it would be missed"
    );
    let missed = plan_at(
        &forbid,
        Some("2026-01-01T00:04:00Z"),
        &active,
        "2026-01-01T00:05:30Z",
    );
    assert_eq!(missed.due, Due::Missed(at("2026-01-01T00:05:00Z")));
    assert_eq!(missed.last_schedule, Some(at("2026-01-01T00:05:00Z")));

    let mut replace = spec("* * * * *");
    replace.concurrency_policy = ConcurrencyPolicy::Replace;
    let replaced = plan_at(
        &replace,
        Some("2026-01-01T00:04:00Z"),
        &active,
        "2026-01-01T00:05:10Z",
    );
    assert_eq!(replaced.due, Due::Start(at("2026-01-01T00:05:00Z")));
    assert_eq!(replaced.cancel, [active[0].name.clone()]);
    let allowed = plan_at(
        &spec("* * * * *"),
        Some("2026-01-01T00:04:00Z"),
        &active,
        "2026-01-01T00:05:10Z",
    );
    assert_eq!(allowed.due, Due::Start(at("2026-01-01T00:05:00Z")));
    assert!(allowed.cancel.is_empty());
}

#[test]
fn a_suspended_schedule_starts_nothing_and_history_beyond_the_limits_is_deleted_oldest_first() {
    let runs = [
        run("01", RunState::Succeeded),
        run("02", RunState::Failed),
        run("03", RunState::Succeeded),
        run("04", RunState::Succeeded),
        run("05", RunState::Failed),
        run("06", RunState::Succeeded),
        run("07", RunState::Active),
    ];
    let mut suspended = spec("* * * * *");
    suspended.suspend = true;
    let plan = plan_at(
        &suspended,
        Some("2026-01-01T00:07:00Z"),
        &runs,
        "2026-01-01T00:09:10Z",
    );
    assert_eq!(plan.due, Due::Nothing);
    assert_eq!((plan.next, plan.wake_at), (None, None));
    assert_eq!(plan.delete, [runs[0].name.clone(), runs[1].name.clone()]);
    // Resumed: times missed while suspended give one run.
    suspended.suspend = false;
    let resumed = plan_at(
        &suspended,
        Some("2026-01-01T00:07:00Z"),
        &runs,
        "2026-01-01T00:09:10Z",
    );
    assert_eq!(resumed.due, Due::Start(at("2026-01-01T00:09:00Z")));
    assert_eq!(resumed.missed, 1);
}

#[test]
fn a_time_zone_schedule_is_due_at_the_zone_wall_time() {
    let mut berlin = spec("0 6 * * *");
    berlin.time_zone = Some("Europe/Berlin".to_owned());
    // 06:00 in Berlin is 05:00 UTC in winter, 04:00 UTC in summer.
    let winter = plan_at(
        &berlin,
        Some("2026-01-01T05:00:00Z"),
        &[],
        "2026-01-02T05:00:05Z",
    );
    assert_eq!(winter.due, Due::Start(at("2026-01-02T05:00:00Z")));
    let summer = plan_at(
        &berlin,
        Some("2026-07-01T04:00:00Z"),
        &[],
        "2026-07-01T23:00:00Z",
    );
    assert_eq!(summer.due, Due::Nothing);
    assert_eq!(summer.next, Some(at("2026-07-02T04:00:00Z")));
}

#[test]
fn a_schedule_that_could_never_run_is_refused_naming_each_field() {
    let now = at("2026-01-01T00:00:00Z");
    let mut bad = spec("61 * * * *");
    bad.time_zone = Some("Mars/Olympus".to_owned());
    bad.execution_template.spec.rerun_of = Some(Reference::named("old"));
    bad.execution_template.spec.cancel = true;
    let problems = check(&bad, now).unwrap_err().problems;
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.schedule",
            "spec.timeZone",
            "spec.executionTemplate.spec.rerunOf",
            "spec.executionTemplate.spec.cancel"
        ]
    );
    assert_eq!(
        problems[0].message,
        "\"61\" is not a valid minute (expected 0-59)"
    );
    let never = check(&spec("0 0 31 4 *"), now).unwrap_err().problems;
    assert_eq!(
        never[0].message,
        "\"0 0 31 4 *\" never fires (no such date in the next five years)"
    );
    assert!(check(&spec("@daily"), now).is_ok());
}

#[test]
fn a_runs_scheduled_time_is_read_back_from_its_name_scheduled_or_manual() {
    let minute = at("2026-01-01T00:05:00Z");
    assert_eq!(
        scheduled_time_of("nightly", &execution_name("nightly", minute)),
        Some(minute)
    );
    let second = at("2026-01-01T00:05:07Z");
    let manual = manual_execution_name("nightly", second);
    assert_ne!(manual, execution_name("nightly", second));
    assert_eq!(scheduled_time_of("nightly", &manual), Some(second));
    for other in [
        "nightly",
        "nightly-",
        "nightly-x1",
        "other-29000000",
        "nightly-a-29000000",
    ] {
        assert_eq!(scheduled_time_of("nightly", other), None, "{other}");
    }
}
