//! Input, environment and tags on the local backend: `execute --stdin`, `--stdin-file`, piped standard input and its bound; `--env`, `--env-file`, `--mask`; `--tag`, `tag set`, `list --state --tag --limit` and `ps`.

use crate::support;

use crate::support::local::Home;
use serde_json::{Value, json};

/// `errand ARGS -o json` with `stdin` piped into it.
fn json_with_stdin(home: &Home, args: &[&str], stdin: &[u8]) -> (i32, Value) {
    let mut command = home.command(args);
    command.args(["-o", "json"]);
    support::errand::one_json_answer_with_stdin(command, args, stdin)
}

#[test]
fn standard_input_reaches_the_agent_from_a_value_a_file_or_a_pipe_within_its_bound() {
    let home = Home::new();
    let agent = home.agent("cat", "cat");
    let run = |extra: &[&str], piped: Option<&[u8]>| {
        let mut args = vec!["execute", "--local", "--agent", agent.as_str()];
        args.extend(extra);
        match piped {
            Some(bytes) => json_with_stdin(&home, &args, bytes),
            None => home.json(&args),
        }
    };

    let (code, answer) = run(&["--stdin", "from a flag"], None);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], "from a flag");
    assert_eq!(answer["execution"]["stdin_bytes"], 11);

    let file = home.write("input.txt", "from a file\n");
    let (code, answer) = run(&["--stdin-file", file.to_str().unwrap()], None);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        answer["execution"]["response"], "from a file",
        "the response is trimmed"
    );
    assert_eq!(answer["execution"]["stdin_bytes"], 12);

    let (code, answer) = run(&[], Some(b"piped in"));
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        answer["execution"]["response"], "piped in",
        "piped stdin is forwarded"
    );
    let (code, answer) = run(&["--stdin", "-"], Some(b"dash"));
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], "dash");

    // Without any stdin the agent reads nothing, and the record says nothing of stdin.
    let (code, answer) = run(&[], None);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], Value::Null, "{answer}");
    assert!(answer["execution"].get("stdin_bytes").is_none(), "{answer}");

    let (code, answer) = run(&["--stdin-max-bytes", "4"], Some(b"12345"));
    assert_eq!(code, 2, "{answer}");
    assert_eq!(answer["error"]["code"], "stdin_too_large", "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "piped standard input is larger than --stdin-max-bytes 4; raise the bound or put the input in the working directory"
    );
    let (code, answer) = run(&["--stdin", "12345", "--stdin-max-bytes", "4"], None);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (2, &json!("stdin_too_large"))
    );
    let (_, list) = home.json(&["list"]);
    assert_eq!(
        list["executions"].as_array().unwrap().len(),
        5,
        "a refused input creates no execution: {list}"
    );
}

#[test]
fn env_flags_and_files_reach_the_agent_and_masked_values_are_never_shown() {
    let home = Home::new();
    let agent = home.agent(
        "env",
        "echo \"$MODE $FROM_FILE\"; if [ \"$TOKEN\" = s3cret-value ]; then echo token-ok; else echo token-other; fi",
    );
    let env_file = home.write(
        "vars.env",
        "# settings\nexport FROM_FILE=file\nMODE=overridden\n",
    );
    let args = [
        "execute",
        "--local",
        "--agent",
        &agent,
        "--env-file",
        env_file.to_str().unwrap(),
        "--env",
        "MODE=fast",
        "--env",
        "TOKEN=s3cret-value",
        "--mask",
        "TOKEN",
    ];
    let output = home.run(&[&args[..], &["-o", "json"]].concat());
    let (code, answer) = support::errand::one_json_answer(&args, &output);
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(execution["response"], "fast file\ntoken-ok");
    assert_eq!(
        execution["env"],
        json!({"FROM_FILE": "file", "MODE": "fast", "TOKEN": "***"})
    );
    let name = execution["name"].as_str().unwrap();
    let status = home.run(&["status", name]);
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(shown.contains("TOKEN=***"), "{shown}");
    for text in [
        String::from_utf8_lossy(&home.run(&["status", name, "-o", "json"]).stdout).into_owned(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        shown.into_owned(),
        String::from_utf8_lossy(&home.run(&["list", "-o", "json"]).stdout).into_owned(),
        record_file(&home.path().join("home"), name),
    ] {
        assert!(
            !text.contains("s3cret-value"),
            "a masked value was shown: {text}"
        );
    }

    // --env on top of a named AgentEnvironment.
    home.write(
        "env.yaml",
        "apiVersion: errand.dev/v1alpha1\nkind: AgentEnvironment\nmetadata: {name: base}\nspec:\n  overlay:\n    env: {MODE: slow, TOKEN: t}\n",
    );
    assert!(home.run(&["apply", "-f", "env.yaml"]).status.success());
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--environment",
        "base",
        "--env",
        "MODE=fast",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], "fast \ntoken-other");
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &agent,
        "--environment",
        "missing",
        "--env",
        "A=1",
    ]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (3, &json!("not_found")),
        "{answer}"
    );

    for (flags, message) in [
        (
            &["--env", "ERRAND_INPUT=x"][..],
            "--env \"ERRAND_INPUT\" is reserved for errand's runner (ERRAND_* and AGENT_CONFIG_PATH)",
        ),
        (
            &["--env", "NOVALUE"],
            "--env \"NOVALUE\": expected KEY=VALUE",
        ),
        (
            &["--mask", "UNSET"],
            "--mask UNSET: no --env or --env-file sets UNSET",
        ),
    ] {
        let (code, answer) = home.json(
            &[
                &["execute", "--local", "--agent", agent.as_str()][..],
                flags,
            ]
            .concat(),
        );
        assert_eq!(code, 2, "{answer}");
        assert_eq!(answer["error"]["code"], "invalid_argument");
        assert_eq!(answer["error"]["message"], message);
    }
}

/// The text of execution `name`'s record file somewhere under `dir`.
fn record_file(dir: &std::path::Path, name: &str) -> String {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            let found = record_file(&path, name);
            if !found.is_empty() {
                return found;
            }
        } else if path.ends_with(format!("{name}/record.json")) {
            return std::fs::read_to_string(path).unwrap();
        }
    }
    String::new()
}

/// The names in a `list` or `ps` answer, oldest first.
fn names(answer: &Value) -> Vec<String> {
    answer["executions"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {answer}"))
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn tags_select_executions_in_list_and_ps_and_tag_set_replaces_them() {
    let home = Home::new();
    let quick = home.agent("quick", "true");
    let slow = home.agent("slow", "sleep 30");
    for (name, tags) in [
        ("a", &["team.alpha", "ci"][..]),
        ("b", &["team.beta"]),
        ("c", &["teams"]),
    ] {
        let mut args = vec![
            "execute",
            "--local",
            "--agent",
            quick.as_str(),
            "--name",
            name,
        ];
        for tag in tags {
            args.extend(["--tag", tag]);
        }
        let (code, answer) = home.json(&args);
        assert_eq!(code, 0, "{answer}");
        let mut sorted = tags.to_vec();
        sorted.sort();
        assert_eq!(answer["execution"]["tags"], json!(sorted));
    }
    let (code, answer) = home.json(&[
        "execute",
        "--local",
        "--agent",
        &slow,
        "--name",
        "running",
        "--tag",
        "team.gamma",
        "--no-wait",
    ]);
    assert_eq!(code, 0, "{answer}");

    let list = |flags: &[&str]| {
        let (code, answer) = home.json(&[&["list"][..], flags].concat());
        assert_eq!(code, 0, "{answer}");
        names(&answer)
    };
    assert_eq!(list(&["--tag", "team.*"]), ["a", "b", "running"]);
    assert_eq!(list(&["--tag", "team.*", "--tag", "ci"]), ["a"]);
    assert_eq!(list(&["--tag", "teams"]), ["c"]);
    assert_eq!(
        list(&["--state", "succeeded", "--tag", "team.*"]),
        ["a", "b"]
    );
    assert_eq!(
        list(&["--state", "running", "--state", "failed"]),
        ["running"]
    );
    assert_eq!(list(&["--limit", "2"]), ["c", "running"]);
    let (code, ps) = home.json(&["ps"]);
    assert_eq!(code, 0, "{ps}");
    assert_eq!(names(&ps), ["running"]);
    assert_eq!(ps["executions"][0]["phase"], "Running");

    let (code, answer) = home.json(&["tag", "set", "b", "ci", "nightly.eu"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["type"], "execution");
    assert_eq!(answer["execution"]["tags"], json!(["ci", "nightly.eu"]));
    assert_eq!(list(&["--tag", "ci"]), ["a", "b"]);
    assert_eq!(list(&["--tag", "team.*"]), ["a", "running"]);
    let (code, answer) = home.json(&["tag", "set", "running", "kept"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(home.json(&["cancel", "running"]).0, 0);
    let (_, status) = home.json(&["status", "running"]);
    assert_eq!(
        status["execution"]["tags"],
        json!(["kept"]),
        "the supervisor keeps a tag set while it ran"
    );

    for (args, message) in [
        (
            &["list", "--tag", "Team.*"][..],
            "invalid value 'Team.*' for '--tag <TAG|PREFIX.*>': pattern \"Team.*\": \"Team\" is not a tag: segment \"Team\" must be lowercase letters, digits and inner '-' (segments are separated by '.')",
        ),
        (
            &["list", "--state", "done"],
            "invalid value 'done' for '--state <PHASE>': \"done\" is not a phase: created, pending, queued, starting, running, succeeded, failed, cancelled or active",
        ),
        (
            &["tag", "set", "a", "x..y"],
            "\"x..y\" is not a tag: segment \"\" must be lowercase letters, digits and inner '-' (segments are separated by '.')",
        ),
        (
            &[
                "execute",
                "--local",
                "--agent",
                quick.as_str(),
                "--tag",
                "a/b",
            ],
            "--tag \"a/b\" is not a tag: segment \"a/b\" must be lowercase letters, digits and inner '-' (segments are separated by '.')",
        ),
        (
            &["ps", "--state", "failed"],
            "ps lists the executions that have not ended; use `errand list --state` for others",
        ),
    ] {
        let (code, answer) = home.json(args);
        assert_eq!(code, 2, "{args:?}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_argument");
        assert_eq!(answer["error"]["message"], message, "{args:?}");
    }
}

/// An execution without any input is made (an agent may work from its directory alone), but
/// `execute` and `create` say so on stderr, naming the flags that give one; an explicit
/// `--input ""`, standard input, or a rerun (which takes its original's input) is no surprise.
#[test]
fn a_missing_input_is_warned_about_naming_the_input_flags() {
    let home = Home::new();
    let agent = home.agent("echoes", "cat >/dev/null; echo \"[$ERRAND_INPUT]\"");
    let warning = "warning: no --input: the agent starts with an empty input (give --input TEXT, \
                   --stdin VALUE or --stdin-file PATH, or --input \"\" to mean it)\n";
    let stderr = |args: &[&str]| {
        let output = home
            .command(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    for command in ["execute", "create"] {
        assert_eq!(
            stderr(&[command, "--agent", &agent, "-o", "json"]),
            warning,
            "{command}"
        );
        assert_eq!(
            stderr(&[command, "--agent", &agent, "--input", "", "-o", "json"]),
            "",
            "{command} --input \"\""
        );
        assert_eq!(
            stderr(&[command, "--agent", &agent, "--stdin", "data", "-o", "json"]),
            "",
            "{command} --stdin"
        );
    }
    let (code, answer) = home.json(&[
        "execute", "--agent", &agent, "--input", "q", "--name", "first",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(stderr(&["rerun", "first", "-o", "json"]), "", "a rerun");
}
