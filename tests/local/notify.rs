//! Completion notifications on the local backend: `--notify-command` (the event on stdin, `ERRAND_EVENT_*` variables), `--notify-file` (one NDJSON `execution.finished` line per run), `notify set` on a running execution with an output watch, and a failing sink that leaves the run's outcome alone.

use std::time::{Duration, Instant};

use crate::support::local::Home;
use serde_json::{Value, json};

fn lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The message of `execute --local --agent AGENT FLAGS`, refused as an argument error.
fn refused(home: &Home, agent: &str, flags: &[&str]) -> Value {
    let (code, answer) =
        home.json(&[&["execute", "--local", "--agent", agent][..], flags].concat());
    assert_eq!(code, 2, "{answer}");
    answer["error"]["message"].clone()
}

#[test]
fn a_finished_run_notifies_its_command_and_file_and_keeps_the_delivery_results() {
    let home = Home::new();
    let agent = home.agent("quick", "echo done");
    let events = home.path().join("events.ndjson");
    let seen = home.path().join("seen.txt");
    let command = format!(
        "cat > {0}.json; echo \"$ERRAND_EVENT_TYPE $ERRAND_EVENT_EXECUTION $ERRAND_EVENT_PHASE $ERRAND_EVENT_EXIT_CODE\" > {0}",
        seen.display()
    );
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--name",
        "told",
        "--notify-command",
        &command,
        "--notify-file",
        events.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(execution["notify"]["command"], command.as_str());
    let notifications = execution["notifications"].as_array().unwrap();
    assert_eq!(notifications.len(), 1, "{answer}");
    assert_eq!(notifications[0]["type"], "execution.finished");
    assert_eq!(
        notifications[0]["deliveries"],
        json!([{"sink": "command", "ok": true}, {"sink": "file", "ok": true}])
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "execution.finished told Succeeded 0\n"
    );
    let on_stdin: Value =
        serde_json::from_str(&std::fs::read_to_string(seen.with_extension("txt.json")).unwrap())
            .unwrap();
    let file = lines(&events);
    assert_eq!(file.len(), 1, "one line per run");
    for event in [&on_stdin, &file[0]] {
        assert_eq!(event["type"], "execution.finished");
        assert_eq!(event["execution"], "told");
        assert_eq!(event["phase"], "Succeeded");
        assert_eq!(event["exit_code"], 0);
        assert_eq!(event["schema_version"], 1);
        assert!(event.get("deliveries").is_none(), "{event}");
    }

    // A second run appends its own line.
    let (code, _) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--notify-file",
        events.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert_eq!(lines(&events).len(), 2);
}

#[test]
fn a_failing_sink_never_changes_the_outcome() {
    let home = Home::new();
    let agent = home.agent("quick", "true");
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--notify-command",
        "exit 3",
        "--notify-file",
        "/nonexistent-dir/events.ndjson",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["phase"], "Succeeded");
    let deliveries = &answer["execution"]["notifications"][0]["deliveries"];
    assert_eq!(deliveries[0]["ok"], false);
    assert_eq!(deliveries[0]["error"], "the command failed: exit status: 3");
    assert_eq!(deliveries[1]["ok"], false);
    assert!(
        deliveries[1]["error"]
            .as_str()
            .unwrap()
            .starts_with("/nonexistent-dir/events.ndjson: "),
        "{deliveries}"
    );

    for (flags, message) in [
        (
            &["--notify-on-output", "x"][..],
            "--notify-on-output needs a sink: --notify-command or --notify-file",
        ),
        (
            &[
                "--notify-on-output",
                "(",
                "--notify-regex",
                "--notify-file",
                "f",
            ],
            "--notify-on-output \"(\": not a regular expression: regex parse error:\n    (\n    ^\nerror: unclosed group",
        ),
    ] {
        assert_eq!(refused(&home, &agent, flags), message);
    }
}

#[test]
fn notify_set_on_a_running_execution_watches_lines_that_appear_afterwards() {
    let home = Home::new();
    // "ready" before the watch is set, then "ready" and an error line after it.
    let agent = home.agent(
        "stepper",
        "echo 'ready early'; sleep 2; echo 'ready late'; echo 'boom 42' >&2; sleep 1",
    );
    let events = home.path().join("events.ndjson");
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--name",
        "stepping",
        "--no-wait",
    ]);
    assert_eq!(code, 0, "{answer}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !home
        .run(&["tail", "stepping"])
        .stdout
        .starts_with(b"ready early")
    {
        assert!(Instant::now() < deadline, "the agent never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, answer) = home.json(&[
        "notify",
        "set",
        "stepping",
        "--notify-file",
        events.to_str().unwrap(),
        "--notify-on-output",
        "ready",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        answer["execution"]["notify"]["output_matches"][0]["pattern"],
        "ready"
    );
    let (code, answer) = home.json(&[
        "notify",
        "set",
        "stepping",
        "--notify-on-output",
        "^boom [0-9]+$",
        "--notify-regex",
        "--notify-stream",
        "stderr",
    ]);
    assert_eq!(code, 0, "{answer}");
    let (code, done) = home.json(&["wait", "stepping", "--until", "20"]);
    assert_eq!(code, 0, "{done}");
    assert_eq!(done["execution"]["phase"], "Succeeded");
    let file = lines(&events);
    let summary: Vec<(String, String)> = file
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["matched"]["line"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "execution.output_matched".to_owned(),
                "ready late".to_owned()
            ),
            ("execution.output_matched".to_owned(), "boom 42".to_owned()),
            ("execution.finished".to_owned(), String::new()),
        ],
        "only lines after the watch was set: {file:?}"
    );
    assert_eq!(file[1]["matched"]["stream"], "stderr");
    assert_eq!(
        done["execution"]["notifications"].as_array().unwrap().len(),
        3
    );

    let (code, answer) = home.json(&["notify", "set", "stepping", "--notify-file", "x"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &json!("invalid_state")),
        "{answer}"
    );
}

#[test]
fn a_webhook_is_refused_locally_and_bad_webhook_flags_name_themselves() {
    let home = Home::new();
    let agent = home.agent("quick", "true");
    for (flags, message) in [
        (
            &[
                "--notify-webhook",
                "ftp://hooks.example/x",
                "--notify-webhook-secret",
                "hooks:signing",
            ][..],
            "--notify-webhook: \"ftp://hooks.example/x\": the scheme must be https or http, not \"ftp\"",
        ),
        (
            &[
                "--notify-webhook",
                "https://hooks.example/x",
                "--notify-webhook-secret",
                "hooks",
            ],
            "--notify-webhook-secret \"hooks\": expected NAME:KEY, the Secret (in the execution's namespace) and its key whose value signs deliveries",
        ),
        (
            &[
                "--notify-webhook",
                "https://hooks.example/x",
                "--notify-webhook-secret",
                "hooks:signing",
            ],
            "spec.notify.webhook (--notify-webhook) is delivered by the cluster's controller, which signs it with a Kubernetes Secret; a local run notifies through --notify-command (for example curl to your endpoint) or --notify-file",
        ),
    ] {
        assert_eq!(refused(&home, &agent, flags), message);
    }
    // The same from a spec.
    let spec = json!({"notify": {"webhook": {"url": "https://hooks.example/x",
        "signingSecretRef": {"name": "hooks", "key": "signing"}}}});
    let message = refused(&home, &agent, &["--spec", &spec.to_string()]);
    assert!(
        message.as_str().unwrap().starts_with(
            "spec.notify.webhook (--notify-webhook) is delivered by the cluster's controller"
        ),
        "{message}"
    );
    // `notify set` cannot add one: spec.notify is fixed at creation.
    let (code, answer) = home.json(&[
        "notify",
        "set",
        "nothing",
        "--notify-webhook",
        "https://hooks.example/x",
        "--notify-webhook-secret",
        "hooks:signing",
    ]);
    assert_eq!(code, 2, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("--notify-webhook is set when the execution is created"),
        "{answer}"
    );
}
