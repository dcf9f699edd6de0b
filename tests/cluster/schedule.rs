//! AgentSchedules on the real test cluster, on the wall clock: an every-minute schedule creates one execution a minute, each run in a pod, and keeps only its history limit; `Forbid` holds a due run while one is active, `Replace` cancels it; after a controller outage spanning three scheduled times exactly one catch-up run starts, and none past `startingDeadlineSeconds`; no scheduled time ever gets two executions.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;

use crate::support::cluster;
use crate::support::errand::wait_for;
use crate::support::harness::{Harness, Mode};
use errand::api::contract::{SCHEDULE_LABEL, SCHEDULED_TIME_ANNOTATION};
use errand::api::{AgentExecution, AgentSchedule, Phase};

/// A schedule of Agent `agent` every minute, with `extra` added to its spec.
fn every_minute(name: &str, agent: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "schedule": "* * * * *",
        "executionTemplate": {"spec": {
            "agentRef": {"name": agent},
            "input": "tick",
            "startTimeoutSeconds": 3600,
        }},
    });
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentSchedule",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// The executions of schedule `name`, oldest scheduled time first.
async fn runs_of(harness: &Harness, name: &str) -> Vec<AgentExecution> {
    let mut runs = harness
        .api::<AgentExecution>()
        .list(&ListParams::default().labels(&format!("{SCHEDULE_LABEL}={name}")))
        .await
        .unwrap()
        .items;
    runs.sort_by_key(ResourceExt::name_any);
    runs
}

/// Each run is named for the minute its annotation says it was scheduled for, so no
/// scheduled time can have two.
fn assert_named_for_their_minutes(schedule: &str, runs: &[AgentExecution]) {
    for run in runs {
        let scheduled: jiff::Timestamp = run.annotations()[SCHEDULED_TIME_ANNOTATION]
            .parse()
            .unwrap();
        assert_eq!(
            scheduled.as_second() % 60,
            0,
            "{scheduled} is not on a minute"
        );
        assert_eq!(
            run.name_any(),
            format!("{schedule}-{}", scheduled.as_second() / 60)
        );
    }
}

/// Each run's name, phase and message, for a failure message.
fn phases(runs: &[AgentExecution]) -> Vec<String> {
    runs.iter()
        .map(|r| {
            let status = r.status.clone().unwrap_or_default();
            format!(
                "{}: {:?} {}",
                r.name_any(),
                status.phase,
                status.message.unwrap_or_default()
            )
        })
        .collect()
}

/// The minutes since the epoch `runs` were scheduled for.
fn minutes(runs: &[AgentExecution]) -> Vec<i64> {
    runs.iter()
        .map(|r| {
            let name = r.name_any();
            name.rsplit('-').next().unwrap().parse().unwrap()
        })
        .collect()
}

/// Sleeps until `second` seconds into minute `minute` (since the epoch).
async fn until(minute: i64, second: i64) {
    let target = jiff::Timestamp::from_second(minute * 60 + second).unwrap();
    let wait = target.duration_since(jiff::Timestamp::now());
    if let Ok(wait) = Duration::try_from(wait) {
        tokio::time::sleep(wait).await;
    }
}

fn now_minute() -> i64 {
    jiff::Timestamp::now().as_second() / 60
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_every_minute_schedule_runs_once_a_minute_in_pods_and_keeps_its_history_limit() {
    let Some(harness) = Harness::start("schedule-runs", Mode::WithPods).await else {
        return;
    };
    harness
        .create_agent("tick", cluster::BUSYBOX_IMAGE, "echo tick")
        .await;
    harness
        .create(every_minute(
            "ticker",
            "tick",
            json!({"successfulExecutionsHistoryLimit": 2}),
        ))
        .await;
    let created = now_minute();
    // Three scheduled times pass, each run to its end; every execution ever seen is kept.
    let mut seen = BTreeSet::new();
    let mut succeeded = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while succeeded.len() < 3 {
        let runs = runs_of(&harness, "ticker").await;
        assert!(
            Instant::now() < deadline,
            "three runs of the every-minute schedule did not succeed in 300 s: seen {seen:?}, succeeded {succeeded:?}, now {:?}\ncontroller log:\n{}",
            phases(&runs),
            harness.controller_log()
        );
        assert_named_for_their_minutes("ticker", &runs);
        for run in &runs {
            seen.insert(run.name_any());
            if run.status.as_ref().and_then(|s| s.phase) == Some(Phase::Succeeded) {
                succeeded.insert(run.name_any());
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let seen_minutes: Vec<i64> = seen
        .iter()
        .map(|n| n.rsplit('-').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        seen_minutes.windows(2).all(|w| w[1] == w[0] + 1),
        "one run a minute, none skipped or doubled: {seen:?}"
    );
    assert!(
        seen_minutes[0] > created,
        "no run before the first due time: {seen:?}"
    );
    // The history limit keeps the two latest succeeded runs; older ones are deleted.
    let kept = wait_for(
        "the oldest succeeded run to be deleted",
        Duration::from_secs(60),
        || async {
            let runs = runs_of(&harness, "ticker").await;
            let ended: Vec<String> = runs
                .iter()
                .filter(|r| r.status.as_ref().and_then(|s| s.phase) == Some(Phase::Succeeded))
                .map(ResourceExt::name_any)
                .collect();
            (ended.len() == 2).then_some(ended)
        },
    )
    .await;
    assert!(
        !kept.contains(seen.first().unwrap()),
        "the oldest run is the one deleted: kept {kept:?} of {seen:?}"
    );
    let schedule = harness.api::<AgentSchedule>().get("ticker").await.unwrap();
    let status = schedule.status.unwrap();
    assert!(status.last_successful_time.is_some(), "{status:?}");
    assert!(status.next_schedule_time.unwrap().0 > jiff::Timestamp::now());
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Scheduling")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbid_holds_replace_cancels_and_an_outage_gives_one_catch_up_run_within_the_deadline() {
    let Some(mut harness) = Harness::start("schedule-policy", Mode::WithoutPods).await else {
        return;
    };
    // Without pods, every run stays Starting: active until it is cancelled.
    harness
        .create_agent("stays", cluster::BUSYBOX_IMAGE, "sleep 600")
        .await;
    harness
        .create(every_minute(
            "forbid",
            "stays",
            json!({"concurrencyPolicy": "Forbid"}),
        ))
        .await;
    harness
        .create(every_minute(
            "replace",
            "stays",
            json!({"concurrencyPolicy": "Replace"}),
        ))
        .await;
    harness
        .create(every_minute("catchup", "stays", json!({})))
        .await;
    harness
        .create(every_minute(
            "late",
            "stays",
            json!({"startingDeadlineSeconds": 10}),
        ))
        .await;
    // Two scheduled times pass.
    let created = now_minute();
    until(created + 2, 5).await;
    let forbid = runs_of(&harness, "forbid").await;
    assert_eq!(
        forbid.len(),
        1,
        "Forbid holds the second run: {:?}",
        minutes(&forbid)
    );
    let held = harness.api::<AgentSchedule>().get("forbid").await.unwrap();
    let message = held.status.unwrap().message.unwrap_or_default();
    assert!(
        message.contains("waits: concurrencyPolicy Forbid"),
        "{message}"
    );
    let replace = runs_of(&harness, "replace").await;
    assert_eq!(replace.len(), 2, "{:?}", minutes(&replace));
    assert!(replace[0].spec.cancel, "Replace cancels the running one");
    assert!(!replace[1].spec.cancel);
    let catchup_before = runs_of(&harness, "catchup").await;
    let late_before = runs_of(&harness, "late").await;
    assert_eq!((catchup_before.len(), late_before.len()), (2, 2));

    // The controller is down across three scheduled times.
    harness.kill_controller().await;
    let down = now_minute();
    until(down + 3, 20).await;
    harness.start_controller().await;
    let catchup = wait_for("the one catch-up run", Duration::from_secs(30), || async {
        let runs = runs_of(&harness, "catchup").await;
        (runs.len() > catchup_before.len()).then_some(runs)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let catchup_after = runs_of(&harness, "catchup").await;
    assert_eq!(
        catchup_after.len(),
        3,
        "exactly one catch-up: {:?}",
        minutes(&catchup_after)
    );
    assert_eq!(
        minutes(&catchup).last(),
        Some(&(down + 3)),
        "for the latest missed time"
    );
    // 20 s late is past a 10 s starting deadline: missed, not run.
    let late = runs_of(&harness, "late").await;
    assert_eq!(
        late.len(),
        2,
        "no run past the deadline: {:?}",
        minutes(&late)
    );
    let missed = harness.api::<AgentSchedule>().get("late").await.unwrap();
    let message = missed.status.unwrap().message.unwrap_or_default();
    assert!(message.contains("startingDeadlineSeconds"), "{message}");
    for schedule in ["forbid", "replace", "catchup", "late"] {
        assert_named_for_their_minutes(schedule, &runs_of(&harness, schedule).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_creates_triggers_suspends_and_deletes_a_schedule_the_controller_runs() {
    let Some(harness) = Harness::start("schedule-cli", Mode::WithoutPods).await else {
        return;
    };
    harness
        .create_agent("tock", cluster::BUSYBOX_IMAGE, "echo tock")
        .await;
    let create = [
        "schedule",
        "create",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--time-zone",
        "Asia/Tokyo",
        "--agent",
        "tock",
        "--input",
        "tock",
        "--suspend",
    ];
    let (code, created) = harness.cli(&create);
    assert_eq!(code, 0, "{created}");
    assert_eq!(created["schedule"]["suspend"], true, "{created}");
    assert!(
        created["schedule"]["supervisor"].is_null(),
        "the controller runs it: {created}"
    );
    // The API server's own rules hold without the webhook (the chart test shows the
    // webhook's refusals): a name too long for its runs' names.
    let long = "n".repeat(53);
    let (code, refused) = harness.cli(&[
        "schedule",
        "create",
        &long,
        "--cron",
        "* * * * *",
        "--agent",
        "tock",
    ]);
    assert_ne!(code, 0, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("52 characters"),
        "{refused}"
    );

    let (code, triggered) = harness.cli(&["schedule", "trigger", "nightly"]);
    assert_eq!(code, 0, "{triggered}");
    let run = triggered["execution"]["name"].as_str().unwrap().to_owned();
    let execution = harness.api::<AgentExecution>().get(&run).await.unwrap();
    assert_eq!(execution.labels()[SCHEDULE_LABEL], "nightly");
    assert_eq!(execution.owner_references()[0].name, "nightly");
    assert!(
        execution
            .annotations()
            .contains_key(SCHEDULED_TIME_ANNOTATION)
    );
    // The controller counts the triggered run as the schedule's own.
    wait_for(
        "the triggered run in status.active",
        Duration::from_secs(60),
        || async {
            let (_, shown) = harness.cli(&["schedule", "get", "nightly"]);
            (shown["schedule"]["active"][0] == run.as_str()).then_some(())
        },
    )
    .await;

    let (code, resumed) = harness.cli(&["schedule", "resume", "nightly"]);
    assert_eq!(
        (code, &resumed["schedule"]["suspend"]),
        (0, &json!(false)),
        "{resumed}"
    );
    let next = wait_for("the next run time", Duration::from_secs(60), || async {
        let (_, listed) = harness.cli(&["schedule", "list"]);
        let next = listed["schedules"][0]["next_schedule_time"]
            .as_str()?
            .to_owned();
        Some(next.parse::<jiff::Timestamp>().unwrap())
    })
    .await;
    let tokyo = next.to_zoned(jiff::tz::TimeZone::get("Asia/Tokyo").unwrap());
    assert_eq!(
        (tokyo.hour(), tokyo.minute()),
        (3, 0),
        "03:00 in Tokyo: {next}"
    );

    let (code, deleted) = harness.cli(&["schedule", "delete", "nightly"]);
    assert_eq!(code, 0, "{deleted}");
    wait_for(
        "the schedule and its run gone",
        Duration::from_secs(120),
        || async {
            let schedule = harness
                .api::<AgentSchedule>()
                .get_opt("nightly")
                .await
                .unwrap();
            let run = harness.api::<AgentExecution>().get_opt(&run).await.unwrap();
            (schedule.is_none() && run.is_none()).then_some(())
        },
    )
    .await;
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_at_the_scheduled_second_makes_no_second_run() {
    let Some(mut harness) = Harness::start("schedule-kill", Mode::WithoutPods).await else {
        return;
    };
    harness
        .create_agent("stays", cluster::BUSYBOX_IMAGE, "sleep 600")
        .await;
    // Created well inside a minute, so the next minute is its first due time.
    if jiff::Timestamp::now().as_second() % 60 > 45 {
        until(now_minute() + 1, 1).await;
    }
    harness
        .create(every_minute("due", "stays", json!({})))
        .await;
    // Killed as the minute turns, while it creates the run or writes its status, and back at
    // once: the run it created (or the one it creates now) is the only one for that minute.
    let minute = now_minute() + 1;
    until(minute, 0).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    harness.kill_controller().await;
    harness.start_controller().await;
    let runs = wait_for("the run of the minute", Duration::from_secs(30), || async {
        let runs = runs_of(&harness, "due").await;
        (!runs.is_empty()).then_some(runs)
    })
    .await;
    wait_for(
        "lastScheduleTime at that minute",
        Duration::from_secs(30),
        || async {
            let schedule = harness.api::<AgentSchedule>().get("due").await.unwrap();
            let last = schedule.status?.last_schedule_time?.0;
            (last.as_second() == minute * 60).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let runs_after = runs_of(&harness, "due").await;
    let seen = minutes(&runs_after);
    assert_eq!(
        seen.iter().filter(|m| **m == minute).count(),
        1,
        "one run for the minute the controller was killed in: {seen:?} (first seen {:?})",
        minutes(&runs)
    );
    assert!(
        seen.iter().all(|m| (minute..=now_minute()).contains(m)),
        "no run for another time: {seen:?}"
    );
    assert_named_for_their_minutes("due", &runs_after);
    harness.finish().await;
}
