//! `errand mcp` on the local backend driven by a client errand did not write: the official MCP Python SDK (`mcp` 2.3.0, `ClientSession` over stdio), listing the tools and running an agent through execute, wait and the results.

use serde_json::{Value, json};

use crate::support::local::Home;

/// Runs tests/support/mcp_sdk_client.py with `calls` against `errand mcp` in `home`; its
/// answer (the server's name, its tools, each call's result). The SDK's environment is
/// created on first use; not being able to create it fails the test.
fn sdk_session(home: &Home, calls: Value) -> Value {
    let support = format!("{}/tests/support", env!("CARGO_MANIFEST_DIR"));
    let plan = json!({"command": [env!("CARGO_BIN_EXE_errand"), "mcp", "--max-wait", "20"], "calls": calls});
    let plan = home.write("mcp-plan.json", &plan.to_string());
    let output = std::process::Command::new("python3")
        .arg(format!("{support}/python_clients.py"))
        .arg(format!("{support}/mcp_sdk_client.py"))
        .arg(plan)
        .env("ERRAND_HOME", home.path().join("home"))
        .env("ERRAND_BACKEND", "local")
        .env_remove("ERRAND_STORE")
        .env_remove("ERRAND_NAMESPACE")
        .current_dir(home.path())
        .output()
        .expect("running the MCP Python SDK client");
    assert!(
        output.status.success(),
        "the MCP Python SDK client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_official_mcp_python_sdk_runs_an_agent_through_errand_mcp() {
    let home = Home::new();
    let agent = home.agent("stepper", "echo 42 > answer.txt; echo done");
    let record = home.path().join("run_result.json");
    let answer = sdk_session(
        &home,
        json!([
            {"tool": "execute", "arguments": {"agent": agent, "input": "x", "name": "sdk", "until": 0.2}},
            {"tool": "wait", "arguments": {"name": "sdk", "until": 15, "poll": 0.1}},
            {"tool": "results_list", "arguments": {"name": "sdk"}},
            {"tool": "results_download", "arguments": {"name": "sdk", "result": "run_result", "path": record}},
            {"tool": "status", "arguments": {"name": "nope"}},
        ]),
    );
    assert_eq!(answer["server"], "errand", "{answer}");
    assert_eq!(
        answer["tools"],
        json!([
            "cancel",
            "execute",
            "list",
            "results_download",
            "results_list",
            "status",
            "tail",
            "wait"
        ])
    );
    let calls = answer["calls"].as_array().unwrap();
    for call in &calls[..4] {
        assert_eq!(call["is_error"], false, "{call}");
    }
    assert_eq!(calls[0]["result"]["execution"]["name"], "sdk", "{answer}");
    let waited = &calls[1]["result"]["execution"];
    assert_eq!(
        (&waited["phase"], &waited["observation"]["ended"]),
        (&json!("Succeeded"), &json!(true)),
        "{answer}"
    );
    let results: Vec<&str> = calls[2]["result"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(results.contains(&"output_workdir"), "{answer}");
    let run_result: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert_eq!(run_result["exit_code"], 0, "{run_result}");
    // A tool error reaches the SDK as one, with errand's code.
    assert_eq!(calls[4]["is_error"], true, "{answer}");
    assert_eq!(calls[4]["result"]["error"]["code"], "not_found", "{answer}");
}
