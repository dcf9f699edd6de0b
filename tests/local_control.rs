//! Control and housekeeping on the local backend: `delete --all [--dry-run]` and `rm`, `--yaml` answers, shell completions.

mod support;

use serde_json::Value;
use support::local::Home;

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
