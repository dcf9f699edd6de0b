//! NeMo agents on the local backend: a NeMo agent config without `runtime` runs with the AgentRuntime serving its harness kind, and is refused, naming the field, when none is installed.

mod support;

use serde_json::{Value, json};
use support::local::Home;

fn example(path: &str) -> String {
    format!("{}/examples/nemo/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// An AgentRuntime manifest for `kind` whose command is the test harness script (locally the
/// command runs on the machine and the image is not used).
fn harness_runtime(home: &Home, name: &str, kind: &str) -> String {
    let script = format!("{}/hack/images/test-harness.sh", env!("CARGO_MANIFEST_DIR"));
    let manifest = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentRuntime", "metadata": {"name": name},
        "spec": {"harnessKind": kind, "image": "errand.local/test-harness:test",
                 "command": ["sh", script], "configFormats": ["nemo-agents-spec-v1"]},
    });
    home.write(&format!("runtime-{name}.json"), &manifest.to_string())
        .display()
        .to_string()
}

fn applied(home: &Home, file: &str) {
    let (code, answer) = home.json(&["apply", "-f", file]);
    assert_eq!(code, 0, "{answer}");
}

#[test]
fn the_nemo_calculator_runs_with_the_runtime_of_its_harness_kind() {
    let home = Home::new();
    applied(&home, &harness_runtime(&home, "deepagents", "deepagents"));
    applied(&home, &example("agent.yaml"));
    let (code, runtimes) = home.json(&["runtimes"]);
    assert_eq!(code, 0, "{runtimes}");
    assert_eq!(
        runtimes["agentruntimes"][0]["metadata"]["name"],
        "deepagents"
    );
    assert_eq!(
        runtimes["agentruntimes"][0]["spec"]["harnessKind"],
        "deepagents"
    );

    let (code, answer) = home.json(&[
        "execute",
        "--agent",
        "calculator-agent",
        "--input",
        "What is 12 multiplied by 8?",
    ]);
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(execution["phase"], "Succeeded", "{answer}");
    assert_eq!(execution["response"], "96");
    let name = execution["name"].as_str().unwrap();
    let file = home.path().join("artifacts.tar.gz");
    let output = home.run(&[
        "results",
        "download",
        "output_artifacts",
        "--execution",
        name,
        "-o",
        file.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{output:?}");
    let artifacts = support::store::tar_files(&std::fs::read(&file).unwrap());
    // The harness answered from the config errand gave it: its name, harness and model.
    assert!(
        artifacts["stdout.log"].contains(
            "calculator-agent via deepagents (nvidia-nemotron-3-5-lightning-30b-a3b): 96"
        ),
        "{}",
        artifacts["stdout.log"]
    );
    assert_eq!(
        artifacts["instructions.txt"],
        "You are a concise calculator agent.\n"
    );
}

fn refusal(home: &Home, args: &[&str]) -> (i32, Value) {
    let (code, answer) = home.json(args);
    assert_eq!(answer["ok"], false, "{args:?} was accepted: {answer}");
    (code, answer)
}

#[test]
fn no_runtime_for_the_harness_kind_is_refused_naming_the_field_and_the_installed_kinds() {
    let home = Home::new();
    applied(&home, &example("agent.yaml"));
    let run = [
        "execute",
        "--agent",
        "calculator-agent",
        "--input",
        "What is 1 plus 1?",
    ];
    let (code, answer) = refusal(&home, &run);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (2, Some("invalid_spec"))
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "Agent \"calculator-agent\" spec.runtime: is not set and no AgentRuntime serves harness kind \"deepagents\""
        ) && message.contains("no AgentRuntime is installed"),
        "{message}"
    );
    applied(&home, &harness_runtime(&home, "claude", "claude"));
    applied(&home, &harness_runtime(&home, "codex", "codex"));
    let (_, answer) = refusal(&home, &run);
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("installed kinds: claude, codex"),
        "{message}"
    );
    // Nothing was left behind by the refusals.
    let (_, list) = home.json(&["list"]);
    assert_eq!(list["executions"], json!([]), "{list}");
}
