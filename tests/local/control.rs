//! Control and housekeeping on the local backend: `delete --all [--dry-run]` and `rm`, `--yaml` answers, shell completions.

use crate::support;

use crate::support::local::Home;
use serde_json::{Value, json};

/// Runs `errand ARGS --yaml` and returns its exit code and its one YAML answer as JSON, checked
/// against `errand schema` as every JSON answer is.
fn yaml_answer(home: &Home, args: &[&str]) -> (i32, Value) {
    let mut all = args.to_vec();
    all.push("--yaml");
    let output = home.run(&all);
    let text = String::from_utf8_lossy(&output.stdout);
    let value: Value = serde_saphyr::from_str(&text)
        .unwrap_or_else(|e| panic!("{args:?} --yaml did not print one YAML document: {e}\n{text}"));
    support::answers::assert_conforms(&value);
    (output.status.code().unwrap_or(-1), value)
}

/// Starts `agent` in the background; returns the execution's name.
fn start(home: &Home, agent: &str) -> String {
    let (code, answer) = home.json(&["execute", "--agent", agent, "--input", "x", "--no-wait"]);
    assert_eq!(code, 0, "{answer}");
    answer["execution"]["name"].as_str().unwrap().to_owned()
}

/// Runs `agent` to its end; returns the execution's name.
fn run(home: &Home, agent: &str) -> String {
    let (_, answer) = home.json(&["execute", "--agent", agent, "--input", "x"]);
    let execution = if answer["ok"] == true {
        &answer["execution"]
    } else {
        &answer["error"]["execution"]
    };
    execution["name"].as_str().unwrap().to_owned()
}

fn names(home: &Home) -> Vec<String> {
    let (code, answer) = home.json(&["list"]);
    assert_eq!(code, 0, "{answer}");
    let mut names: Vec<String> = answer["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn delete_all_removes_only_finished_executions_and_a_dry_run_nothing() {
    let home = Home::new();
    let ok = run(&home, &home.agent("ok", "echo fine"));
    let failed = run(&home, &home.agent("bad", "exit 3"));
    let running = start(&home, &home.agent("slow", "sleep 600"));

    let (code, answer) = home.json(&["delete", "--all", "--dry-run"]);
    assert_eq!(code, 0, "{answer}");
    let report = &answer["deleted_all"];
    assert_eq!(answer["type"], "deleted_all");
    assert_eq!(report["dry_run"], true);
    let mut listed: Vec<(String, String)> = report["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert!(
                e["results_removed"].is_null(),
                "a dry run removes nothing: {e}"
            );
            (
                e["execution"].as_str().unwrap().to_owned(),
                e["phase"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    listed.sort();
    let mut expected = vec![
        (ok.clone(), "Succeeded".to_owned()),
        (failed.clone(), "Failed".to_owned()),
    ];
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!(report["kept_running"], serde_json::json!([running]));
    assert_eq!(names(&home).len(), 3, "a dry run deletes nothing");

    // `rm` is `delete`.
    let (code, answer) = home.json(&["rm", "--all"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["deleted_all"]["dry_run"], false);
    for entry in answer["deleted_all"]["executions"].as_array().unwrap() {
        assert_eq!(entry["results_removed"], 5, "{entry}");
    }
    assert_eq!(names(&home), std::slice::from_ref(&running));

    let (code, answer) = home.json(&["rm", &running]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["deleted"]["execution"], running.as_str());
    assert!(names(&home).is_empty());

    // --dry-run only with --all; a name or --all is needed, not both.
    for args in [
        &["delete", "x", "--dry-run"][..],
        &["delete"],
        &["delete", "x", "--all"],
    ] {
        let (code, answer) = home.json(args);
        assert_eq!(
            (code, &answer["error"]["code"]),
            (2, &Value::from("invalid_argument")),
            "{args:?}: {answer}"
        );
    }
}

#[test]
fn yaml_answers_are_the_json_answers_as_yaml() {
    let home = Home::new();
    let name = run(&home, &home.agent("ok", "echo fine"));
    let (code, json) = home.json(&["status", &name]);
    assert_eq!(code, 0);
    let (code, yaml) = yaml_answer(&home, &["status", &name]);
    assert_eq!((code, &yaml), (0, &json), "--yaml");
    let output = home.run(&["status", &name, "-o", "yaml"]);
    let yaml: Value = serde_saphyr::from_str(&String::from_utf8_lossy(&output.stdout)).unwrap();
    assert_eq!((output.status.code(), &yaml), (Some(0), &json), "-o yaml");
    // Errors too, also for a command line the parser refuses.
    let (code, yaml) = yaml_answer(&home, &["status", "nope"]);
    assert_eq!(
        (code, &yaml["error"]["code"]),
        (3, &Value::from("not_found"))
    );
    let (code, yaml) = yaml_answer(&home, &["status"]);
    assert_eq!(
        (code, &yaml["error"]["code"]),
        (2, &Value::from("invalid_argument"))
    );
    let output = home.run(&["status", &name, "--yaml", "-o", "json"]);
    assert_eq!(output.status.code(), Some(2), "--yaml and -o conflict");
}

#[test]
fn completions_are_printed_for_each_shell() {
    let home = Home::new();
    for (shell, marker) in [
        ("bash", "complete -F _errand"),
        ("zsh", "#compdef errand"),
        ("fish", "complete -c errand"),
    ] {
        let output = home.run(&["completions", shell]);
        assert!(output.status.success(), "{shell}: {output:?}");
        let script = String::from_utf8_lossy(&output.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        for command in ["execute", "delete", "completions"] {
            assert!(script.contains(command), "{shell} completes {command}");
        }
    }
    let output = home.run(&["completions", "tcsh"]);
    assert_eq!(output.status.code(), Some(2));
}

/// Waits (up to 60 s) until the execution `name` ends; returns its answer.
fn wait_end(home: &Home, name: &str) -> Value {
    let (_, answer) = home.json(&["wait", name, "--until", "60", "--poll", "0.1"]);
    let execution = if answer["ok"] == true {
        answer["execution"].clone()
    } else {
        answer["error"]["execution"].clone()
    };
    assert_eq!(execution["observation"]["ended"], true, "{answer}");
    execution
}

/// Starts `script` with `--timeout-seconds timeout` in the background; returns its name.
fn start_with_timeout(home: &Home, name: &str, script: &str, timeout: &str) -> String {
    let agent = home.agent(name, script);
    let (code, answer) = home.json(&[
        "execute",
        "--agent",
        &agent,
        "--input",
        "x",
        "--timeout-seconds",
        timeout,
        "--no-wait",
    ]);
    assert_eq!(code, 0, "{answer}");
    answer["execution"]["name"].as_str().unwrap().to_owned()
}

/// Waits until the agent of `name` has written `text` to its stdout.
fn wait_for_output(home: &Home, name: &str, text: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, answer) = home.json(&["tail", name]);
        let lines = answer["logs"]["lines"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if lines
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains(text)))
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} never printed {text:?}: {answer}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn kill_cancels_with_term_skips_the_grace_with_kill_and_signals_the_group_otherwise() {
    let home = Home::new();
    // USR1 reaches the agent's process group and the run goes on.
    let name = start_with_timeout(
        &home,
        "trapper",
        "trap 'echo got-usr1' USR1; echo ready; while true; do sleep 0.1; done",
        "60",
    );
    wait_for_output(&home, &name, "ready");
    let (code, answer) = home.json(&["kill", &name, "--signal", "USR1"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["type"], "killed");
    assert_eq!(answer["killed"]["signal"], "SIGUSR1");
    assert_eq!(answer["killed"]["effect"], "process_group");
    assert_eq!(answer["killed"]["phase"], "Running");
    wait_for_output(&home, &name, "got-usr1");

    // TERM is a cancel.
    let (code, answer) = home.json(&["kill", &name]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["killed"]["signal"], "SIGTERM");
    assert_eq!(answer["killed"]["effect"], "cancel");
    assert_eq!(answer["killed"]["phase"], "Cancelled");

    // KILL skips the grace (5 s locally) that an agent ignoring SIGTERM would otherwise get.
    let stubborn = start_with_timeout(
        &home,
        "stubborn",
        "trap '' TERM; echo ready; sleep 600",
        "60",
    );
    wait_for_output(&home, &stubborn, "ready");
    let started = std::time::Instant::now();
    let (code, answer) = home.json(&["kill", &stubborn, "-s", "KILL"]);
    assert_eq!(code, 0, "{answer}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "KILL waited {:?}",
        started.elapsed()
    );
    assert_eq!(answer["killed"]["effect"], "cancel_without_grace");
    assert_eq!(answer["killed"]["phase"], "Cancelled");
    let (_, status) = home.json(&["status", &stubborn]);
    assert_eq!(status["execution"]["reason"], "Cancelled", "{status}");
    assert_eq!(status["execution"]["exit_code"], 137, "SIGKILL: {status}");

    // A finished run has nothing to signal; an unknown signal is refused naming the flag.
    let (code, answer) = home.json(&["kill", &stubborn, "--signal", "KILL"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &Value::from("invalid_state")),
        "{answer}"
    );
    let (code, answer) = home.json(&["kill", &stubborn, "--signal", "BOGUS"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (2, &Value::from("invalid_argument")),
        "{answer}"
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--signal"),
        "{answer}"
    );
}

#[test]
fn a_deadline_moves_later_and_earlier_from_when_it_is_accepted() {
    let home = Home::new();
    // Extended past its original 2 s, the run finishes.
    let name = start_with_timeout(&home, "late", "echo ready; sleep 4; echo finished", "2");
    let (code, answer) = home.json(&[
        "deadline",
        "set",
        &name,
        "--in",
        "20",
        "--acknowledge-result-loss",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["type"], "deadline");
    let changed = &answer["deadline"];
    assert_eq!(changed["execution"], name.as_str());
    assert_eq!(changed["cleared"], false);
    let accepted: jiff::Timestamp = changed["accepted_at"].as_str().unwrap().parse().unwrap();
    let at: jiff::Timestamp = changed["deadline_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(at.duration_since(accepted).as_secs(), 20, "{answer}");
    let done = wait_end(&home, &name);
    assert_eq!(
        done["phase"], "Succeeded",
        "ran past its original timeout: {done}"
    );

    // Shortened, it is stopped as a timeout.
    let name = start_with_timeout(&home, "shortened", "echo ready; sleep 600", "3600");
    wait_for_output(&home, &name, "ready");
    let started = std::time::Instant::now();
    let (code, answer) = home.json(&[
        "deadline",
        "set",
        &name,
        "--in",
        "1",
        "--acknowledge-result-loss",
    ]);
    assert_eq!(code, 0, "{answer}");
    let done = wait_end(&home, &name);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        (&done["phase"], &done["reason"]),
        (&Value::from("Failed"), &Value::from("DeadlineExceeded")),
        "{done}"
    );
    assert_eq!(done["timed_out"], true);

    // Cleared, the deadline is timeoutSeconds from the start again.
    let name = start_with_timeout(&home, "cleared", "echo ready; sleep 3; echo finished", "60");
    wait_for_output(&home, &name, "ready");
    let (code, _) = home.json(&[
        "deadline",
        "set",
        &name,
        "--in",
        "1",
        "--acknowledge-result-loss",
    ]);
    assert_eq!(code, 0);
    let (code, answer) = home.json(&["deadline", "clear", &name]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["deadline"]["cleared"], true);
    let (_, status) = home.json(&["status", &name]);
    let started_at: jiff::Timestamp = status["execution"]["started_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let at: jiff::Timestamp = answer["deadline"]["deadline_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(at.duration_since(started_at).as_secs(), 60, "{answer}");
    assert_eq!(wait_end(&home, &name)["phase"], "Succeeded");

    // Once termination began (an agent that ignores SIGTERM holds it in its grace), and after
    // the end, a change is refused; so is a set without the acknowledgement.
    let name = start_with_timeout(
        &home,
        "stopping",
        "trap '' TERM; echo ready; sleep 600",
        "60",
    );
    wait_for_output(&home, &name, "ready");
    home.json(&[
        "deadline",
        "set",
        &name,
        "--in",
        "1",
        "--acknowledge-result-loss",
    ]);
    std::thread::sleep(std::time::Duration::from_millis(2000));
    let (code, answer) = home.json(&[
        "deadline",
        "set",
        &name,
        "--in",
        "100",
        "--acknowledge-result-loss",
    ]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &Value::from("invalid_state")),
        "{answer}"
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("after termination began"),
        "{answer}"
    );
    assert_eq!(wait_end(&home, &name)["reason"], "DeadlineExceeded");
    let (code, answer) = home.json(&["deadline", "clear", &name]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &Value::from("invalid_state")),
        "{answer}"
    );
    let (code, answer) = home.json(&["deadline", "set", &name, "--in", "5"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (2, &Value::from("invalid_argument")),
        "{answer}"
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--acknowledge-result-loss"),
        "{answer}"
    );
}

#[test]
fn create_defines_without_starting_and_start_runs_it() {
    let home = Home::new();
    let agent = home.agent("later", "echo started-later");
    let (code, answer) = home.json(&["create", "--agent", &agent, "--input", "x"]);
    assert_eq!(code, 0, "{answer}");
    let name = answer["execution"]["name"].as_str().unwrap().to_owned();
    assert_eq!(answer["execution"]["phase"], "Created");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (_, status) = home.json(&["status", &name]);
    assert_eq!(
        status["execution"]["phase"], "Created",
        "nothing runs it: {status}"
    );
    assert!(status["execution"].get("started_at").is_none());

    let (code, answer) = home.json(&["start", &name]);
    assert_eq!(code, 0, "{answer}");
    assert_ne!(answer["execution"]["phase"], "Created");
    let done = wait_end(&home, &name);
    assert_eq!(done["phase"], "Succeeded", "{done}");
    assert_eq!(done["response"], "started-later");

    let (code, answer) = home.json(&["start", &name]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &Value::from("invalid_state")),
        "{answer}"
    );
    let (code, answer) = home.json(&["create", "--agent", &agent, "--no-wait"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (2, &Value::from("invalid_argument")),
        "{answer}"
    );
    // `held` in a spec given to `execute` is refused, naming it, and creates nothing.
    let before = names(&home);
    let (code, answer) = home.json(&[
        "execute",
        "--agent",
        &agent,
        "--spec",
        r#"{"held": true, "input": "x"}"#,
    ]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (2, &Value::from("invalid_argument")),
        "{answer}"
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.held"),
        "{answer}"
    );
    assert_eq!(names(&home), before);
}

#[test]
fn restart_runs_a_finished_execution_again_in_place_once_its_processes_are_gone() {
    let home = Home::new();
    let agent = home.agent(
        "again",
        "date +%s%N > $ERRAND_ARTIFACTS_DIR/at.txt; echo run",
    );
    let name = run(&home, &agent);
    let (_, before) = home.json(&["status", &name]);
    let (code, answer) = home.json(&["restart", &name]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["name"], name.as_str());
    let done = wait_end(&home, &name);
    assert_eq!(done["phase"], "Succeeded", "{done}");
    assert_ne!(done["uid"], before["execution"]["uid"], "a new run: {done}");
    assert_eq!(
        done["snapshot_digest"], before["execution"]["snapshot_digest"],
        "the same definition"
    );
    let (_, results) = home.json(&["results", "list", &name]);
    assert_eq!(results["results"].as_array().unwrap().len(), 5, "{results}");

    // A process still in the old run's process group holds the restart back.
    let mut straggler = std::process::Command::new("sleep");
    std::os::unix::process::CommandExt::process_group(&mut straggler, 0);
    let mut straggler = straggler.arg("30").spawn().unwrap();
    let pgid_file = home
        .path()
        .join(format!("home/executions/default/{name}/scratch/agent.pgid"));
    assert!(pgid_file.exists(), "the runner records the agent's group");
    std::fs::write(&pgid_file, straggler.id().to_string()).unwrap();
    let (code, answer) = home.json(&["restart", &name]);
    straggler.kill().unwrap();
    straggler.wait().unwrap();
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &Value::from("invalid_state")),
        "{answer}"
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("process group {}", straggler.id())),
        "{answer}"
    );
}

/// The uid and phase `status` shows for `name`.
fn uid_and_phase(home: &Home, name: &str) -> (Value, Value) {
    let (_, status) = home.json(&["status", name]);
    (
        status["execution"]["uid"].clone(),
        status["execution"]["phase"].clone(),
    )
}

#[test]
fn restart_of_a_running_execution_restarts_it_every_time_or_leaves_it_as_it_was() {
    let home = Home::new();
    let name = start_with_timeout(&home, "looping", "echo ready; sleep 600", "3600");
    let (mut restarted, mut refused) = (0, 0);
    for attempt in 0..50 {
        wait_for_output(&home, &name, "ready");
        let (uid, phase) = uid_and_phase(&home, &name);
        assert_eq!(phase, "Running", "attempt {attempt}");
        let (code, answer) = home.json(&["restart", &name]);
        let (new_uid, new_phase) = uid_and_phase(&home, &name);
        if code == 0 {
            restarted += 1;
            assert_ne!(new_uid, uid, "attempt {attempt}: a new run: {answer}");
            assert!(
                ["Pending", "Starting", "Running"].contains(&new_phase.as_str().unwrap()),
                "attempt {attempt}: restarted, not left stopped: {new_phase}"
            );
        } else {
            refused += 1;
            assert_eq!(answer["error"]["code"], "invalid_state", "{answer}");
            assert_eq!(
                (&new_uid, &new_phase),
                (&uid, &Value::from("Running")),
                "attempt {attempt}: a refused restart leaves the run as it was: {answer}"
            );
        }
    }
    assert!(
        restarted > 0,
        "restarted {restarted} times, refused {refused} times"
    );
    let (code, answer) = home.json(&["cancel", &name]);
    assert_eq!(code, 0, "{answer}");
}

#[test]
fn restart_and_rerun_keep_the_tags_variables_and_notifications_the_user_set() {
    let home = Home::new();
    let agent = home.agent("keeper", "echo ready $GREETING; sleep 600");
    let events = home.path().join("events.ndjson");
    let (code, answer) = home.json(&[
        "execute",
        "--agent",
        &agent,
        "--input",
        "x",
        "--name",
        "kept",
        "--tag",
        "team-a",
        "--env",
        "GREETING=hello",
        "--notify-file",
        events.to_str().unwrap(),
        "--no-wait",
    ]);
    assert_eq!(code, 0, "{answer}");
    let set = |execution: &Value| {
        (
            execution["tags"].clone(),
            execution["env"].clone(),
            execution["notify"].clone(),
        )
    };
    let given = set(&answer["execution"]);
    assert_eq!(given.0, json!(["team-a"]), "{answer}");
    assert_eq!(given.1, json!({"GREETING": "hello"}), "{answer}");
    assert!(given.2["file"].is_string(), "{answer}");

    wait_for_output(&home, "kept", "ready hello");
    let (code, answer) = home.json(&["restart", "kept"]);
    assert_eq!(code, 0, "{answer}");
    wait_for_output(&home, "kept", "ready hello");
    let (_, status) = home.json(&["status", "kept"]);
    assert_eq!(
        set(&status["execution"]),
        given,
        "restart keeps them: {status}"
    );
    let (code, answer) = home.json(&["cancel", "kept"]);
    assert_eq!(code, 0, "{answer}");
    let finished = |events: &std::path::Path| {
        std::fs::read_to_string(events)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("dev.errand.execution.finished"))
            .count()
    };
    assert_eq!(
        finished(&events),
        2,
        "the restart's cancel and the cancel of the restarted run both notified"
    );

    let (code, answer) = home.json(&["rerun", "kept", "--name", "again", "--no-wait"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        set(&answer["execution"]),
        given,
        "rerun keeps them: {answer}"
    );
    wait_for_output(&home, "again", "ready hello");
    let (code, answer) = home.json(&["cancel", "again"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(finished(&events), 3, "the rerun notifies the same file");
}

/// Sets the deadline of the running `name` `in_seconds` from now; returns when it is.
fn set_deadline(home: &Home, name: &str, in_seconds: &str) -> jiff::Timestamp {
    let (code, answer) = home.json(&[
        "deadline",
        "set",
        name,
        "--in",
        in_seconds,
        "--acknowledge-result-loss",
    ]);
    assert_eq!(code, 0, "{answer}");
    answer["deadline"]["deadline_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn every_stop_names_its_cause_and_a_set_deadline_stops_the_run_promptly() {
    let home = Home::new();
    // A deadline set by the user stops the run within moments of passing, also when the agent
    // left a process outside its group (`setsid`) holding its output open, and says so.
    for (agent, script) in [
        ("plain", "echo ready; sleep 600"),
        ("daemonizing", "echo ready; setsid sleep 20 & sleep 600"),
    ] {
        let name = start_with_timeout(&home, agent, script, "3600");
        wait_for_output(&home, &name, "ready");
        let at = set_deadline(&home, &name, "3");
        let done = wait_end(&home, &name);
        let late = jiff::Timestamp::now().duration_since(at);
        assert!(
            late < jiff::SignedDuration::from_secs(2),
            "{agent}: ended {late:?} after its deadline"
        );
        assert_eq!(done["reason"], "DeadlineExceeded", "{done}");
        assert_eq!(
            done["message"],
            format!(
                "the agent ran past the deadline set with `errand deadline set` ({at}) and was stopped"
            ),
            "{agent}: the deadline that passed, not timeoutSeconds"
        );
    }

    // timeoutSeconds names itself; a cancel, a kill and a deadline cleared again name theirs.
    let name = start_with_timeout(&home, "timeout", "echo ready; sleep 600", "2");
    let done = wait_end(&home, &name);
    assert_eq!(
        (&done["reason"], &done["message"]),
        (
            &Value::from("DeadlineExceeded"),
            &Value::from("the agent ran past timeoutSeconds (2s) and was stopped")
        ),
        "{done}"
    );
    let name = start_with_timeout(&home, "cleared", "echo ready; sleep 600", "3");
    wait_for_output(&home, &name, "ready");
    set_deadline(&home, &name, "100");
    let (code, answer) = home.json(&["deadline", "clear", &name]);
    assert_eq!(code, 0, "{answer}");
    let done = wait_end(&home, &name);
    assert_eq!(
        done["message"], "the agent ran past timeoutSeconds (3s) and was stopped",
        "{done}"
    );
    for (command, message) in [
        (
            &["cancel"][..],
            "the run was cancelled and the agent was stopped",
        ),
        (
            &["kill", "-s", "KILL"][..],
            "the run was killed (SIGKILL, no grace) and the agent was stopped",
        ),
    ] {
        let name = start_with_timeout(&home, "stopped", "echo ready; sleep 600", "3600");
        wait_for_output(&home, &name, "ready");
        let (code, answer) = home.json(&[command, &[name.as_str()]].concat());
        assert_eq!(code, 0, "{answer}");
        let done = wait_end(&home, &name);
        assert_eq!(
            (&done["reason"], &done["message"]),
            (&Value::from("Cancelled"), &Value::from(message)),
            "{command:?}: {done}"
        );
    }
}
