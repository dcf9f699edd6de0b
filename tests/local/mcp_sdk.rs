//! `errand mcp` on the local backend driven by a client errand did not write: the official MCP Python SDK (`mcp` 2.3.0), both its default `mcp.Client` (which probes `server/discover` before `initialize`) and `ClientSession`, listing the tools and running an agent through execute, wait and the results.

use serde_json::{Value, json};

use crate::support::local::Home;
use crate::support::mcp::python_sdk;

#[test]
fn the_official_mcp_python_sdk_runs_an_agent_through_errand_mcp_with_either_client() {
    for client in ["client", "session"] {
        let home = Home::new();
        let agent = home.agent("stepper", "echo 42 > answer.txt; echo done");
        let record = home.path().join("run_result.json");
        let answer = python_sdk(
            client,
            &home.command(&["mcp", "--max-wait", "20"]),
            json!([
                {"tool": "execute", "arguments": {"agent": agent, "input": "x", "name": "sdk", "until": 0.2}},
                {"tool": "wait", "arguments": {"name": "sdk", "until": 15, "poll": 0.1}},
                {"tool": "results_list", "arguments": {"name": "sdk"}},
                {"tool": "results_download", "arguments": {"name": "sdk", "result": "run_result", "path": record}},
                {"tool": "status", "arguments": {"name": "nope"}},
                {"tool": "wait", "arguments": {"name": "sdk", "until": "abc"}},
            ]),
        );
        assert_eq!(answer["server"], "errand", "{client}: {answer}");
        assert_eq!(
            answer["protocol_version"], "2025-11-25",
            "{client}: {answer}"
        );
        assert_eq!(
            answer["tools"],
            json!([
                "cancel",
                "execute",
                "list",
                "results_download",
                "results_list",
                "schedule_create",
                "schedule_list",
                "schedule_trigger",
                "status",
                "tail",
                "wait"
            ]),
            "{client}"
        );
        let calls = answer["calls"].as_array().unwrap();
        for call in &calls[..4] {
            assert_eq!(call["is_error"], false, "{client}: {call}");
        }
        assert_eq!(calls[0]["result"]["execution"]["name"], "sdk", "{answer}");
        let waited = &calls[1]["result"]["execution"];
        assert_eq!(
            (&waited["phase"], &waited["observation"]["ended"]),
            (&json!("Succeeded"), &json!(true)),
            "{client}: {answer}"
        );
        let results: Vec<&str> = calls[2]["result"]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(results.contains(&"output_workdir"), "{client}: {answer}");
        let run_result: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
        assert_eq!(run_result["exit_code"], 0, "{client}: {run_result}");
        // Tool errors reach the SDK as such, with errand's code, in the tool's argument names.
        assert_eq!(calls[4]["is_error"], true, "{client}: {answer}");
        assert_eq!(calls[4]["result"]["error"]["code"], "not_found", "{answer}");
        assert_eq!(calls[5]["is_error"], true, "{client}: {answer}");
        assert_eq!(
            calls[5]["result"]["error"],
            json!({"code": "invalid_argument", "message": "until: \"abc\" is not a number"}),
            "{client}"
        );
    }
}
