//! End-to-end tests of `errand` on the local backend: the real binary, a real file store, real agent processes.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::store::tar_files;

/// An isolated errand home (catalog, records, store) for one test.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_errand"));
        command
            .args(args)
            .env("ERRAND_HOME", self.path().join("home"))
            .env("ERRAND_BACKEND", "local")
            .env_remove("ERRAND_STORE")
            .env_remove("ERRAND_NAMESPACE")
            .current_dir(self.path());
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs a command with `-o json` and returns (exit code, the one JSON object it printed).
    fn json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let output = self.run(&all);
        let stdout = String::from_utf8(output.stdout).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "exactly one JSON line expected from {args:?}, got: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let value: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(value["schema_version"], 1);
        assert!(
            value["ok"].is_boolean() && value["type"].is_string(),
            "{value}"
        );
        (output.status.code().unwrap(), value)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    /// An Agent manifest file whose command is `sh -c SCRIPT`.
    fn agent(&self, name: &str, script: &str) -> String {
        let manifest = json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": name},
            "spec": {"runtime": {"image": "busybox", "command": ["sh", "-c", script]},
                     "config": {"config_format": "agents-spec-v1", "name": name}}
        });
        self.write(&format!("{name}.json"), &manifest.to_string())
            .display()
            .to_string()
    }

    fn executions_dir(&self) -> PathBuf {
        self.path().join("home/executions/default")
    }

    fn download(&self, result: &str, job: &str) -> Vec<u8> {
        let file = self.path().join(format!("dl-{job}-{result}"));
        let output = self.run(&[
            "results",
            "download",
            result,
            "--job",
            job,
            "-o",
            file.to_str().unwrap(),
        ]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::read(file).unwrap()
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
    assert_eq!(
        names,
        [
            "input_workdir",
            "output_workdir",
            "output_artifacts",
            "run_result",
            "manifest.json"
        ]
    );

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
    let (_, tail) = home.json(&["tail", "-n", "2", &name]);
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
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is ambiguous")
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
            "limits[ephemeral-storage]: \"ephemeral-storage\" is not allowed",
        ),
        (
            spec(environment(
                json!({"secrets": {"AGENT_CONFIG_PATH": "model-keys#openai"}}),
                json!({}),
            )),
            "secrets.AGENT_CONFIG_PATH: \"AGENT_CONFIG_PATH\" is reserved",
        ),
        (
            spec(
                json!({"workdir": {"artifactMounts": [{"ref": "repo", "mountPath": "a"}, {"ref": "repo", "mountPath": "a/b"}]}}),
            ),
            "artifactMounts[1].mountPath: \"a/b\" overlaps mount path \"a\"",
        ),
        (
            spec(json!({"workdir": {"artifactMounts": [{"ref": "repo", "mountPath": "../x"}]}})),
            "artifactMounts[0].mountPath: \"../x\" must not contain '..'",
        ),
        (
            spec(json!({"agentRef": {"name": "calculator", "namespace": "other"}})),
            "spec.agentRef.namespace: \"other\" is another namespace",
        ),
        (
            spec(
                json!({"agentRef": null, "agent": {"runtime": {"image": "i", "command": ["x"]}, "config": {"config_format": "yaml-v9"}}}),
            ),
            "spec.agent.config.config_format: \"yaml-v9\" is not an accepted format",
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

    // Human output names the field too, on stderr, with exit code 2.
    let output = home.run(&["execute", "--local", "--agent", "nope", "--input", "x"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "error[invalid_spec]: invalid AgentExecution (1 problem): spec.agentRef.name: Agent \"nope\" not found in namespace \"default\"\n"
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
    assert_eq!(gone.len(), 8, "{gone:?}");
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
