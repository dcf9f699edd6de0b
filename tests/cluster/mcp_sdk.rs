//! `errand mcp` on the cluster backend driven by the official MCP Python SDK (`mcp` 2.3.0): its default `mcp.Client` (which probes `server/discover` first) and `ClientSession` each run an agent in a pod through execute, wait and the results.

use serde_json::{Value, json};

use crate::support::cluster;
use crate::support::harness::{Harness, Mode};
use crate::support::mcp::python_sdk;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_python_sdk_runs_an_agent_on_the_cluster_with_either_client() {
    let Some(harness) = Harness::start("mcp-sdk", Mode::WithPods).await else {
        return;
    };
    harness
        .create_agent("sdk-agent", cluster::BUSYBOX_IMAGE, "echo from-the-pod")
        .await;
    let downloads = tempfile::tempdir().unwrap();
    for client in ["client", "session"] {
        let name = format!("via-{client}");
        let record = downloads.path().join(format!("{name}.json"));
        let server = harness.command(&["mcp", "--max-wait", "20"]);
        let calls = json!([
            {"tool": "execute", "arguments": {"agent": "sdk-agent", "input": "x", "name": name, "until": 1}},
            // 12 looks of 15 s: the harness's RUN_WAIT.
            {"tool": "wait", "arguments": {"name": name, "until": 15}, "until_ended": 12},
            {"tool": "results_list", "arguments": {"name": name}},
            {"tool": "results_download", "arguments": {"name": name, "result": "run_result", "path": record}},
            {"tool": "status", "arguments": {"name": "nothing-like-it"}},
        ]);
        let answer = tokio::task::spawn_blocking(move || python_sdk(client, &server, calls))
            .await
            .unwrap();
        assert_eq!(answer["server"], "errand", "{client}: {answer}");
        assert_eq!(
            answer["tools"].as_array().map(Vec::len),
            Some(11),
            "{answer}"
        );
        let calls = answer["calls"].as_array().unwrap();
        for call in &calls[..4] {
            assert_eq!(call["is_error"], false, "{client}: {call}");
        }
        let execution = &calls[1]["result"]["execution"];
        assert_eq!(
            (&execution["phase"], &execution["observation"]["ended"]),
            (&json!("Succeeded"), &json!(true)),
            "{client}: {answer}"
        );
        let log = execution["output"][0]["excerpt"]["data"]
            .as_str()
            .unwrap_or_default();
        assert!(log.starts_with("from-the-pod\n"), "{client}: {execution}");
        assert!(
            calls[2]["result"]["results"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "run_result"),
            "{client}: {answer}"
        );
        let run_result: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
        assert_eq!(run_result["exit_code"], 0, "{client}: {run_result}");
        assert_eq!(calls[4]["is_error"], true, "{client}: {answer}");
        assert_eq!(calls[4]["result"]["error"]["code"], "not_found", "{answer}");
    }
    harness.finish().await;
}
