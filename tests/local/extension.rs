//! Extensions on the local backend: an installed AgentExtension runs after a successful agent and saves its declared results beside the run's own (listed, downloadable, in manifest.json); an unknown kind or a config outside its schema is refused at execute; a failing extension fails the execution as `ExtensionFailed`; a failed agent never runs it.

use crate::support::local::Home;
use errand::api::contract::COMPLETED_RUN_RESULTS;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn example(path: &str) -> String {
    format!("{}/examples/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn applied(home: &Home, file: &str) {
    let (code, answer) = home.json(&["apply", "-f", file]);
    assert_eq!(code, 0, "{answer}");
}

/// A home with the `analysis` extension of the examples installed.
fn home_with_analysis() -> Home {
    let home = Home::new();
    applied(&home, &example("extension/extension.yaml"));
    let (code, listed) = home.json(&["extensions"]);
    assert_eq!(code, 0, "{listed}");
    assert_eq!(
        listed["agentextensions"][0]["spec"]["extensionKind"], "analysis",
        "{listed}"
    );
    home
}

/// A spec whose inline agent runs `script` (a file it writes lands in output_workdir), with
/// `extension`.
fn spec(script: &str, extension: Value) -> String {
    json!({
        "agent": {
            "runtime": {"image": "errand.local/busybox:test", "command": ["sh", "-c", script]},
            "config": {"config_format": "agents-spec-v1", "name": "writer"},
        },
        "input": "write the notes",
        "extension": extension,
    })
    .to_string()
}

fn execute(home: &Home, spec: &str) -> (i32, Value) {
    home.json(&["execute", "--spec", spec])
}

fn result_names(execution: &Value) -> Vec<String> {
    execution["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_extension_turns_output_workdir_into_an_analysis_report() {
    let home = home_with_analysis();
    let (code, answer) = execute(
        &home,
        &spec(
            "mkdir -p src && echo hi > notes.txt && echo x > src/main.rs && echo done",
            json!({"kind": "analysis", "config": {"format": "markdown"}}),
        ),
    );
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(execution["phase"], "Succeeded", "{answer}");
    assert_eq!(
        result_names(execution),
        [
            "input_workdir",
            "output_workdir",
            "output_artifacts",
            "run_result",
            "analysis-report",
            "manifest.json"
        ]
    );
    let name = execution["name"].as_str().unwrap();

    let report = String::from_utf8(home.download("analysis-report", name)).unwrap();
    assert!(
        report.starts_with(&format!("# Analysis of {name}\nfiles in output_workdir:\n")),
        "{report}"
    );
    for file in ["notes.txt", "src/main.rs"] {
        assert!(report.contains(file), "{file} missing from: {report}");
    }

    // `results list` and manifest.json list it like the others, with its size and sha256.
    let (code, listed) = home.json(&["results", "list", name]);
    assert_eq!(code, 0, "{listed}");
    let entry = listed["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "analysis-report")
        .unwrap_or_else(|| panic!("analysis-report not listed: {listed}"))
        .clone();
    assert_eq!(entry["size"], report.len());
    assert_eq!(
        entry["sha256"],
        hex::encode(Sha256::digest(report.as_bytes()))
    );
    let manifest: Value = serde_json::from_slice(&home.download("manifest.json", name)).unwrap();
    let in_manifest: Vec<&Value> = manifest["results"].as_array().unwrap().iter().collect();
    assert_eq!(
        in_manifest
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        [
            "input_workdir",
            "output_workdir",
            "output_artifacts",
            "run_result",
            "analysis-report"
        ]
    );
    assert_eq!(in_manifest[4], &entry);

    // The definition is kept with the execution: an AgentExtension changed since (here to one
    // that fails) changes nothing for a rerun, which runs the snapshot's extension.
    let mut changed: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(example("extension/extension.yaml")).unwrap(),
    )
    .unwrap();
    changed["spec"]["command"] = json!(["sh", "-c", "exit 9"]);
    applied(
        &home,
        home.write("changed.json", &changed.to_string())
            .to_str()
            .unwrap(),
    );
    let (code, answer) = home.json(&["rerun", name]);
    assert_eq!(code, 0, "{answer}");
    assert!(result_names(&answer["execution"]).contains(&"analysis-report".to_owned()));
}

#[test]
fn an_unknown_kind_or_a_config_outside_the_schema_is_refused_at_execute() {
    let home = home_with_analysis();
    let (code, answer) = execute(&home, &spec("echo done", json!({"kind": "evaluation"})));
    assert_eq!(code, 2, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_spec");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "spec.extension.kind: \"evaluation\" names no installed AgentExtension; installed kinds: analysis"
        ),
        "{message}"
    );

    let (code, answer) = execute(
        &home,
        &spec(
            "echo done",
            json!({"kind": "analysis", "config": {"format": "pdf", "depth": 2}}),
        ),
    );
    assert_eq!(code, 2, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.extension.config.depth: is not a setting of the extension")
            && message.contains(
                "spec.extension.config.format: \"pdf\" must be one of \"text\", \"markdown\""
            ),
        "{message}"
    );
    let (_, listed) = home.json(&["list"]);
    assert_eq!(listed["executions"], json!([]), "nothing was created");
}

#[test]
fn an_extension_that_fails_fails_the_execution_and_keeps_the_agents_results() {
    let home = Home::new();
    let broken = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExtension",
        "metadata": {"name": "broken"},
        "spec": {"extensionKind": "broken", "image": "errand.local/busybox:test",
                 "command": ["sh", "-c", "echo cannot analyse >&2; exit 3"],
                 "results": ["analysis-report"]},
    });
    applied(
        &home,
        home.write("broken.json", &broken.to_string())
            .to_str()
            .unwrap(),
    );
    let (code, answer) = execute(
        &home,
        &spec("echo hi > notes.txt", json!({"kind": "broken"})),
    );
    assert_eq!(code, 1, "{answer}");
    assert_eq!(answer["error"]["code"], "execution_failed", "{answer}");
    let (_, status) = home.json(&["list"]);
    let execution = &status["executions"][0];
    assert_eq!(execution["phase"], "Failed", "{status}");
    assert_eq!(execution["reason"], "ExtensionFailed", "{status}");
    let message = execution["message"].as_str().unwrap();
    assert!(
        message.contains("extension \"broken\" (AgentExtension \"broken\") failed after the agent succeeded: exited with code 3")
            && message.contains("cannot analyse"),
        "{message}"
    );
    assert_eq!(execution["extension"]["state"], "Failed", "{status}");
    // The agent's results stay, and the manifest lists them without the missing report.
    assert_eq!(result_names(execution), COMPLETED_RUN_RESULTS);
    let name = execution["name"].as_str().unwrap();
    let run: Value = serde_json::from_slice(&home.download("run_result", name)).unwrap();
    assert_eq!(run["state"], "Succeeded");
}

#[test]
fn an_extension_never_runs_after_a_failed_agent() {
    let home = home_with_analysis();
    let (code, answer) = execute(
        &home,
        &spec("echo bad >&2; exit 4", json!({"kind": "analysis"})),
    );
    assert_eq!(code, 1, "{answer}");
    let (_, status) = home.json(&["list"]);
    let execution = &status["executions"][0];
    assert_eq!(execution["reason"], "AgentFailed", "{status}");
    assert!(execution.get("extension").is_none(), "{status}");
    assert_eq!(result_names(execution), COMPLETED_RUN_RESULTS);
}
