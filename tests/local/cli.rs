//! End-to-end tests of `errand` on the local backend: the real binary, a real file store, real agent processes.

use errand::api::contract::COMPLETED_RUN_RESULTS;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::local::Home;
use crate::support::store::tar_files;
use serde_json::{Value, json};

/// What these tests add to a [`Home`].
impl Home {
    fn executions_dir(&self) -> PathBuf {
        self.path().join("home/executions/default")
    }
}

fn calculator() -> String {
    format!(
        "{}/examples/calculator/agent.yaml",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn calculator_answers_and_keeps_every_result() {
    let home = Home::new();
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &calculator(),
        "--input",
        "What is 12 multiplied by 8?",
    ]);
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(answer["type"], "execution");
    assert_eq!(execution["phase"], "Succeeded");
    assert_eq!(execution["response"], "96");
    assert_eq!(execution["exit_code"], 0);
    let names: Vec<&str> = execution["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, COMPLETED_RUN_RESULTS);

    let name = execution["name"].as_str().unwrap();
    assert!(name.starts_with("calculator-"), "{name}");
    let run_result: Value = serde_json::from_slice(&home.download("run_result", name)).unwrap();
    assert_eq!(run_result["response"], "96");
    assert_eq!(run_result["exit_code"], 0);
    let artifacts = tar_files(&home.download("output_artifacts", name));
    assert_eq!(artifacts["calculation.txt"], "12 * 8 = 96\n");
    assert!(artifacts["stdout.log"].contains("12 * 8 = 96"));
    let manifest: Value = serde_json::from_slice(&home.download("manifest.json", name)).unwrap();
    let listed = manifest.to_string();
    let sha = execution["results"][3]["sha256"].as_str().unwrap();
    assert!(
        listed.contains(sha),
        "manifest lists run_result's sha256: {listed}"
    );

    // Human output shows the answer too.
    let output = home.run(&[
        "execute",
        "--local",
        "--agent",
        &calculator(),
        "--input",
        "What is 7 plus 5?",
    ]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success() && stdout.contains("response: 12"),
        "{stdout}"
    );
}

#[test]
fn a_closed_stdout_ends_the_command_quietly_and_the_execution_is_kept() {
    use crate::support::local::Closed;
    let home = Home::new();
    let args = [
        "execute",
        "--local",
        "--agent",
        &calculator(),
        "--input",
        "What is 2 plus 3?",
        "-o",
        "json",
    ];
    // `errand … | head -c 0`: the reader is gone before the answer is written.
    let (code, stderr) = home.run_with_stdout_closed(&args, Closed::Reader);
    assert_eq!(code, errand::cli::EXIT_BROKEN_PIPE, "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "a closed stdout is no error to report: {stderr}"
    );
    let (code, listed) = home.json(&["list"]);
    assert_eq!(code, 0, "{listed}");
    assert!(
        listed.to_string().contains("Succeeded"),
        "the execution ran to its end and is kept: {listed}"
    );
}

#[test]
fn a_failing_agent_keeps_results_and_reports_its_stderr() {
    let home = Home::new();
    let agent = home.agent(
        "broken",
        "echo working > progress.txt; echo 'model quota exhausted' >&2; exit 3",
    );
    let (code, answer) = home.json(&["execute", "--local", "--agent", &agent, "--input", "x"]);
    assert_eq!(code, 1);
    assert_eq!(answer["ok"], false);
    assert_eq!(answer["error"]["code"], "execution_failed");
    let execution = &answer["error"]["execution"];
    assert_eq!(execution["phase"], "Failed");
    assert_eq!(execution["reason"], "AgentFailed");
    assert_eq!(execution["exit_code"], 3);
    assert!(
        execution["message"]
            .as_str()
            .unwrap()
            .contains("model quota exhausted"),
        "{execution}"
    );
    let name = execution["name"].as_str().unwrap();
    let run_result: Value = serde_json::from_slice(&home.download("run_result", name)).unwrap();
    assert_eq!(run_result["exit_code"], 3);
    let workdir = tar_files(&home.download("output_workdir", name));
    assert_eq!(workdir["progress.txt"], "working\n");
}

#[test]
fn a_timeout_kills_an_agent_that_ignores_sigterm_and_saves_its_output() {
    let home = Home::new();
    let agent = home.agent(
        "stubborn",
        "trap '' TERM; echo partial > partial.txt; sleep 60",
    );
    let started = Instant::now();
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--input",
        "x",
        "--timeout-seconds",
        "1",
    ]);
    let took = started.elapsed();
    assert_eq!(code, 1, "{answer}");
    assert!(
        took < Duration::from_secs(20),
        "killed after the grace period, took {took:?}"
    );
    let execution = &answer["error"]["execution"];
    assert_eq!(execution["phase"], "Failed");
    assert_eq!(execution["reason"], "DeadlineExceeded");
    assert_eq!(execution["timed_out"], true);
    let name = execution["name"].as_str().unwrap();
    let run_error: Value = serde_json::from_slice(&home.download("run_error", name)).unwrap();
    assert_eq!(run_error["timed_out"], true);
    assert_eq!(
        tar_files(&home.download("output_workdir", name))["partial.txt"],
        "partial\n"
    );
}

fn wait_for_phase(home: &Home, name: &str, phase: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, answer) = home.json(&["status", name]);
        if answer["execution"]["phase"] == phase || Instant::now() > deadline {
            return answer["execution"].clone();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn no_wait_returns_at_once_and_cancel_saves_partial_results() {
    let home = Home::new();
    let agent = home.agent("sleeper", "echo started > started.txt; sleep 60");
    let started = Instant::now();
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--input",
        "x",
        "--no-wait",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let name = answer["execution"]["name"].as_str().unwrap().to_owned();
    assert_eq!(wait_for_phase(&home, &name, "Running")["phase"], "Running");
    // Give the agent a moment to write its file.
    std::thread::sleep(Duration::from_millis(300));

    // The name is accepted by unambiguous prefix.
    let (code, answer) = home.json(&["cancel", &name[..name.len() - 2]]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["phase"], "Cancelled");
    let run_error: Value = serde_json::from_slice(&home.download("run_error", &name)).unwrap();
    assert_eq!(run_error["type"], "Cancelled");
    assert_eq!(
        tar_files(&home.download("output_workdir", &name))["started.txt"],
        "started\n"
    );

    let (code, answer) = home.json(&["cancel", &name]);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (4, Some("already_finished"))
    );
}

#[test]
fn watch_follows_a_background_run_to_its_end() {
    let home = Home::new();
    let agent = home.agent("chatty", "for i in 1 2 3; do echo line-$i; sleep 0.2; done");
    let (_, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--input",
        "x",
        "--no-wait",
    ]);
    let name = answer["execution"]["name"].as_str().unwrap().to_owned();
    let output = home.run(&["watch", &name]);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("line-1\nline-2\nline-3\n") && stdout.contains("Succeeded"),
        "{stdout}"
    );
    let (_, tail) = home.json(&["tail", "--tail", "2", &name]);
    assert_eq!(tail["logs"]["lines"], json!(["line-2", "line-3"]));
}

#[test]
fn delete_removes_the_record_and_the_stored_results() {
    let home = Home::new();
    let name = run_calculator(&home);
    let results_dir = home.path().join("home/store/results/default").join(&name);
    assert!(results_dir.exists());
    let (code, answer) = home.json(&["delete", &name]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["deleted"]["results_removed"], 5);
    assert!(!results_dir.exists());
    let (code, answer) = home.json(&["status", &name]);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (3, Some("not_found"))
    );
}

#[test]
fn ambiguous_prefixes_are_refused() {
    let home = Home::new();
    for _ in 0..2 {
        let (code, _) = home.json(&[
            "execute",
            "--local",
            "--agent",
            &calculator(),
            "--input",
            "What is 1 plus 1?",
        ]);
        assert_eq!(code, 0);
    }
    let (code, answer) = home.json(&["status", "calculator-"]);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (3, Some("ambiguous_name"))
    );
    // It names each match with its phase, newest first, and how to pick one.
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("is ambiguous")
            && message.matches("(Succeeded, created ").count() == 2
            && message.contains("give more of the name, or the whole name (`calculator-"),
        "{message}"
    );
}

#[test]
fn a_targeted_cluster_that_cannot_be_reached_is_an_error_and_nothing_is_written_locally() {
    let home = Home::new();
    let dir = home
        .write("tree/file.txt", "x")
        .parent()
        .unwrap()
        .to_owned();
    let manifest = home.write(
        "fileset.yaml",
        "apiVersion: errand.dev/v1alpha1\nkind: Fileset\nmetadata: {name: pushed}\nspec: {}\n",
    );
    let missing = home.path().join("no-such-kubeconfig");
    // ERRAND_BACKEND=local is set for these tests; --kubeconfig and --context target a cluster
    // all the same.
    for target in [
        vec!["--kubeconfig", missing.to_str().unwrap()],
        vec!["--context", "no-such-context"],
    ] {
        for command in [
            vec!["filesets", "push", "pushed", dir.to_str().unwrap()],
            vec!["apply", "-f", manifest.to_str().unwrap()],
        ] {
            let args: Vec<&str> = target.iter().chain(&command).copied().collect();
            let (code, answer) = home.json(&args);
            assert_eq!(
                (code, answer["error"]["code"].as_str()),
                (2, Some("invalid_argument")),
                "{args:?}: {answer}"
            );
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(target[0]),
                "the refusal names the option: {answer}"
            );
        }
    }
    let (_, listed) = home.json(&["filesets", "list"]);
    assert_eq!(
        listed["filesets"],
        json!([]),
        "nothing went to the local backend"
    );
    let (code, answer) = home.json(&["--local", "--context", "x", "list"]);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (2, Some("invalid_argument")),
        "--local and a cluster target conflict: {answer}"
    );
}

/// The workspace the rejection tests run in: applied agent, environment, secret and filesets.
fn catalog_home() -> Home {
    let home = Home::new();
    let repo = home.path().join("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/main.py"), "print('hi')\n").unwrap();
    let output = home.run(&["filesets", "push", "repo", repo.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let manifests = home.write(
        "catalog.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: model-keys}\nstringData: {openai: sk-test-value}\n---\n\
         apiVersion: errand.dev/v1alpha1\nkind: AgentEnvironment\nmetadata: {name: prod}\n\
         spec: {overlay: {secrets: {OPENAI_API_KEY: 'model-keys#openai'}}}\n",
    );
    let output = home.run(&[
        "apply",
        "-f",
        manifests.to_str().unwrap(),
        "-f",
        &calculator(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    home
}

#[test]
fn every_admission_rejection_is_a_clear_error_and_creates_nothing() {
    let home = catalog_home();
    let spec = |extra: Value| {
        let mut spec = json!({"agentRef": {"name": "calculator"}, "input": "What is 1 plus 1?", "environmentRef": {"name": "prod"}});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec.to_string()
    };
    let environment = |overlay: Value, compute: Value| json!({"environment": {"overlay": overlay, "compute": compute}, "environmentRef": null});
    let cases: Vec<(String, &str)> = vec![
        (
            spec(json!({"agentRef": {"name": "nope"}})),
            "spec.agentRef.name: Agent \"nope\" not found in namespace \"default\"",
        ),
        (
            spec(environment(
                json!({"secrets": {"KEY": "absent#k"}}),
                json!({}),
            )),
            "spec.environment.overlay.secrets.KEY: Secret \"absent\" not found",
        ),
        (
            spec(environment(
                json!({"secrets": {"KEY": "model-keys#nokey"}}),
                json!({}),
            )),
            "Secret \"model-keys\" has no key \"nokey\"",
        ),
        (
            spec(json!({"workdir": {"base": "missing"}})),
            "spec.workdir.base: Fileset \"missing\" not found",
        ),
        (
            spec(environment(
                json!({}),
                json!({"resources": {"limits": {"ephemeral-storage": "1Gi"}}}),
            )),
            // The CRD's CEL rules refuse first, as the API server does before the webhook.
            "spec.environment.compute.resources.limits: \"ephemeral-storage\" is not allowed; only cpu, memory and nvidia.com/gpu may be set",
        ),
        (
            spec(environment(
                json!({"secrets": {"AGENT_CONFIG_PATH": "model-keys#openai"}}),
                json!({}),
            )),
            "spec.environment.overlay.secrets: \"AGENT_CONFIG_PATH\" is reserved: ERRAND_* and AGENT_CONFIG_PATH are reserved",
        ),
        (
            spec(
                json!({"workdir": {"artifactMounts": [{"ref": "repo", "mountPath": "a"}, {"ref": "repo", "mountPath": "a/b"}]}}),
            ),
            "spec.workdir.artifactMounts: mount paths must not overlap",
        ),
        (
            spec(json!({"workdir": {"artifactMounts": [{"ref": "repo", "mountPath": "../x"}]}})),
            "spec.workdir.artifactMounts[0].mountPath: mountPath must not contain '.' or '..' segments",
        ),
        (
            spec(json!({"agentRef": {"name": "calculator", "namespace": "other"}})),
            "spec.agentRef.namespace: \"other\" is another namespace",
        ),
        (
            spec(
                json!({"agentRef": null, "agent": {"runtime": {"image": "i", "command": ["x"]}, "config": {"config_format": "yaml-v9"}}}),
            ),
            "spec.agent.config.config_format: Unsupported value: \"yaml-v9\"",
        ),
    ];
    for (spec, expected) in cases {
        let (code, answer) = home.json(&["execute", "--local", "--spec", &spec]);
        assert_eq!(code, 2, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_spec");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}"
        );
        assert!(answer["error"]["problems"][0]["field"].is_string());
    }
    assert!(
        !home.executions_dir().exists()
            || std::fs::read_dir(home.executions_dir()).unwrap().count() == 0
    );
    let (_, list) = home.json(&["list"]);
    assert_eq!(list["executions"], json!([]));

    // Human output, on stderr: `--agent` names no file, so it was taken for a name, and no
    // Agent has it; the ones that exist are listed (exit code 3, not_found).
    let output = home.run(&["execute", "--local", "--agent", "nope", "--input", "x"]);
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "error[not_found]: --agent nope: no file nope exists, so it was taken for a name: Agent \"nope\" not found in namespace \"default\"; the Agents in namespace \"default\": calculator\n"
    );
}

#[test]
fn secrets_reach_the_agent_but_never_the_record_or_results() {
    let home = catalog_home();
    let agent = home.agent(
        "echoer",
        "printf '%s' \"$OPENAI_API_KEY\" > \"$ERRAND_ARTIFACTS_DIR/seen.txt\"; echo done",
    );
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--environment",
        "prod",
        "--input",
        "x",
    ]);
    assert_eq!(code, 0, "{answer}");
    let name = answer["execution"]["name"].as_str().unwrap();
    assert!(!answer.to_string().contains("sk-test-value"));
    let artifacts = tar_files(&home.download("output_artifacts", name));
    assert_eq!(
        artifacts["seen.txt"], "sk-test-value",
        "the agent got the value"
    );
    let dir = home.executions_dir().join(name);
    for file in ["record.json", "snapshot.json", "agent-config.json"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(
            !text.contains("sk-test-value"),
            "{file} holds a secret value"
        );
    }
    let snapshot = std::fs::read_to_string(dir.join("snapshot.json")).unwrap();
    assert!(snapshot.contains("\"secret\":\"model-keys\""), "{snapshot}");
}

#[test]
fn workdir_base_and_mounts_are_staged_and_recorded() {
    let home = catalog_home();
    let data = home.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("numbers.txt"), "1 2 3\n").unwrap();
    let output = home.run(&["filesets", "push", "data", data.to_str().unwrap()]);
    assert!(output.status.success());
    let agent = home.agent("lister", "find . -type f | sort");
    let spec = json!({"workdir": {"base": "repo#src/", "artifactMounts": [{"ref": "data", "mountPath": "inputs/data"}]}});
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--spec",
        &spec.to_string(),
        "--input",
        "x",
    ]);
    assert_eq!(code, 0, "{answer}");
    let name = answer["execution"]["name"].as_str().unwrap();
    let staged = tar_files(&home.download("input_workdir", name));
    assert_eq!(staged["main.py"], "print('hi')\n");
    assert_eq!(staged["inputs/data/numbers.txt"], "1 2 3\n");
    assert_eq!(
        answer["execution"]["response"],
        "./inputs/data/numbers.txt\n./main.py".to_string()
    );
}

#[test]
fn agents_are_immutable_and_bad_manifests_are_refused_whole() {
    let home = catalog_home();
    let changed = std::fs::read_to_string(calculator())
        .unwrap()
        .replace("Answers arithmetic questions.", "Changed.");
    let file = home.write("changed.yaml", &changed);
    let (code, answer) = home.json(&["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Agent \"calculator\": spec is immutable")
    );

    let mixed = home.write("mixed.yaml", "apiVersion: errand.dev/v1alpha1\nkind: Fileset\nmetadata: {name: fresh}\nspec: {}\n---\nkind: Deployment\napiVersion: apps/v1\n");
    let (code, answer) = home.json(&["apply", "-f", mixed.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("document 2"),
        "{answer}"
    );
    let (_, filesets) = home.json(&["filesets", "list"]);
    let names: Vec<&str> = filesets["filesets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["repo"], "nothing from the refused file was applied");
}

/// The one JSON error a refused command prints, with its exit code.
fn refusal(home: &Home, args: &[&str]) -> (i32, String, String) {
    let (code, answer) = home.json(args);
    assert_eq!(answer["ok"], false, "{args:?} was accepted: {answer}");
    (
        code,
        answer["error"]["code"].as_str().unwrap().to_owned(),
        answer["error"]["message"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn spec_type_errors_and_unknown_fields_name_their_field() {
    let home = catalog_home();
    let (code, error, message) = refusal(
        &home,
        &[
            "execute",
            "--spec",
            r#"{"agentRef": {"name": "calculator"}, "timeoutSeconds": "30"}"#,
        ],
    );
    assert_eq!((code, error.as_str()), (2, "invalid_spec"));
    assert!(
        message.contains(r#"spec.timeoutSeconds: invalid type: string "30", expected an integer"#),
        "{message}"
    );

    // A misspelled field is refused, not dropped (it ran on the 3600 s default before); mixed
    // with a NeMo job spec's field, the CRD's is the one unknown.
    let file = home.write(
        "typo.yaml",
        "agentRef: {name: calculator}\ninput: x\ntimeOut: 1\n",
    );
    let (code, _, message) = refusal(&home, &["execute", "--spec-file", file.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        message.contains(r#"spec.timeOut: unknown field "timeOut""#),
        "{message}"
    );
    let file = home.write(
        "mixed.yaml",
        "agentRef: {name: calculator}\ninput: x\ntimeout_seconds: 1\n",
    );
    let (code, _, message) = refusal(&home, &["execute", "--spec-file", file.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        message.contains(r#"agentRef: unknown field "agentRef" in the NeMo job spec"#),
        "{message}"
    );
    let manifest = home.write(
        "execution.yaml",
        "apiVersion: errand.dev/v1alpha1\nkind: AgentExecution\nmetadata: {name: typo}\n\
         spec: {agentRef: {name: calculator}, input: x, workdir: {bse: repo}}\n",
    );
    let (_, _, message) = refusal(
        &home,
        &["execute", "--spec-file", manifest.to_str().unwrap()],
    );
    assert!(
        message.contains(r#"spec.workdir.bse: unknown field "bse""#),
        "{message}"
    );

    // The same in an applied manifest and in an agent file, where `config` keeps its own
    // unknown fields verbatim but the runtime does not.
    let agent = home.write(
        "agent.yaml",
        "apiVersion: errand.dev/v1alpha1\nkind: Agent\nmetadata: {name: typo}\n\
         spec: {runtime: {image: i, command: [sh], entrypoint: [x]}, config: {config_format: agents-spec-v1, anything: 1}}\n",
    );
    for args in [
        vec!["apply", "-f", agent.to_str().unwrap()],
        vec![
            "execute",
            "--agent",
            agent.to_str().unwrap(),
            "--input",
            "x",
        ],
    ] {
        let (code, error, message) = refusal(&home, &args);
        assert_eq!((code, error.as_str()), (2, "invalid_manifest"), "{args:?}");
        assert!(
            message.contains(r#"spec.runtime.entrypoint: unknown field "entrypoint""#)
                && !message.contains("anything"),
            "{message}"
        );
    }
    assert_eq!(
        std::fs::read_dir(home.executions_dir())
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
}

#[test]
fn an_oversize_spec_file_or_manifest_is_refused_unread_naming_the_limit() {
    let home = Home::new();
    let huge = home.path().join("huge.yaml");
    // 5 GB without using the disk: a sparse file.
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(5_000_000_000)
        .unwrap();
    let huge = huge.to_str().unwrap();
    for args in [
        vec!["execute", "--spec-file", huge],
        vec!["apply", "-f", huge],
        vec!["execute", "--agent", huge, "--input", "x"],
    ] {
        let started = Instant::now();
        let (code, error, message) = refusal(&home, &args);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?} took {:?}",
            started.elapsed()
        );
        assert_eq!((code, error.as_str()), (2, "invalid_manifest"), "{args:?}");
        assert!(message.contains("3 MiB"), "{message}");
    }
}

#[test]
fn argument_errors_with_json_output_are_one_json_error() {
    let home = Home::new();
    for args in [
        &["status"][..],
        &["execute", "--timeout-seconds", "abc"],
        &["--bogus"],
    ] {
        let (code, error, message) = refusal(&home, args);
        assert_eq!((code, error.as_str()), (2, "invalid_argument"), "{args:?}");
        assert!(!message.contains("Usage"), "{message}");
    }
    // Without -o json, people get clap's usage text.
    let output = home.run(&["status"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("Usage"));
}

#[test]
fn quantities_are_read_as_kubernetes_reads_them() {
    let home = catalog_home();
    let spec = json!({"agentRef": {"name": "calculator"}, "input": "What is 2 plus 2?",
        "environment": {"compute": {"resources": {"limits": {"cpu": "1e3", "memory": "1.5Gi", "nvidia.com/gpu": 1}, "requests": {"cpu": "100m", "nvidia.com/gpu": "1"}}}}});
    let (code, answer) = home.json(&["execute", "--spec", &spec.to_string()]);
    assert_eq!(code, 0, "{answer}");
    let bad = json!({"agentRef": {"name": "calculator"}, "input": "x",
        "environment": {"compute": {"resources": {"limits": {"cpu": "abc"}}}}});
    let (code, _, message) = refusal(&home, &["execute", "--spec", &bad.to_string()]);
    assert_eq!(code, 2);
    assert!(
        message.contains(
            "\"cpu\": \"abc\" is not a valid amount; amounts must be non-negative quantities"
        ),
        "{message}"
    );
}

#[test]
fn apply_is_all_or_nothing() {
    let home = Home::new();
    let mixed = home.write(
        "mixed.yaml",
        "apiVersion: errand.dev/v1alpha1\nkind: Agent\nmetadata: {name: good}\n\
         spec: {runtime: {image: i, command: [sh]}, config: {config_format: agents-spec-v1}}\n---\n\
         apiVersion: errand.dev/v1alpha1\nkind: AgentEnvironment\nmetadata: {name: Bad_Name}\nspec: {}\n",
    );
    let (code, error, message) = refusal(&home, &["apply", "-f", mixed.to_str().unwrap()]);
    assert_eq!((code, error.as_str()), (2, "invalid_manifest"));
    assert!(message.contains("document 2"), "{message}");
    let (_, agents) = home.json(&["agents"]);
    assert_eq!(
        agents["agents"],
        json!([]),
        "the valid Agent was not stored"
    );

    // An Agent applied twice in one go with two specs is refused whole too.
    let twice = home.write(
        "twice.yaml",
        "apiVersion: errand.dev/v1alpha1\nkind: Agent\nmetadata: {name: a}\n\
         spec: {runtime: {image: one, command: [sh]}, config: {config_format: agents-spec-v1}}\n---\n\
         apiVersion: errand.dev/v1alpha1\nkind: Agent\nmetadata: {name: a}\n\
         spec: {runtime: {image: two, command: [sh]}, config: {config_format: agents-spec-v1}}\n",
    );
    let (_, _, message) = refusal(&home, &["apply", "-f", twice.to_str().unwrap()]);
    assert!(message.contains("spec is immutable"), "{message}");
    let (_, agents) = home.json(&["agents"]);
    assert_eq!(agents["agents"], json!([]));
}

#[test]
fn apply_refuses_what_the_cluster_crds_refuse_with_their_messages() {
    let home = Home::new();
    let environment = |spec: &str| {
        format!(
            "apiVersion: errand.dev/v1alpha1\nkind: AgentEnvironment\nmetadata: {{name: e}}\nspec: {spec}\n"
        )
    };
    let cases = [
        (
            environment("{compute: {resources: {limits: {ephemeral-storage: 1Gi}}}}"),
            "spec.compute.resources.limits: \"ephemeral-storage\" is not allowed; only cpu, memory and nvidia.com/gpu may be set",
        ),
        (
            environment("{compute: {resources: {requests: {cpu: abc}}}}"),
            "spec.compute.resources.requests: \"cpu\": \"abc\" is not a valid amount; amounts must be non-negative quantities, such as 500m, 2 or 4Gi",
        ),
        (
            environment("{overlay: {env: {ERRAND_INPUT: x}}}"),
            "spec.overlay.env: \"ERRAND_INPUT\" is reserved: ERRAND_* and AGENT_CONFIG_PATH are reserved for errand's runner",
        ),
        (
            "apiVersion: errand.dev/v1alpha1\nkind: Agent\nmetadata: {name: a}\n\
             spec: {runtime: {image: i, command: [sh]}, config: {config_format: yaml-v9}}\n"
                .to_owned(),
            "spec.config.config_format: Unsupported value: \"yaml-v9\": supported values: \"agents-spec-v1\", \"nemo-agents-spec-v1\"",
        ),
    ];
    for (index, (text, expected)) in cases.iter().enumerate() {
        let file = home.write(&format!("bad-{index}.yaml"), text);
        let (code, error, message) = refusal(&home, &["apply", "-f", file.to_str().unwrap()]);
        assert_eq!((code, error.as_str()), (2, "invalid_manifest"));
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}"
        );
    }
    let (_, environments) = home.json(&["environments"]);
    assert_eq!(environments["agentenvironments"], json!([]));
}

#[test]
fn every_valid_kubernetes_name_works_and_leaves_no_temporary_file() {
    let home = Home::new();
    let long = |c: char| format!("{}{}", c, "x".repeat(252));
    let agent_name = long('a');
    let agent = home.write(
        "long.yaml",
        &format!(
            "apiVersion: errand.dev/v1alpha1\nkind: Agent\nmetadata: {{name: {agent_name}}}\n\
             spec: {{runtime: {{image: i, command: [sh, -c, 'echo ok']}}, config: {{config_format: agents-spec-v1}}}}\n"
        ),
    );
    let (code, answer) = home.json(&["apply", "-f", agent.to_str().unwrap()]);
    assert_eq!(code, 0, "{answer}");
    let dir = home.path().join("tree");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f.txt"), "f").unwrap();
    let fileset = long('f');
    let (code, answer) = home.json(&["filesets", "push", &fileset, dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{answer}");
    let execution = long('e');
    let (code, answer) = home.json(&[
        "execute",
        "--agent",
        &agent_name,
        "--workdir.base-workdir",
        &fileset,
        "--name",
        &execution,
        "--input",
        "x",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["name"], execution);
    let (_, listed) = home.json(&["agents"]);
    assert_eq!(listed["agents"][0]["metadata"]["name"], agent_name);

    // Nothing half-written is left anywhere in the data directory.
    let mut pending = vec![home.path().join("home")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(!name.starts_with(".tmp"), "left behind: {}", path.display());
            if path.is_dir() {
                pending.push(path);
            }
        }
    }
}

#[test]
fn reusing_an_execution_name_is_already_exists_naming_it() {
    let home = Home::new();
    let args = [
        "execute",
        "--agent",
        &calculator(),
        "--input",
        "What is 1 plus 1?",
        "--name",
        "once",
    ];
    let (code, answer) = home.json(&args);
    assert_eq!(code, 0, "{answer}");
    let (code, error, message) = refusal(&home, &args);
    assert_eq!((code, error.as_str()), (4, "already_exists"));
    assert!(
        message.contains("execution \"once\" already exists"),
        "{message}"
    );
    assert!(
        !message.contains(home.path().to_str().unwrap()),
        "{message}"
    );
}

#[test]
fn an_execution_created_cancelled_is_refused_and_creates_nothing() {
    let home = catalog_home();
    let spec = json!({"agentRef": {"name": "calculator"}, "input": "x", "cancel": true});
    let (code, answer) = home.json(&["execute", "--spec", &spec.to_string()]);
    assert_eq!(code, 2, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_spec");
    assert_eq!(answer["error"]["problems"][0]["field"], "spec.cancel");
    assert_eq!(
        answer["error"]["problems"][0]["message"],
        errand::resolve::CANCELLED_AT_CREATION
    );
    let (_, list) = home.json(&["list"]);
    assert_eq!(list["executions"], json!([]));
}

#[test]
fn a_missing_base_workdir_directory_says_it_does_not_exist() {
    let home = Home::new();
    let (code, error, message) = refusal(
        &home,
        &[
            "execute",
            "--agent",
            &calculator(),
            "--input",
            "x",
            "--workdir.base-workdir",
            "/no/such/dir",
        ],
    );
    assert_eq!((code, error.as_str()), (2, "invalid_argument"));
    assert!(
        message.contains("/no/such/dir: the directory does not exist"),
        "{message}"
    );
}

#[test]
fn local_agents_get_a_clean_environment_unless_the_caller_opts_in() {
    let home = Home::new();
    let agent = home.agent(
        "envy",
        "echo \"leak=${LEAK_ME:-unset} errand_home=${ERRAND_HOME:-unset} home=${HOME:+set} path=${PATH:+set} input=$ERRAND_INPUT\"",
    );
    let run = |extra: &[&str]| {
        let mut args = vec!["execute", "--agent", &agent, "--input", "hi", "-o", "json"];
        args.extend(extra);
        let output = home
            .command(&args)
            .env("LEAK_ME", "caller-secret")
            .output()
            .unwrap();
        let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
        answer["execution"]["response"]
            .as_str()
            .unwrap()
            .trim()
            .to_owned()
    };
    assert_eq!(
        run(&[]),
        "leak=unset errand_home=unset home=set path=set input=hi"
    );
    assert_eq!(
        run(&["--inherit-env"]),
        "leak=caller-secret errand_home=unset home=set path=set input=hi"
    );
}

#[test]
fn local_secrets_snapshots_and_records_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let home = catalog_home();
    let inline = home.write(
        "inline.yaml",
        "apiVersion: errand.dev/v1alpha1\nkind: Agent\nmetadata: {name: inline}\n\
         spec: {runtime: {image: i, command: [sh, -c, 'echo ok']}, config: {config_format: agents-spec-v1, env: {OPENAI_API_KEY: sk-inline}}}\n",
    );
    let (code, answer) = home.json(&[
        "execute",
        "--agent",
        inline.to_str().unwrap(),
        "--input",
        "x",
        "--name",
        "private",
    ]);
    assert_eq!(code, 0, "{answer}");
    let data = home.path().join("home");
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let run = data.join("executions/default/private");
    for file in [
        data.join("catalog/default/secrets/model-keys/object.json"),
        run.join("snapshot.json"),
        run.join("agent-config.json"),
        run.join("record.json"),
    ] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    for dir in [
        data.clone(),
        data.join("catalog/default/secrets"),
        data.join("executions/default"),
        run,
    ] {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    }
}

#[test]
fn a_killed_supervisor_is_reported_lost_and_watch_ends() {
    let home = Home::new();
    let agent = home.agent("orphan", "echo $$ > agent.pid; exec sleep 30");
    let (code, answer) = home.json(&["execute", "--agent", &agent, "--input", "x", "--no-wait"]);
    assert_eq!(code, 0, "{answer}");
    let name = answer["execution"]["name"].as_str().unwrap().to_owned();
    let running = wait_for_phase(&home, &name, "Running");
    let supervisor = running["supervisor"]["pid"]
        .as_i64()
        .expect("the supervisor is recorded");
    assert!(running["supervisor"]["start_time"].is_u64(), "{running}");
    let agent_pid = home
        .executions_dir()
        .join(&name)
        .join("workspace/agent.pid");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !agent_pid.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let kill = |pid: i64| {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    };
    kill(supervisor);
    if let Ok(pid) = std::fs::read_to_string(&agent_pid) {
        kill(pid.trim().parse().unwrap());
    }
    // The killed supervisor was our child's child: it is reaped by init, not by us.
    std::thread::sleep(Duration::from_millis(300));

    let started = Instant::now();
    let output = home.run(&["watch", &name, "-o", "json"]);
    assert!(started.elapsed() < Duration::from_secs(10), "watch ended");
    assert_eq!(output.status.code(), Some(1));
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    let execution = &answer["error"]["execution"];
    assert_eq!(
        (execution["phase"].as_str(), execution["reason"].as_str()),
        (Some("Failed"), Some("SupervisorLost")),
        "{answer}"
    );
    let (_, status) = home.json(&["status", &name]);
    assert_eq!(status["execution"]["reason"], "SupervisorLost");
    let (_, list) = home.json(&["list"]);
    assert_eq!(list["executions"][0]["phase"], "Failed");
}

#[test]
fn a_refused_execution_takes_back_the_workdir_it_pushed() {
    let home = Home::new();
    let dir = home.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "n").unwrap();
    let (code, error, _) = refusal(
        &home,
        // The missing Agent is in the spec, so that the refusal comes after the push (a
        // missing `--agent` is refused before anything is pushed).
        &[
            "execute",
            "--spec",
            r#"{"agentRef": {"name": "no-such-agent"}, "input": "x"}"#,
            "--workdir.base-workdir",
            dir.to_str().unwrap(),
        ],
    );
    assert_eq!((code, error.as_str()), (2, "invalid_spec"));
    let (_, filesets) = home.json(&["filesets", "list"]);
    assert_eq!(
        filesets["filesets"],
        json!([]),
        "no workdir Fileset is left"
    );
    let blobs = home.path().join("home/store/filesets/default");
    let left = std::fs::read_dir(&blobs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "no blob is left in {}", blobs.display());
}

#[test]
fn a_push_that_cannot_record_its_fileset_leaves_no_blob() {
    let home = Home::new();
    let dir = home.path().join("tree");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f.txt"), "f").unwrap();
    // The catalog's Fileset directory is a file: the blob goes in, then the entry cannot
    // (not even for root).
    home.write("home/catalog/default/filesets", "in the way");
    let (code, error, _) = refusal(&home, &["filesets", "push", "data", dir.to_str().unwrap()]);
    assert_eq!((code, error.as_str()), (4, "io_error"));
    let blobs = home.path().join("home/store/filesets/default");
    let left = std::fs::read_dir(&blobs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "no blob is left in {}", blobs.display());
}

/// Runs the calculator once in the foreground; returns the execution's name.
fn run_calculator(home: &Home) -> String {
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &calculator(),
        "--input",
        "What is 2 plus 2?",
    ]);
    assert_eq!(code, 0, "{answer}");
    answer["execution"]["name"].as_str().unwrap().to_owned()
}

/// The executions with a directory and the executions with stored results, each sorted.
fn on_disk(home: &Home) -> (Vec<String>, Vec<String>) {
    let names = |dir: PathBuf| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    (
        names(home.executions_dir()),
        names(home.path().join("home/store/results/default")),
    )
}

fn sorted(names: &[&String]) -> Vec<String> {
    let mut names: Vec<String> = names.iter().map(|n| (*n).clone()).collect();
    names.sort();
    names
}

/// Fields `a` and `b` of each object in the array `list`.
fn pairs(list: &Value, a: &str, b: &str) -> Vec<(String, String)> {
    let field = |item: &Value, name: &str| item[name].as_str().unwrap().to_owned();
    list.as_array()
        .unwrap()
        .iter()
        .map(|item| (field(item, a), field(item, b)))
        .collect()
}

/// The executions a gc removed (or would), with why, oldest first.
fn collected(answer: &Value) -> Vec<(String, String)> {
    pairs(&answer["gc"]["removed"], "name", "reason")
}

#[test]
fn gc_collects_finished_executions_by_count_age_and_size_and_a_dry_run_removes_nothing() {
    let home = Home::new();
    let [first, second, third] = [(); 3].map(|()| run_calculator(&home));
    let sleeper = home.agent("sleeper", "sleep 60");
    let (_, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &sleeper,
        "--input",
        "x",
        "--no-wait",
    ]);
    let running = answer["execution"]["name"].as_str().unwrap().to_owned();
    wait_for_phase(&home, &running, "Running");
    // The runner saves input_workdir once it has staged, after the record says Running.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !on_disk(&home).1.contains(&running) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let everything = on_disk(&home);
    assert_eq!(everything.0, sorted(&[&first, &second, &third, &running]));

    // A dry run reports the two oldest finished and removes nothing.
    let (code, answer) = home.json(&["gc", "--max-executions", "1", "--dry-run"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["gc"]["dry_run"], true);
    let oldest_two = vec![
        (first.clone(), "max_executions".to_owned()),
        (second.clone(), "max_executions".to_owned()),
    ];
    assert_eq!(collected(&answer), oldest_two);
    assert!(answer["gc"]["removed_bytes"].as_u64().unwrap() > 0);
    assert_eq!(on_disk(&home), everything, "a dry run removes nothing");

    // The same limit for real: the newest finished and the running one remain.
    let (code, answer) = home.json(&["gc", "--max-executions", "1"]);
    assert_eq!((code, collected(&answer)), (0, oldest_two));
    assert_eq!(
        on_disk(&home),
        (sorted(&[&third, &running]), sorted(&[&third, &running])),
        "records and results of the collected executions are gone"
    );

    // A size budget of nothing takes every finished execution, never a running one.
    let (_, answer) = home.json(&["gc", "--max-bytes", "0"]);
    assert_eq!(collected(&answer), vec![(third, "max_bytes".to_owned())]);
    assert_eq!(on_disk(&home).0, vec![running.clone()]);
    assert_eq!(answer["gc"]["kept"], 1);

    // Once it finishes, an age collects it.
    home.json(&["cancel", &running]);
    let (_, answer) = home.json(&["gc", "--older-than", "0s"]);
    assert_eq!(collected(&answer), vec![(running, "older_than".to_owned())]);
    assert_eq!(on_disk(&home), (vec![], vec![]));
    let (_, answer) = home.json(&["gc", "--older-than", "7d"]);
    assert_eq!(collected(&answer), vec![], "nothing is a week old");
}

#[test]
fn the_automatic_gc_is_set_once_and_runs_before_every_local_execution() {
    let home = Home::new();
    let (code, answer) = home.json(&["gc", "--automatic", "--max-executions", "1"]);
    assert_eq!(code, 0, "{answer}");
    let first = run_calculator(&home);
    let second = run_calculator(&home);
    assert_eq!(
        on_disk(&home).0,
        sorted(&[&first, &second]),
        "the gc before the second run kept the one finished then"
    );
    let third = run_calculator(&home);
    assert_eq!(
        on_disk(&home),
        (sorted(&[&second, &third]), sorted(&[&second, &third])),
        "the gc before the third run took the first"
    );
    // `errand gc` without limits applies the automatic ones.
    let (_, answer) = home.json(&["gc", "--dry-run"]);
    assert_eq!(
        collected(&answer),
        vec![(second.clone(), "max_executions".to_owned())]
    );

    let (code, _) = home.json(&["gc", "--no-automatic"]);
    assert_eq!(code, 0);
    let fourth = run_calculator(&home);
    assert_eq!(on_disk(&home).0, sorted(&[&second, &third, &fourth]));
}

#[test]
fn gc_refuses_bad_limits_naming_them() {
    let home = Home::new();
    for (args, named) in [
        (vec!["gc", "--older-than", "7y"], "--older-than"),
        (vec!["gc", "--max-bytes", "10P"], "--max-bytes"),
        (vec!["gc", "--max-executions=-1"], "--max-executions"),
        (vec!["gc"], "--older-than, --max-executions or --max-bytes"),
        (vec!["gc", "--automatic"], "--automatic"),
    ] {
        let output = home.run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_ne!(output.status.code(), Some(0), "{args:?} was accepted");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
}

/// Pushes `text` as the only file of Fileset `name`; returns its digest's hex.
fn push_fileset(home: &Home, name: &str, text: &str) -> String {
    let dir = home.path().join(format!("tree-{name}-{}", text.len()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), text).unwrap();
    let (code, answer) = home.json(&["filesets", "push", name, dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{answer}");
    let digest = answer["fileset"]["status"]["digest"].as_str().unwrap();
    digest.strip_prefix("sha256:").unwrap().to_owned()
}

/// Every key in the local store, sorted.
fn store_keys(home: &Home) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, keys: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, keys);
            } else {
                keys.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let root = home.path().join("home/store");
    let mut keys = Vec::new();
    walk(&root, &root, &mut keys);
    keys.sort();
    keys
}

/// The groups a sweep removed (or would), by kind and id, sorted.
fn swept(answer: &Value) -> Vec<(String, String)> {
    let mut groups = pairs(&answer["sweep"]["groups"], "kind", "id");
    groups.sort();
    groups
}

#[test]
fn the_store_sweep_removes_only_what_nothing_references_after_the_grace_period() {
    let home = Home::new();
    // Execution A stages Fileset ws at its first content, which a second push then replaces:
    // only A's snapshot pins the first blob.
    let first = push_fileset(&home, "ws", "first");
    let spec = json!({"workdir": {"base": "ws"}});
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &calculator(),
        "--input",
        "What is 1 plus 1?",
        "--spec",
        &spec.to_string(),
    ]);
    assert_eq!(code, 0, "{answer}");
    let pinning = answer["execution"]["name"].as_str().unwrap().to_owned();
    let second = push_fileset(&home, "ws", "second content");
    // A blob whose Fileset is deleted, the results of an execution whose record is lost, an
    // upload that never finished, and a key outside the layout.
    let dropped = push_fileset(&home, "dropped", "gone soon");
    home.json(&["filesets", "delete", "dropped"]);
    let orphan = run_calculator(&home);
    let (_, answer) = home.json(&["status", &orphan]);
    let orphan_uid = answer["execution"]["uid"].as_str().unwrap().to_owned();
    std::fs::remove_dir_all(home.executions_dir().join(&orphan)).unwrap();
    let store = home.path().join("home/store");
    std::fs::create_dir_all(store.join("uploads/default")).unwrap();
    std::fs::write(store.join("uploads/default/4242-1-0.tar.gz"), "partial").unwrap();
    let partial = format!("results/default/{orphan}/{orphan_uid}/output_workdir.4242-1-1");
    std::fs::create_dir_all(store.join("partial").join(&partial).parent().unwrap()).unwrap();
    std::fs::write(store.join("partial").join(&partial), "cut off").unwrap();
    std::fs::write(store.join("README.txt"), "the operator's note").unwrap();
    std::fs::write(store.join("filesets/default/README.txt"), "another note").unwrap();
    let before = store_keys(&home);

    // Everything is younger than the default grace period: nothing goes.
    let (code, answer) = home.json(&["admin", "sweep-store", "--dry-run"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(swept(&answer), vec![]);
    assert_eq!(answer["sweep"]["in_grace"], 4);
    assert_eq!(answer["sweep"]["unknown_keys"], 1);

    let unreferenced = vec![
        ("fileset".to_owned(), dropped.clone()),
        ("partial".to_owned(), partial),
        ("results".to_owned(), orphan_uid.clone()),
        ("upload".to_owned(), "4242-1-0".to_owned()),
    ];
    let (_, answer) = home.json(&["admin", "sweep-store", "--grace", "0", "--dry-run"]);
    assert_eq!(swept(&answer), unreferenced);
    assert_eq!(answer["sweep"]["removed"]["results"]["objects"], 5);
    assert_eq!(store_keys(&home), before, "a dry run removes nothing");

    let (code, answer) = home.json(&["admin", "sweep-store", "--grace", "0"]);
    assert_eq!((code, swept(&answer)), (0, unreferenced));
    let after = store_keys(&home);
    let gone: Vec<&String> = before.iter().filter(|k| !after.contains(k)).collect();
    assert_eq!(gone.len(), 9, "{gone:?}");
    assert!(
        gone.iter()
            .all(|k| k.contains(&orphan_uid) || k.contains(&dropped) || k.starts_with("uploads/"))
    );
    for kept in [&first, &second] {
        assert!(
            after.iter().any(|k| k.contains(kept.as_str())),
            "{kept} was removed"
        );
    }
    assert!(after.contains(&"README.txt".to_owned()));
    assert!(after.contains(&"filesets/default/README.txt".to_owned()));
    assert_eq!(
        serde_json::from_slice::<Value>(&home.download("run_result", &pinning)).unwrap()["response"],
        "2",
        "a live execution's results stay"
    );

    // Once the execution that pinned the first content is deleted, its blob goes too.
    home.json(&["delete", &pinning]);
    let (_, answer) = home.json(&["admin", "sweep-store", "--grace", "0"]);
    assert_eq!(swept(&answer), vec![("fileset".to_owned(), first)]);
    assert!(
        store_keys(&home)
            .iter()
            .any(|k| k.contains(second.as_str()))
    );
}

#[test]
fn rerun_runs_the_stored_snapshot_and_is_refused_once_it_is_gone() {
    let home = Home::new();
    let reader = home.agent("reader", "cat notes.txt");
    push_fileset(&home, "ws", "first");
    let spec = json!({"workdir": {"base": "ws"}}).to_string();
    let (code, answer) = home.json(&[
        "execute", "--agent", &reader, "--input", "read", "--spec", &spec,
    ]);
    assert_eq!(code, 0, "{answer}");
    let original = answer["execution"]["name"].as_str().unwrap().to_owned();
    let digest = answer["execution"]["snapshot_digest"].clone();

    // The Fileset moves on; a rerun still stages the content the original ran with.
    push_fileset(&home, "ws", "second content");
    let (code, answer) = home.json(&["rerun", &original[..original.len() - 2], "--name", "again"]);
    assert_eq!(code, 0, "{answer}");
    let rerun = &answer["execution"];
    assert_eq!(
        (rerun["name"].as_str(), rerun["response"].as_str()),
        (Some("again"), Some("first"))
    );
    assert_eq!(rerun["rerun_of"], original.as_str());
    assert_eq!(rerun["snapshot_digest"], digest, "the same snapshot");
    let (_, status) = home.json(&["status", "again"]);
    assert_eq!(status["execution"]["rerun_of"], original.as_str());
    let human = home.run(&["status", "again"]);
    assert!(
        String::from_utf8_lossy(&human.stdout).contains(&format!("rerun of: {original}")),
        "{human:?}"
    );
    // run_result records what ran: the snapshot and the command (a local run has no image).
    let record: Value = serde_json::from_slice(&home.download("run_result", "again")).unwrap();
    assert_eq!(record["snapshot_digest"], digest);
    assert_eq!(record["command"], json!(["sh", "-c", "cat notes.txt"]));
    assert_eq!(record["image"], Value::Null);

    // A snapshot that is gone, or an execution that is, leaves nothing to rerun.
    std::fs::remove_file(home.executions_dir().join("again/snapshot.json")).unwrap();
    for (gone, expected) in [
        ("again", "the snapshot of execution \"again\""),
        (original.as_str(), "not found in namespace"),
    ] {
        if gone == original {
            home.json(&["delete", &original]);
        }
        let (code, error, message) = refusal(&home, &["rerun", gone]);
        assert_eq!((code, error.as_str()), (2, "invalid_spec"));
        assert!(message.contains("spec.rerunOf.name: "), "{message}");
        assert!(message.contains(expected), "{message}");
    }
}

#[test]
fn a_gateway_command_names_what_it_misses() {
    let home = Home::new();
    let (code, answer) = home.json(&["invoke", "--input", "1+1", "--local"]);
    assert_eq!(code, 2, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("<DEPLOYMENT>"),
        "{answer}"
    );
    let (code, answer) = home.json(&["invoke", "calc", "--agent", "a", "--input", "x"]);
    assert_eq!(code, 2, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be used with"),
        "{answer}"
    );
}

#[test]
fn crds_out_dir_creates_the_directory_and_a_file_in_the_way_is_named() {
    let home = Home::new();
    let dir = home.path().join("generated/crds");
    let output = home.run(&["crds", "--out-dir", dir.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let written = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(written, errand::api::crds::all().len());

    let blocked = home.write("not-a-directory", "x").join("crds");
    let output = home.run(&["crds", "--out-dir", blocked.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot create the output directory")
            && stderr.contains(blocked.to_str().unwrap()),
        "{stderr}"
    );
}
