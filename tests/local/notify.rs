//! Completion notifications on the local backend: `--notify-command` (the event on stdin, `ERRAND_EVENT_*` variables), `--notify-file` (one NDJSON `execution.finished` line per run), both the CloudEvent a cluster's webhook delivers as the official CloudEvents SDK reads it, `notify set` on a running execution with an output watch, and a failing sink that leaves the run's outcome alone.

use std::time::{Duration, Instant};

use crate::support::local::Home;
use crate::support::python_clients;
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
        assert_eq!(event["specversion"], "1.0", "a CloudEvent: {event}");
        assert_eq!(event["type"], "dev.errand.execution.finished");
        assert_eq!(event["subject"], "told");
        assert_eq!(event["data"]["type"], "execution.finished");
        assert_eq!(event["data"]["execution"], "told");
        assert_eq!(event["data"]["phase"], "Succeeded");
        assert_eq!(event["data"]["exit_code"], 0);
        assert!(event.get("deliveries").is_none(), "{event}");
    }
    assert_eq!(on_stdin, file[0], "every sink gets the same event");

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

/// The cluster execution a local record describes (name, namespace, uid, how and when it
/// ended), as the controller would see it once terminal.
fn as_cluster_execution(record: &Value) -> errand::api::AgentExecution {
    use errand::api::{AgentExecution, AgentExecutionSpec, AgentExecutionStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    let ended: jiff::Timestamp = record["completed_at"].as_str().unwrap().parse().unwrap();
    let phase = serde_json::from_value(record["phase"].clone()).unwrap();
    let mut execution = AgentExecution::new(
        record["name"].as_str().unwrap(),
        AgentExecutionSpec::default(),
    );
    execution.metadata.namespace = Some(record["namespace"].as_str().unwrap().into());
    execution.metadata.uid = Some(record["uid"].as_str().unwrap().into());
    execution.status = Some(AgentExecutionStatus {
        phase: Some(phase),
        completion_time: Some(Time(ended)),
        exit_code: record["exit_code"].as_i64().map(|c| c as i32),
        conditions: vec![Condition {
            type_: "Failed".into(),
            status: "True".into(),
            reason: record["reason"].as_str().unwrap().into(),
            message: String::new(),
            last_transition_time: Time(ended),
            observed_generation: None,
        }],
        ..AgentExecutionStatus::default()
    });
    execution
}

#[test]
fn a_local_notification_and_a_webhook_delivery_are_one_cloudevent_to_the_cloudevents_sdk() {
    use errand::controller::execution::notify::{
        CLOUDEVENTS_CONTENT_TYPE, CloudEvent, WebhookSender, finished_event,
    };
    let home = Home::new();
    let agent = home.agent("failing", "echo trying; exit 3");
    let events = home.path().join("events.ndjson");
    let stdin = home.path().join("stdin.json");
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--name",
        "told",
        "--notify-file",
        events.to_str().unwrap(),
        "--notify-command",
        &format!("cat > {}", stdin.display()),
    ]);
    assert_ne!(code, 0, "{answer}");
    let record = &answer["error"]["execution"];
    assert_eq!(record["phase"], "Failed", "{answer}");
    let file = std::fs::read_to_string(&events).unwrap();
    let command = std::fs::read_to_string(&stdin).unwrap();

    // The controller's event of the same run, delivered by its real sender to a real endpoint.
    let key = b"signing key";
    let delivered = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let receiver = crate::support::webhook_receiver::Receiver::start("127.0.0.1", &[204]).await;
        let loopback = "127.0.0.0/8".parse().unwrap();
        let sender = WebhookSender::new(std::sync::Arc::new(
            errand::outbound::OutboundPolicy::default().allow(loopback),
        ));
        let event = CloudEvent::of(finished_event(&as_cluster_execution(record)).unwrap());
        let url = url::Url::parse(&receiver.url("/hooks")).unwrap();
        sender.attempt(&url, key, &event).await;
        let received = receiver.received();
        assert_eq!(received.len(), 1, "one delivery");
        received[0].assert_signed_cloudevent("/hooks", key);
        String::from_utf8(received[0].body.clone()).unwrap()
    });

    let structured = json!({"content-type": CLOUDEVENTS_CONTENT_TYPE});
    let read = python_clients::read_cloudevents(&json!([
        {"headers": structured, "body": file.trim_end()},
        {"headers": structured, "body": command.trim_end()},
        {"headers": structured, "body": delivered},
    ]));
    for event in &read {
        assert!(event.get("error").is_none(), "the SDK refused it: {read:?}");
        assert_eq!(event["attributes"]["specversion"], "1.0", "{event}");
        assert_eq!(
            event["attributes"]["type"], "dev.errand.execution.finished",
            "{event}"
        );
    }
    let data = &read[0]["data"];
    assert_eq!(data["execution"], "told");
    assert_eq!(data["reason"], "AgentFailed", "{data}");
    assert_eq!(data["exit_code"], 3, "{data}");
    assert_eq!(
        read[0], read[1],
        "the file and the command get the same event"
    );
    assert_eq!(
        read[0], read[2],
        "a local sink and the cluster's webhook get the same CloudEvent (type, data, every attribute)"
    );

    // What a receiver of the old, errand-only shape sent is not a CloudEvent to the SDK.
    let old = json!({"type": "execution.finished", "execution": "told", "exit_code": 3});
    let refused = python_clients::read_cloudevents(
        &json!([{"headers": structured, "body": old.to_string()}]),
    );
    let error = refused[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("source") && error.contains("exit_code"),
        "the SDK names the missing source and the forbidden extension name: {refused:?}"
    );
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
                e["data"]["matched"]["line"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "dev.errand.execution.output_matched".to_owned(),
                "ready late".to_owned()
            ),
            (
                "dev.errand.execution.output_matched".to_owned(),
                "boom 42".to_owned()
            ),
            ("dev.errand.execution.finished".to_owned(), String::new()),
        ],
        "only lines after the watch was set: {file:?}"
    );
    assert_eq!(file[1]["data"]["matched"]["stream"], "stderr");
    let ids: std::collections::BTreeSet<&str> =
        file.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3, "each event has its own id: {file:?}");
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
