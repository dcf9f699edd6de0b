//! NeMo agents on the local backend: a NeMo agent config without `runtime` runs with the AgentRuntime serving its harness kind, and is refused, naming the field, when none is installed.

use crate::support::local::Home;
use crate::support::store::tar_files;
use serde_json::{Value, json};

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
    let artifacts = tar_files(&home.download("output_artifacts", name));
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

/// Runs `args`, which must be refused; the exit code and the error's message.
fn refusal(home: &Home, args: &[&str]) -> (i32, String) {
    let (code, answer) = home.json(args);
    assert_eq!(answer["ok"], false, "{args:?} was accepted: {answer}");
    let message = answer["error"]["message"].as_str().unwrap().to_owned();
    (code, message)
}

/// Runs `args`, which must be refused as an invalid spec (exit 2); the error's message.
fn invalid_spec(home: &Home, args: &[&str]) -> String {
    let (code, answer) = home.json(args);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (2, Some("invalid_spec")),
        "{args:?}: {answer}"
    );
    answer["error"]["message"].as_str().unwrap().to_owned()
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
    let message = invalid_spec(&home, &run);
    assert!(
        message.contains(
            "Agent \"calculator-agent\" spec.runtime: is not set and no AgentRuntime serves harness kind \"deepagents\""
        ) && message.contains("no AgentRuntime is installed"),
        "{message}"
    );
    applied(&home, &harness_runtime(&home, "claude", "claude"));
    applied(&home, &harness_runtime(&home, "codex", "codex"));
    let (_, message) = refusal(&home, &run);
    assert!(
        message.contains("installed kinds: claude, codex"),
        "{message}"
    );
    // Nothing was left behind by the refusals.
    let (_, list) = home.json(&["list"]);
    assert_eq!(list["executions"], json!([]), "{list}");
}

/// A home with the `deepagents` harness runtime applied.
fn home_with_runtime() -> Home {
    let home = Home::new();
    applied(&home, &harness_runtime(&home, "deepagents", "deepagents"));
    home
}

#[test]
fn agents_create_wraps_the_bare_nemo_calculator_config_and_it_runs() {
    let home = home_with_runtime();
    let (code, created) = home.json(&[
        "agents",
        "create",
        "--name",
        "calculator-agent",
        "--agent-config",
        &example("calculator-agent.yaml"),
    ]);
    assert_eq!(code, 0, "{created}");
    let (_, agents) = home.json(&["agents"]);
    let agent = &agents["agents"][0];
    assert_eq!(agent["metadata"]["name"], "calculator-agent");
    assert_eq!(agent["spec"]["config"]["default_harness"], "deepagents");
    assert!(agent["spec"].get("runtime").is_none(), "{agent}");
    let (code, answer) = home.json(&[
        "execute",
        "--agent",
        "default/calculator-agent",
        "--input",
        "What is 12 multiplied by 8?",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], "96");
    // A manifest is not a bare config, and a config the schema refuses names its field.
    let create = |config: &str| {
        refusal(
            &home,
            &["agents", "create", "--name", "x", "--agent-config", config],
        )
    };
    let (code, message) = create(&example("agent.yaml"));
    assert_eq!(code, 2);
    assert!(message.contains("takes a bare agent config"), "{message}");
    let bad = home.write("bad.yaml", "config_format: yaml-v9\nname: x\n");
    let (_, message) = create(bad.to_str().unwrap());
    assert!(
        message.contains("spec.config.config_format: Unsupported value: \"yaml-v9\""),
        "{message}"
    );
}

/// Pushes directory `dir` (with `files`) as Fileset `name`.
fn push(home: &Home, name: &str, files: &[(&str, &str)]) {
    for (path, text) in files {
        home.write(&format!("{name}/{path}"), text);
    }
    let dir = home.path().join(name);
    let (code, answer) = home.json(&["filesets", "push", name, dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{answer}");
}

/// An Agent `name` running `sh -c script`.
fn shell_agent(home: &Home, name: &str, script: &str) {
    let manifest = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": name},
        "spec": {"runtime": {"image": "busybox", "command": ["sh", "-c", script]},
                 "config": {"config_format": "nemo-agents-spec-v1", "name": name}},
    });
    let file = home.write(&format!("{name}.json"), &manifest.to_string());
    applied(home, file.to_str().unwrap());
}

#[test]
fn the_documented_run_yaml_stages_its_workdir_and_flags_override_it() {
    let home = Home::new();
    push(&home, "project-source", &[("README.md", "the project\n")]);
    push(
        &home,
        "config-artifact",
        &[("config.yaml", "depth: 3\n"), ("other.yaml", "x\n")],
    );
    shell_agent(
        &home,
        "research-agent",
        "cat README.md app/config.yaml; ls app; printf '%s\\n' \"$ERRAND_INPUT\" > \"$ERRAND_RESPONSE_FILE\"; sleep \"${NAP:-0}\"",
    );
    let run = example("run.yaml");
    let (code, answer) = home.json(&["execute", "--spec-file", &run]);
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(execution["response"], "Summarize the project.");
    let name = execution["name"].as_str().unwrap();
    assert!(name.starts_with("research-agent-"), "{name}");
    let staged = tar_files(&home.download("input_workdir", name));
    assert_eq!(staged["README.md"], "the project\n");
    assert_eq!(staged["app/config.yaml"], "depth: 3\n");
    assert!(!staged.contains_key("app/other.yaml"), "{staged:?}");

    // Flags override the file: the input, and the timeout (600 s in the file).
    let (code, answer) = home.json(&[
        "execute",
        "--spec-file",
        &run,
        "--input",
        "Only the README.",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], "Only the README.");
    let slow = home.write(
        "slow.yaml",
        &std::fs::read_to_string(&run)
            .unwrap()
            .replace("agent: research-agent", "agent: slow-agent"),
    );
    shell_agent(&home, "slow-agent", "sleep 30");
    let (code, answer) = home.json(&[
        "execute",
        "--spec-file",
        slow.to_str().unwrap(),
        "--timeout-seconds",
        "1",
    ]);
    assert_eq!(code, 1, "{answer}");
    assert_eq!(answer["error"]["code"], "execution_failed", "{answer}");
}

#[test]
fn the_inline_nemo_agent_runs_with_the_runtime_of_its_harness_kind() {
    let home = home_with_runtime();
    let config: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(example("calculator-agent.yaml")).unwrap())
            .unwrap();
    let spec = json!({
        "agent": {"config_format": "nemo-agents-spec-v1", "config": config},
        "input": "What is 7 plus 5?",
    });
    let (code, answer) = home.json(&["execute", "--spec", &spec.to_string()]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], "12");
    assert_eq!(answer["execution"]["agent"], "calculator-agent");
}

#[test]
fn an_environment_by_workspace_name_must_be_in_the_target_namespace() {
    let home = home_with_runtime();
    applied(&home, &example("agent.yaml"));
    let environment = home.write(
        "research.yaml",
        "apiVersion: errand.dev/v1alpha1\nkind: AgentEnvironment\nmetadata: {name: research}\n\
         spec: {overlay: {env: {DEPTH: '3'}}}\n",
    );
    applied(&home, environment.to_str().unwrap());
    let ask = [
        "--agent",
        "calculator-agent",
        "--input",
        "What is 2 plus 2?",
    ];
    let mut args = vec!["execute", "--environment", "default/research"];
    args.extend(ask);
    let (code, answer) = home.json(&args);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], "4");

    let mut args = vec!["execute", "--environment", "other/research"];
    args.extend(ask);
    let message = invalid_spec(&home, &args);
    assert!(
        message.contains("--environment: \"other/research\" names workspace \"other\"; the target namespace is \"default\""),
        "{message}"
    );
    // The same rule in a NeMo job spec names its field, as does an unknown field.
    let spec = json!({"agent": "calculator-agent", "environment": "other/research",
                      "input": "What is 2 plus 2?", "priority": "high"});
    let (_, message) = refusal(&home, &["execute", "--spec", &spec.to_string()]);
    assert!(
        message.contains("environment: \"other/research\" names workspace \"other\"")
            && message.contains("priority: unknown field \"priority\" in the NeMo job spec"),
        "{message}"
    );
}

#[test]
fn an_agent_runtime_is_checked_against_its_schema_when_applied() {
    let home = Home::new();
    for (spec, expected) in [
        (
            json!({"harnessKind": "deepagents", "image": "i", "command": ["run"], "configFormats": ["yaml-v9"]}),
            "spec.configFormats[0]: Unsupported value: \"yaml-v9\"",
        ),
        (
            json!({"image": "i", "command": ["run"]}),
            "spec.harnessKind: Required value",
        ),
        (
            json!({"harnessKind": "Deep Agents", "image": "i", "command": ["run"]}),
            "spec.harnessKind: Invalid value: \"Deep Agents\"",
        ),
    ] {
        let manifest = json!({"apiVersion": "errand.dev/v1alpha1", "kind": "AgentRuntime",
                              "metadata": {"name": "bad"}, "spec": spec});
        let file = home.write("bad.json", &manifest.to_string());
        let (code, message) = refusal(&home, &["apply", "-f", file.to_str().unwrap()]);
        assert_eq!(code, 2, "{message}");
        assert!(message.contains(expected), "{expected}: {message}");
    }
    let (_, runtimes) = home.json(&["runtimes"]);
    assert_eq!(runtimes["agentruntimes"], json!([]));
}
