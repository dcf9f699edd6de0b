//! Input, environment and tags on the real test cluster: piped standard input becomes the execution's input file, `--env` with `--mask` reaches the pod and shows masked, tags are labels that `list --tag` selects with label selectors, and `tag set` relabels.

use crate::support;

use crate::support::cluster;
use crate::support::harness::{Harness, Mode};
use serde_json::{Value, json};

use errand::api::AgentExecution;

/// `errand ARGS -o json` against the harness's namespace with `stdin` piped in.
fn cli_with_stdin(e2e: &Harness, args: &[&str], stdin: &[u8]) -> (i32, Value) {
    let mut command = e2e.command(args);
    command.args(["-o", "json"]);
    support::errand::one_json_answer_with_stdin(command, args, stdin)
}

/// The names in a `list` or `ps` answer.
fn names(answer: &Value) -> Vec<String> {
    let mut names: Vec<String> = answer["executions"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {answer}"))
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_env_and_tags_reach_the_cluster_as_input_spec_and_labels() {
    let Some(e2e) = Harness::start("inputs", Mode::WithPods).await else {
        return;
    };
    e2e.create_agent(
        "reader",
        cluster::BUSYBOX_IMAGE,
        "cat \"$ERRAND_INPUT_FILE\"; echo \"mode=$MODE\"; if [ \"$TOKEN\" = s3cret-value ]; then echo token-ok; fi",
    )
    .await;
    let (code, answer) = cli_with_stdin(
        &e2e,
        &[
            "execute",
            "--agent",
            "reader",
            "--name",
            "piped",
            "--env",
            "MODE=fast",
            "--env",
            "TOKEN=s3cret-value",
            "--mask",
            "TOKEN",
            "--tag",
            "team.alpha",
            "--tag",
            "ci",
        ],
        b"from stdin\n",
    );
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(execution["phase"], "Succeeded", "{answer}");
    assert_eq!(execution["stdin_bytes"], 11);
    assert_eq!(execution["env"], json!({"MODE": "fast", "TOKEN": "***"}));
    assert_eq!(execution["tags"], json!(["ci", "team.alpha"]));
    let log = execution["output"][0]["excerpt"]["data"]
        .as_str()
        .unwrap_or_default();
    for line in ["from stdin\n", "mode=fast\n", "token-ok\n"] {
        assert!(
            log.contains(line),
            "{line:?} missing from the pod's log: {answer}"
        );
    }
    assert!(
        !answer
            .to_string()
            .replace("token-ok", "")
            .contains("s3cret-value"),
        "{answer}"
    );

    // What the API server holds: the input, tag labels, and the shown variables.
    let object = e2e.api::<AgentExecution>().get("piped").await.unwrap();
    assert_eq!(object.spec.input, "from stdin\n");
    let labels = object.metadata.labels.clone().unwrap_or_default();
    for label in [
        "tag.errand.dev/team.alpha",
        "tag.errand.dev/ci",
        "tag-prefix.errand.dev/team",
    ] {
        assert_eq!(
            labels.get(label).map(String::as_str),
            Some(""),
            "{labels:?}"
        );
    }
    assert_eq!(
        object.metadata.annotations.unwrap_or_default()["errand.dev/env"],
        r#"{"MODE":"fast","TOKEN":"***"}"#
    );

    let (code, answer) = e2e.cli(&[
        "execute",
        "--agent",
        "reader",
        "--name",
        "second",
        "--input",
        "x",
        "--tag",
        "team.beta",
    ]);
    assert_eq!(code, 0, "{answer}");
    let list = |flags: &[&str]| {
        let (code, answer) = e2e.cli(&[&["list"][..], flags].concat());
        assert_eq!(code, 0, "{answer}");
        names(&answer)
    };
    assert_eq!(list(&["--tag", "team.*"]), ["piped", "second"]);
    assert_eq!(list(&["--tag", "team.*", "--tag", "ci"]), ["piped"]);
    assert_eq!(
        list(&["--tag", "team.beta", "--state", "succeeded"]),
        ["second"]
    );
    assert_eq!(list(&["--limit", "1"]).len(), 1);
    let (code, ps) = e2e.cli(&["ps"]);
    assert_eq!((code, names(&ps)), (0, Vec::<String>::new()), "{ps}");

    let (code, answer) = e2e.cli(&["tag", "set", "second", "ci", "nightly.eu"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["tags"], json!(["ci", "nightly.eu"]));
    let labels = e2e
        .api::<AgentExecution>()
        .get("second")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert!(
        !labels.contains_key("tag.errand.dev/team.beta"),
        "{labels:?}"
    );
    assert!(
        labels.contains_key("tag-prefix.errand.dev/nightly"),
        "{labels:?}"
    );
    assert_eq!(list(&["--tag", "ci"]), ["piped", "second"]);
    assert_eq!(list(&["--tag", "team.*"]), ["piped"]);

    // Refused before anything is created: input twice, or more than spec.input holds.
    let (code, answer) = cli_with_stdin(
        &e2e,
        &[
            "execute", "--agent", "reader", "--name", "twice", "--input", "x",
        ],
        b"y",
    );
    assert_eq!(
        (code, &answer["error"]["code"]),
        (2, &json!("invalid_argument")),
        "{answer}"
    );
    let (code, answer) = cli_with_stdin(
        &e2e,
        &["execute", "--agent", "reader", "--name", "big"],
        &vec![b'x'; 300 * 1024],
    );
    assert_eq!(
        (code, &answer["error"]["code"]),
        (2, &json!("stdin_too_large")),
        "{answer}"
    );
    assert_eq!(list(&[]), ["piped", "second"]);
    e2e.finish().await;
}
