//! The Python clients errand did not write (the MCP, CloudEvents and OpenAI SDKs, pinned by `python-clients.lock`), each a script of this folder run in their environment, which `python_clients.py` creates on first use.

use std::process::Command;

/// `python3 python_clients.py SCRIPT`: the script of this folder in the clients' environment;
/// the caller adds its arguments.
pub fn command(script: &str) -> Command {
    let support = format!("{}/tests/support", env!("CARGO_MANIFEST_DIR"));
    let mut python = Command::new("python3");
    python
        .arg(format!("{support}/python_clients.py"))
        .arg(format!("{support}/{script}"));
    python
}

/// What the official CloudEvents Python SDK (`cloudevents_read.py`) reads from each of
/// `messages` (`{"headers", "body"}`, with an optional signing `key`): the event, or its
/// `error`, and with a key whether the signature header verifies.
pub fn read_cloudevents(messages: &serde_json::Value) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("cloudevents.json");
    std::fs::write(&plan, messages.to_string()).unwrap();
    let mut python = command("cloudevents_read.py");
    python.arg(&plan);
    json_of(python, "the CloudEvents Python SDK reader")
}

/// What OpenAI's Python client (`openai_client.py`) reports against `args`: the OpenAI base URL,
/// a token, the model and (through the gateway) a stranger's token. It blocks its thread.
pub fn openai_report(args: &[String]) -> serde_json::Value {
    let mut python = command("openai_client.py");
    python.args(args);
    json_of(python, "OpenAI's Python client")
}

/// Asserts OpenAI's client got the stand-in's three scripted answers, in `openai_client.py`'s
/// order: a plain completion (with its usage), a streamed one and an async one.
pub fn assert_openai_answers(
    openai: &serde_json::Value,
    [plain, streamed, asynchronous]: [&str; 3],
) {
    let completion = &openai["completion"];
    assert_eq!(completion["content"], plain, "{openai}");
    assert!(
        completion["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{openai}"
    );
    assert_eq!(openai["streamed"], streamed, "{openai}");
    assert_eq!(openai["async"], asynchronous, "{openai}");
}

/// Runs `python` (from [`command`]) and returns the JSON it printed; a client that fails, or
/// an environment that cannot be created, fails the test naming `what`.
pub fn json_of<T: serde::de::DeserializeOwned>(mut python: Command, what: &str) -> T {
    let output = python
        .output()
        .unwrap_or_else(|e| panic!("running {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{what} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}
