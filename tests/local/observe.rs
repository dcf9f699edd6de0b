//! Observation without blocking on the local backend: `execute --until`, `wait`, bounded excerpts of the agent's output, output sizes in `status`, and `errand schema`.

use crate::support;

use std::time::{Duration, Instant};

use crate::support::local::Home;
use serde_json::{Value, json};

/// The stream called `name` in an execution's `output`.
fn stream<'a>(execution: &'a Value, name: &str) -> &'a Value {
    execution["output"]
        .as_array()
        .unwrap_or_else(|| panic!("no output in {execution}"))
        .iter()
        .find(|s| s["stream"] == name)
        .unwrap_or_else(|| panic!("no {name} in {execution}"))
}

#[test]
fn execute_until_returns_the_run_as_it_stands_and_wait_follows_it_to_its_end() {
    let home = Home::new();
    // stdout: "begin\n" at once, "finished\n" after 3 s; stderr: one byte that is not UTF-8.
    let agent = home.agent(
        "slow",
        "echo begin; printf '\\377' >&2; sleep 3; echo finished",
    );
    let started = Instant::now();
    let (code, answer) = home.json(&[
        "execute", "--local", "--agent", &agent, "--input", "x", "--until", "1",
    ]);
    let elapsed = started.elapsed();
    assert_eq!(code, 0, "{answer}");
    assert!(
        elapsed < Duration::from_secs(3),
        "--until 1 returned after {elapsed:?}"
    );
    let execution = &answer["execution"];
    let name = execution["name"].as_str().unwrap().to_owned();
    assert_eq!(execution["phase"], "Running", "{answer}");
    assert_eq!(execution["observation"]["ended"], false);
    assert_eq!(execution["observation"]["until_seconds"], 1.0);
    assert!(
        execution["observation"]["elapsed_seconds"]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    let stdout = stream(execution, "stdout");
    assert_eq!(stdout["total_bytes"], 6, "{answer}");
    assert_eq!(
        stdout["excerpt"],
        json!({"start": 0, "end": 6, "truncated": false, "encoding": "utf8", "data": "begin\n"})
    );
    assert_eq!(
        stream(execution, "stderr")["excerpt"],
        json!({"start": 0, "end": 1, "truncated": false, "encoding": "base64", "data": "/w=="})
    );

    // A short wait returns while it runs; the run goes on.
    let (code, answer) = home.json(&["wait", &name, "--until", "0.2", "--poll", "0.05"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["phase"], "Running");
    assert_eq!(answer["execution"]["observation"]["ended"], false);

    // A long one sees the end, with the last bytes of each stream within --max-bytes.
    let (code, answer) = home.json(&["wait", &name, "--until", "30", "--max-bytes", "9"]);
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(execution["phase"], "Succeeded");
    assert_eq!(execution["observation"]["ended"], true);
    assert!(
        execution["observation"]["elapsed_seconds"]
            .as_f64()
            .unwrap()
            < 30.0
    );
    assert_eq!(
        stream(execution, "stdout")["excerpt"],
        json!({"start": 6, "end": 15, "truncated": true, "encoding": "utf8", "data": "finished\n"})
    );
    // An excerpt continues from an earlier one's `end`.
    let (_, answer) = home.json(&["wait", &name, "--from-byte", "2", "--max-bytes", "4"]);
    assert_eq!(
        stream(&answer["execution"], "stdout")["excerpt"],
        json!({"start": 2, "end": 6, "truncated": true, "encoding": "utf8", "data": "gin\n"})
    );

    // status gives the sizes only.
    let (code, answer) = home.json(&["status", &name]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        answer["execution"]["output"],
        json!([{"stream": "stdout", "total_bytes": 15}, {"stream": "stderr", "total_bytes": 1}])
    );
    assert!(answer["execution"].get("observation").is_none());
}

#[test]
fn waiting_to_the_end_is_the_default_and_a_failed_run_carries_its_excerpts() {
    let home = Home::new();
    let fine = home.agent("fine", "echo all good");
    let (code, answer) = home.json(&["execute", "--local", "--agent", &fine, "--input", "x"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["phase"], "Succeeded");
    assert_eq!(
        stream(&answer["execution"], "stdout")["excerpt"]["data"],
        "all good\n"
    );
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &fine,
        "--input",
        "x",
        "--forever",
    ]);
    assert_eq!(
        (code, &answer["execution"]["phase"]),
        (0, &json!("Succeeded"))
    );

    let failing = home.agent("failing", "echo oops >&2; exit 3");
    let (code, answer) = home.json(&["execute", "--local", "--agent", &failing, "--input", "x"]);
    assert_eq!(code, 1, "{answer}");
    assert_eq!(answer["error"]["code"], "execution_failed");
    let execution = &answer["error"]["execution"];
    assert_eq!(execution["phase"], "Failed");
    assert_eq!(stream(execution, "stderr")["excerpt"]["data"], "oops\n");
    // wait on a run that failed answers as watch does.
    let name = execution["name"].as_str().unwrap();
    let (code, answer) = home.json(&["wait", name]);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (1, Some("execution_failed"))
    );
    assert_eq!(answer["error"]["execution"]["observation"]["ended"], true);
}

#[test]
fn observation_flags_are_refused_naming_them() {
    let home = Home::new();
    let fine = home.agent("fine", "true");
    for (args, named) in [
        (&["wait", "x", "--until=-1"][..], "--until"),
        (&["wait", "x", "--until", "soon"], "--until"),
        (&["wait", "x", "--poll", "0"], "--poll"),
        (&["wait", "x", "--max-bytes", "0"], "--max-bytes"),
        (
            &["execute", "--agent", &fine, "--no-wait", "--until", "1"],
            "--until",
        ),
        (
            &["execute", "--agent", &fine, "--until", "1", "--forever"],
            "--forever",
        ),
    ] {
        let (code, answer) = home.json(args);
        assert_eq!(code, 2, "{args:?}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_argument", "{args:?}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{args:?}: {message}");
    }
    let (code, answer) = home.json(&["wait", "nothing-like-this"]);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (3, Some("not_found"))
    );
}

#[test]
fn the_schema_describes_every_answer_and_refuses_what_is_not_one() {
    use support::answers::conforms;
    let home = Home::new();
    let output = home.run(&["schema"]);
    assert!(output.status.success());
    let schema: Value = serde_json::from_slice(&output.stdout).unwrap();
    let types: Vec<&str> = schema["anyOf"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["properties"]["type"]["const"].as_str())
        .collect();
    for kind in [
        "execution",
        "executions",
        "logs",
        "results",
        "download",
        "error",
    ] {
        assert!(types.contains(&kind), "{kind} missing from {types:?}");
    }
    // The check the suites apply to every answer refuses what is not one.
    assert!(!conforms(
        &json!({"schema_version": 1, "ok": true, "type": "execution", "execution": {}})
    ));
    assert!(!conforms(
        &json!({"schema_version": 1, "ok": true, "type": "surprise", "surprise": 1})
    ));
    assert!(!conforms(
        &json!({"schema_version": 2, "ok": false, "type": "error",
        "error": {"code": "x", "message": "y"}})
    ));
    assert!(conforms(
        &json!({"schema_version": 1, "ok": false, "type": "error",
        "error": {"code": "x", "message": "y"}})
    ));
}
