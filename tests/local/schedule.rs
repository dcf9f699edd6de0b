//! AgentSchedules on the local backend: a detached supervisor per schedule creates its executions when they are due (twice in two minutes for `* * * * *`), `trigger` runs one now, `suspend`/`resume` stop and restart it, `list` shows whether the supervisor lives, `delete` stops it and removes its runs, and a schedule that could never run is refused naming its field.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::local::Home;

/// `errand ARGS -o json`, asserting it succeeded; its answer.
fn ok(home: &Home, args: &[&str]) -> Value {
    let (code, answer) = home.json(args);
    assert_eq!(code, 0, "errand {args:?}: {answer}");
    answer
}

/// The executions of schedule `name`, by name.
fn runs_of(home: &Home, name: &str) -> Vec<Value> {
    let tag = format!("schedule.{name}");
    let answer = ok(home, &["list", "--tag", &tag]);
    answer["executions"].as_array().unwrap().clone()
}

/// The pid of schedule `name`'s supervisor, as it recorded itself.
fn supervisor_pid(home: &Home, name: &str) -> i32 {
    let state = home
        .path()
        .join(format!("home/schedules/default/{name}/state.json"));
    let state: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    i32::try_from(state["supervisor"]["pid"].as_u64().unwrap()).unwrap()
}

fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Waits until `holds` or `within` passes; the last value either way.
fn until<T>(within: Duration, mut look: impl FnMut() -> T, holds: impl Fn(&T) -> bool) -> T {
    let deadline = Instant::now() + within;
    loop {
        let value = look();
        if holds(&value) || Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_one_minute_schedule_runs_twice_in_two_minutes_and_delete_stops_it() {
    let home = Home::new();
    let agent = home.agent("tick", "echo ran");
    ok(&home, &["apply", "-f", &agent]);
    let created = ok(
        &home,
        &[
            "schedule",
            "create",
            "every",
            "--cron",
            "* * * * *",
            "--agent",
            "tick",
        ],
    );
    let schedule = &created["schedule"];
    assert_eq!(schedule["supervisor"], "running", "{created}");
    assert!(schedule["next_schedule_time"].is_string(), "{created}");
    let listed = ok(&home, &["schedule", "list"]);
    assert_eq!(listed["schedules"][0]["name"], "every", "{listed}");
    assert_eq!(listed["schedules"][0]["supervisor"], "running", "{listed}");

    let started = Instant::now();
    let runs = until(
        Duration::from_secs(135),
        || runs_of(&home, "every"),
        |runs| runs.len() >= 2,
    );
    assert!(
        runs.len() >= 2,
        "two runs within two minutes of creating the schedule; after {:?}: {runs:?}",
        started.elapsed()
    );
    for run in &runs {
        let name = run["name"].as_str().unwrap();
        let minutes = name.strip_prefix("every-").unwrap();
        assert_eq!(minutes.len(), 8, "named for its minute: {name}");
        let ended = until(
            Duration::from_secs(60),
            || ok(&home, &["status", name]),
            |a| a["execution"]["phase"] == "Succeeded",
        );
        assert_eq!(ended["execution"]["phase"], "Succeeded", "{ended}");
    }
    let shown = ok(&home, &["schedule", "get", "every"]);
    assert!(
        shown["schedule"]["last_schedule_time"].is_string(),
        "{shown}"
    );

    let pid = supervisor_pid(&home, "every");
    assert!(alive(pid));
    let deleted = ok(&home, &["schedule", "delete", "every"]);
    assert_eq!(deleted["deleted"]["kind"], "AgentSchedule", "{deleted}");
    assert!(!alive(pid), "the supervisor {pid} stopped with the delete");
    assert_eq!(
        runs_of(&home, "every"),
        Vec::<Value>::new(),
        "its runs went with it"
    );
    let (code, gone) = home.json(&["schedule", "get", "every"]);
    assert_eq!(
        (code, gone["error"]["code"].as_str()),
        (3, Some("not_found")),
        "{gone}"
    );
}

#[test]
fn trigger_suspend_resume_and_a_dead_supervisor_show_and_a_bad_schedule_is_refused() {
    let home = Home::new();
    let agent = home.agent("once", "echo triggered");
    ok(&home, &["apply", "-f", &agent]);
    let args = [
        "schedule",
        "create",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--agent",
        "once",
    ];
    let created = ok(
        &home,
        &[&args[..], &["--time-zone", "Europe/Berlin", "--suspend"]].concat(),
    );
    assert_eq!(created["schedule"]["suspend"], true, "{created}");
    assert!(
        created["schedule"]["next_schedule_time"].is_null(),
        "{created}"
    );

    let triggered = ok(&home, &["schedule", "trigger", "nightly"]);
    let name = triggered["execution"]["name"].as_str().unwrap().to_owned();
    assert_eq!(
        name.strip_prefix("nightly-").map(str::len),
        Some(10),
        "{name}"
    );
    let ended = until(
        Duration::from_secs(60),
        || ok(&home, &["status", &name]),
        |a| a["execution"]["phase"] == "Succeeded",
    );
    assert_eq!(ended["execution"]["phase"], "Succeeded", "{ended}");
    assert_eq!(runs_of(&home, "nightly").len(), 1);

    let resumed = ok(&home, &["schedule", "resume", "nightly"]);
    let next = until(
        Duration::from_secs(10),
        || ok(&home, &["schedule", "get", "nightly"]),
        |a| a["schedule"]["next_schedule_time"].is_string(),
    );
    assert_eq!(resumed["schedule"]["suspend"], false, "{resumed}");
    let at: jiff::Timestamp = next["schedule"]["next_schedule_time"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let berlin = at.to_zoned(jiff::tz::TimeZone::get("Europe/Berlin").unwrap());
    assert_eq!(
        (berlin.hour(), berlin.minute()),
        (3, 0),
        "03:00 in Berlin: {next}"
    );

    // A supervisor killed (a reboot) shows as stopped; resume starts a new one.
    let pid = supervisor_pid(&home, "nightly");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let stopped = until(
        Duration::from_secs(10),
        || ok(&home, &["schedule", "list"]),
        |a| a["schedules"][0]["supervisor"] == "stopped",
    );
    assert_eq!(
        stopped["schedules"][0]["supervisor"], "stopped",
        "{stopped}"
    );
    let again = ok(&home, &["schedule", "resume", "nightly"]);
    assert_eq!(again["schedule"]["supervisor"], "running", "{again}");
    assert_ne!(supervisor_pid(&home, "nightly"), pid);
    let suspended = ok(&home, &["schedule", "suspend", "nightly"]);
    assert_eq!(suspended["schedule"]["suspend"], true, "{suspended}");

    for (extra, field) in [
        (
            &["--cron", "61 * * * *", "--agent", "once"][..],
            "spec.schedule",
        ),
        (
            &["--cron", "* * * * *", "--agent", "no-such-agent"][..],
            "--agent no-such-agent: no file no-such-agent exists",
        ),
        (
            &[
                "--cron",
                "* * * * *",
                "--spec",
                r#"{"agentRef": {"name": "no-such-agent"}}"#,
            ][..],
            "spec.executionTemplate.spec.agentRef.name",
        ),
        (
            &[
                "--cron",
                "* * * * *",
                "--agent",
                "once",
                "--time-zone",
                "Mars/Olympus",
            ][..],
            "spec.timeZone",
        ),
    ] {
        let (code, refused) = home.json(&[&["schedule", "create", "bad"][..], extra].concat());
        assert_ne!(code, 0, "{extra:?}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(field),
            "{extra:?} names {field}: {refused}"
        );
    }
    let (code, duplicate) = home.json(&args);
    assert_eq!(
        duplicate["error"]["code"], "already_exists",
        "{code} {duplicate}"
    );
    let listed = ok(&home, &["schedule", "list"]);
    assert_eq!(
        listed["schedules"].as_array().unwrap().len(),
        1,
        "nothing refused was kept: {listed}"
    );
    ok(&home, &["schedule", "delete", "nightly"]);
}
