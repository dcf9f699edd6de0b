//! Every command of the command line, walked from its definition: with `-o json` each prints one answer that conforms to `errand schema`, and with its stdout closed (a reader gone, or no stdout at all) none panics and each ends with its own exit code (or 141 for the closed pipe).

use std::collections::BTreeSet;
use std::process::Stdio;

use clap::CommandFactory;

use crate::support::errand::one_json_answer;
use crate::support::local::{Closed, Home};

/// The commands that print their own format rather than an answer, and so take no `-o`.
const OWN_FORMAT: [&str; 5] = ["schema", "completions", "crds", "logs", "mcp"];

/// The commands not run here, and why.
const NOT_RUN: [(&str, &str); 1] = [("controller", "serves a cluster until it is stopped")];

/// Every visible leaf command (`results download`, `status`, ...), from the parser itself.
fn leaf_commands() -> BTreeSet<String> {
    fn walk(command: &clap::Command, path: &str, leaves: &mut BTreeSet<String>) {
        let subcommands: Vec<&clap::Command> = command
            .get_subcommands()
            .filter(|c| !c.is_hide_set() && c.get_name() != "help")
            .collect();
        if subcommands.is_empty() {
            leaves.insert(path.to_owned());
        }
        for sub in subcommands {
            let path = format!("{path} {}", sub.get_name()).trim().to_owned();
            walk(sub, &path, leaves);
        }
    }
    let mut leaves = BTreeSet::new();
    walk(&errand::cli::Cli::command(), "", &mut leaves);
    leaves
}

/// A home with something for every command to act on: the calculator applied, a finished
/// execution `done`, a created one `held`, a Fileset `docs`; returns it with the files the
/// invocations name.
struct Fixture {
    home: Home,
    manifest: String,
    config: String,
    dir: String,
}

impl Fixture {
    fn new() -> Self {
        let home = Home::new();
        let manifest = repo_file("examples/calculator/agent.yaml");
        let config = home
            .write("config.yaml", "config_format: agents-spec-v1\nname: bare\n")
            .display()
            .to_string();
        let dir = home.path().join("docs");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), "a\n").unwrap();
        let dir = dir.display().to_string();
        for args in [
            &["apply", "-f", &manifest][..],
            &[
                "execute",
                "--agent",
                "calculator",
                "--input",
                "What is 1 plus 2?",
                "--name",
                "done",
            ],
            &[
                "create",
                "--agent",
                "calculator",
                "--input",
                "What is 2 plus 2?",
                "--name",
                "held",
            ],
            &["filesets", "push", "docs", &dir],
        ] {
            let output = home.run(args);
            assert!(
                output.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Self {
            home,
            manifest,
            config,
            dir,
        }
    }

    /// One invocation of each leaf command.
    fn invocations(&self) -> Vec<Vec<String>> {
        let (manifest, config, dir) = (&self.manifest, &self.config, &self.dir);
        let out = self.home.path().join("out.bin").display().to_string();
        let notify = self.home.path().join("events.jsonl").display().to_string();
        let lines: Vec<Vec<&str>> = vec![
            vec![
                "execute",
                "--agent",
                "calculator",
                "--input",
                "What is 3 plus 4?",
            ],
            vec!["watch", "done"],
            vec!["wait", "done"],
            vec!["status", "done"],
            vec!["tail", "done"],
            vec!["results", "list", "done"],
            vec![
                "results",
                "download",
                "run_result",
                "--execution",
                "done",
                "--out",
                &out,
            ],
            vec!["cancel", "done"],
            vec!["delete", "done"],
            vec!["kill", "done"],
            vec![
                "deadline",
                "set",
                "done",
                "--in",
                "60",
                "--acknowledge-result-loss",
            ],
            vec!["deadline", "clear", "done"],
            vec![
                "create",
                "--agent",
                "calculator",
                "--input",
                "x",
                "--name",
                "made",
            ],
            vec!["start", "held"],
            vec!["restart", "done"],
            vec!["list"],
            vec!["ps"],
            vec!["notify", "set", "done", "--notify-file", &notify],
            vec!["tag", "set", "done", "nightly"],
            vec!["rerun", "done", "--name", "again"],
            vec!["gc", "--older-than", "7d", "--dry-run"],
            vec!["admin", "sweep-store", "--local"],
            vec!["apply", "-f", manifest],
            vec!["filesets", "push", "more", dir],
            vec!["filesets", "list"],
            vec!["filesets", "delete", "docs"],
            vec!["deploy", "served", "--agent", "nope", "--no-wait"],
            vec!["undeploy", "nope"],
            vec![
                "schedule",
                "create",
                "tick",
                "--cron",
                "0 3 * * *",
                "--agent",
                "calculator",
                "--input",
                "What is 1 plus 1?",
                "--suspend",
            ],
            vec!["schedule", "list"],
            vec!["schedule", "get", "tick"],
            vec!["schedule", "suspend", "tick"],
            vec!["schedule", "resume", "tick"],
            vec!["schedule", "trigger", "tick"],
            vec!["schedule", "delete", "tick"],
            vec!["redeploy", "nope", "--agent-config", config],
            vec!["deployments", "list"],
            vec!["deployments", "get", "nope"],
            vec!["deployments", "wait", "nope"],
            vec!["invoke", "nope", "--input", "x"],
            vec!["chat", "nope", "--session-name", "s", "--message", "x"],
            vec!["sessions", "list", "nope"],
            vec!["schema"],
            vec!["completions", "bash"],
            vec!["crds"],
            vec!["logs", "nope"],
            vec!["mcp"],
        ];
        let mut lines = lines;
        for (kind, existing) in [
            ("agents", "calculator"),
            ("environments", "nope"),
            ("runtimes", "nope"),
            ("extensions", "nope"),
        ] {
            lines.push(vec![kind, "list"]);
            let create = [kind, "create", "--name", "made", "--agent-config", config];
            lines.push(create.to_vec());
            lines.push(vec![kind, "delete", existing]);
        }
        lines
            .into_iter()
            .map(|l| l.into_iter().map(str::to_owned).collect())
            .collect()
    }
}

fn repo_file(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// The leaf command an invocation runs (`results download`).
fn leaf_of(args: &[String], leaves: &BTreeSet<String>) -> String {
    let two = args.iter().take(2).cloned().collect::<Vec<_>>().join(" ");
    if leaves.contains(&two) {
        two
    } else {
        args[0].clone()
    }
}

#[test]
fn every_command_answers_json_by_the_schema_and_survives_a_closed_stdout() {
    let leaves = leaf_commands();
    let fixture = Fixture::new();
    let invocations = fixture.invocations();
    let covered: BTreeSet<String> = invocations.iter().map(|a| leaf_of(a, &leaves)).collect();
    let not_run: BTreeSet<String> = NOT_RUN.iter().map(|(c, _)| (*c).to_owned()).collect();
    let missing: Vec<&String> = leaves
        .iter()
        .filter(|l| !covered.contains(*l) && !not_run.contains(*l))
        .collect();
    assert!(
        missing.is_empty(),
        "commands this test does not run: {missing:?}"
    );

    let failures = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(args) = invocations.get(i) else {
                        break;
                    };
                    if let Err(failure) = check(&fixture, args) {
                        failures.lock().unwrap().push(failure);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// One command on copies of the fixture: its answer with `-o json` (unless it prints its own
/// format), then the same command with stdout closed each way, with `-o json` and without.
fn check(fixture: &Fixture, args: &[String]) -> Result<(), String> {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let own_format = OWN_FORMAT.contains(&refs[0]);
    let expected = if own_format {
        let home = fixture.home.copy();
        let output = home.command(&refs).stdin(Stdio::null()).output().unwrap();
        output.status.code().unwrap_or(-1)
    } else {
        let home = fixture.home.copy();
        let mut json = refs.clone();
        json.extend(["-o", "json"]);
        let output = home.command(&json).stdin(Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("panicked") {
            return Err(format!("{args:?} -o json panicked: {stderr}"));
        }
        // `one_json_answer` asserts one line, conforming to `errand schema`.
        let (code, answer) = std::panic::catch_unwind(|| one_json_answer(&json, &output))
            .map_err(|_| format!("{args:?} -o json: not one answer by the schema"))?;
        if (code == 0) != (answer["ok"] == true) {
            return Err(format!("{args:?}: exit {code} with {answer}"));
        }
        code
    };
    let formats: &[&[&str]] = if own_format {
        &[&[]]
    } else {
        &[&[], &["-o", "json"]]
    };
    for format in formats {
        for closed in [Closed::Reader, Closed::Descriptor] {
            let home = fixture.home.copy();
            let mut all = args.to_vec();
            all.extend(format.iter().map(|s| (*s).to_owned()));
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            let (code, stderr) = home.run_with_stdout_closed(&refs, closed);
            let allowed = match closed {
                Closed::Reader => vec![expected, errand::cli::EXIT_BROKEN_PIPE],
                Closed::Descriptor => vec![expected],
            };
            if stderr.contains("panicked") || stderr.contains("failed printing") {
                return Err(format!("{all:?} with {closed:?} closed panicked: {stderr}"));
            }
            if !allowed.contains(&code) {
                return Err(format!(
                    "{all:?} with {closed:?} closed exited {code}, not one of {allowed:?}: {stderr}"
                ));
            }
        }
    }
    Ok(())
}

/// Every command that names something (an execution, an object, a result, a deployment) and
/// finds nothing answers `not_found` (exit 3) and says what exists: on a fresh home that there
/// is none yet and how to make one, on a home with some the names there are.
#[test]
fn every_not_found_lists_what_exists_or_how_to_make_one() {
    let fixture = Fixture::new();
    let fresh = Home::new();
    let config = fixture.config.as_str();
    let executions = "the executions in namespace \"default\": done, held";
    let deployments = "there are no AgentDeployments in namespace \"default\" yet (serve an Agent";
    let schedules = "there are no AgentSchedules in namespace \"default\" yet (create one";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["status", "nope"], executions),
        (vec!["watch", "nope"], executions),
        (vec!["wait", "nope"], executions),
        (vec!["tail", "nope"], executions),
        (vec!["cancel", "nope"], executions),
        (vec!["delete", "nope"], executions),
        (vec!["kill", "nope"], executions),
        (vec!["start", "nope"], executions),
        (vec!["restart", "nope"], executions),
        (vec!["results", "list", "nope"], executions),
        (vec!["tag", "set", "nope", "a"], executions),
        (
            vec!["notify", "set", "nope", "--notify-file", "/dev/null"],
            executions,
        ),
        (
            vec![
                "deadline",
                "set",
                "nope",
                "--in",
                "5",
                "--acknowledge-result-loss",
            ],
            executions,
        ),
        (vec!["deadline", "clear", "nope"], executions),
        (
            vec!["results", "download", "run_error", "--execution", "done"],
            "the results saved in execution done: input_workdir, manifest.json, \
             output_artifacts, output_workdir, run_result",
        ),
        (
            vec!["execute", "--agent", "nope", "--input", "x"],
            "the Agents in namespace \"default\": calculator",
        ),
        (
            vec![
                "execute",
                "--agent",
                "calculator",
                "--environment",
                "nope",
                "--input",
                "x",
            ],
            "there are no AgentEnvironments in namespace \"default\" yet (apply one",
        ),
        (
            vec![
                "execute",
                "--agent",
                "calculator",
                "--workdir.base-workdir",
                "nope",
                "--input",
                "x",
            ],
            "the Filesets in namespace \"default\": docs",
        ),
        (
            vec!["agents", "delete", "nope"],
            "the Agents in namespace \"default\": calculator",
        ),
        (
            vec!["environments", "delete", "nope"],
            "there are no AgentEnvironments in namespace \"default\" yet (apply one",
        ),
        (
            vec!["runtimes", "delete", "nope"],
            "AgentRuntime \"nope\" not found in the cluster; ",
        ),
        (
            vec!["extensions", "delete", "nope"],
            "AgentExtension \"nope\" not found in the cluster; ",
        ),
        (
            vec!["filesets", "delete", "nope"],
            "the Filesets in namespace \"default\": docs",
        ),
        (vec!["deployments", "get", "nope"], deployments),
        (vec!["deployments", "wait", "nope"], deployments),
        (vec!["undeploy", "nope"], deployments),
        (vec!["undeploy", "--agent", "nope"], deployments),
        (
            vec!["redeploy", "nope", "--agent-config", config],
            deployments,
        ),
        (vec!["logs", "nope"], deployments),
        (vec!["invoke", "nope", "--input", "x"], deployments),
        (
            vec!["chat", "nope", "--session-name", "s", "--message", "x"],
            deployments,
        ),
        (vec!["sessions", "list", "nope"], deployments),
        (vec!["schedule", "get", "nope"], schedules),
        (vec!["schedule", "suspend", "nope"], schedules),
        (vec!["schedule", "resume", "nope"], schedules),
        (vec!["schedule", "trigger", "nope"], schedules),
        (vec!["schedule", "delete", "nope"], schedules),
    ];
    let mut failures = Vec::new();
    for (args, listed) in &cases {
        for (home, expected) in [(&fixture.home, *listed), (&fresh, "there are no ")] {
            let output = home.command(args).stdin(Stdio::null()).output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            let fine = output.status.code() == Some(3)
                && stderr.starts_with("error[not_found]: ")
                && stderr.contains(expected)
                && (expected != "there are no " || stderr.contains(" yet ("));
            if !fine {
                failures.push(format!("{args:?}: expected {expected:?}, got {stderr}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every flag that takes a manifest file or an object's name, on `execute` and `create`: a
/// value that names no file and cannot be a name is refused as a missing file, saying why it
/// is no name either; a directory is said to be one; a valid name that is no file says it was
/// taken for a name. Nothing is ever read as a reference to another workspace by accident.
#[test]
fn every_file_or_name_flag_says_which_it_took_and_why_not_the_other() {
    let fixture = Fixture::new();
    let home = &fixture.home;
    std::fs::create_dir_all(home.path().join("examples/calculator")).unwrap();
    let cases: [(&str, &str, &str); 7] = [
        (
            "examples/calculater/agent.yaml",
            "invalid_argument",
            "no such file, and it is not {kind} name (names have no '/' but one after a NAMESPACE)",
        ),
        (
            "/nowhere/agent.yaml",
            "invalid_argument",
            "no such file, and it is not {kind} name (an absolute path;",
        ),
        (
            "agent.yaml",
            "invalid_argument",
            "no such file, and it is not {kind} name (a value ending in .yaml, .yml, .json is read as a manifest file)",
        ),
        (
            "Calculator",
            "invalid_argument",
            "no such file, and it is not {kind} name (\"Calculator\" is not a valid name (a DNS-1123 subdomain",
        ),
        (
            "examples/calculator",
            "invalid_spec",
            "names workspace \"examples\"; the target namespace is \"default\", and references stay in it (a workspace/ prefix must be the target namespace); \"examples/calculator\" is a directory, not a manifest file",
        ),
        (
            "examples",
            "not_found",
            "examples is a directory, not a manifest file, so it was taken for a name: ",
        ),
        (
            "missing",
            "not_found",
            "no file missing exists, so it was taken for a name: ",
        ),
    ];
    let mut failures = Vec::new();
    for command in ["execute", "create"] {
        for (flag, kind) in [
            ("--agent", "an Agent"),
            ("--environment", "an AgentEnvironment"),
        ] {
            for (value, code, expected) in &cases {
                let mut args = vec![command, "--input", "x", flag, value];
                if flag != "--agent" {
                    args.extend(["--agent", "calculator"]);
                }
                let (_, answer) = home.json(&args);
                let message = answer["error"]["message"].as_str().unwrap_or_default();
                let expected = expected.replace("{kind}", kind);
                if answer["error"]["code"] != *code || !message.contains(&expected) {
                    failures.push(format!(
                        "{args:?}: expected {code} {expected:?}, got {answer}"
                    ));
                }
                if message.contains("names workspace") && !value.contains('/') {
                    failures.push(format!("{args:?}: read as another workspace: {message}"));
                }
            }
        }
    }
    let ask = [
        "execute",
        "--input",
        "What is 1 plus 1?",
        "--agent",
        "calculator",
    ];
    let (_, answer) = home.json(&ask);
    assert_eq!(answer["ok"], true, "a name still names an Agent: {answer}");
    assert!(failures.is_empty(), "{failures:#?}");
}
