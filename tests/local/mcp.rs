//! `errand mcp` on the local backend, driven by a real MCP client (`rmcp`'s) through a whole run: its tools, their checks, and runs that outlive the transport.

use crate::support::local::Home;
use crate::support::mcp::McpSession;
use serde_json::{Value, json};

async fn session(home: &Home) -> McpSession {
    McpSession::start(home.command(&["mcp", "--max-wait", "20"])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_runs_an_agent_through_every_tool() {
    let home = Home::new();
    let agent = home.agent(
        "stepper",
        "echo begin; sleep 2; echo 42 > answer.txt; echo done",
    );
    let mcp = session(&home).await;
    assert_eq!(
        mcp.tool_names().await,
        [
            "cancel",
            "execute",
            "list",
            "results_download",
            "results_list",
            "status",
            "tail",
            "wait"
        ]
    );

    let (error, answer) = mcp
        .call(
            "execute",
            json!({"agent": agent, "input": "x", "name": "step", "until": 0.5}),
        )
        .await;
    assert!(!error, "{answer}");
    assert_eq!(answer["execution"]["phase"], "Running", "{answer}");
    assert_eq!(answer["execution"]["observation"]["ended"], false);

    // Over the server's --max-wait: refused, naming the argument.
    let (error, answer) = mcp.call("wait", json!({"name": "step", "until": 25})).await;
    assert!(error);
    assert_eq!(answer["error"]["code"], "invalid_argument");
    assert_eq!(
        answer["error"]["message"],
        "until: 25 is over this server's --max-wait of 20 seconds; call wait again to look longer"
    );

    let (error, answer) = mcp
        .call("wait", json!({"name": "step", "until": 15, "poll": 0.1}))
        .await;
    assert!(!error, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(
        (&execution["phase"], &execution["observation"]["ended"]),
        (&json!("Succeeded"), &json!(true))
    );
    assert_eq!(execution["output"][0]["excerpt"]["data"], "begin\ndone\n");

    let (_, answer) = mcp.call("status", json!({"name": "st"})).await;
    assert_eq!(
        answer["execution"]["output"][0],
        json!({"stream": "stdout", "total_bytes": 11})
    );
    let (_, answer) = mcp.call("tail", json!({"name": "step", "lines": 1})).await;
    assert_eq!(answer["logs"]["lines"], json!(["done"]));
    let (_, answer) = mcp.call("list", json!({})).await;
    assert_eq!(answer["executions"][0]["name"], "step");
    let (_, answer) = mcp.call("results_list", json!({"name": "step"})).await;
    let names: Vec<&str> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"output_workdir"), "{answer}");
    let file = home.path().join("run_result.json");
    let (error, answer) = mcp
        .call(
            "results_download",
            json!({"name": "step", "result": "run_result", "path": file}),
        )
        .await;
    assert!(!error, "{answer}");
    let record: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(record["exit_code"], 0, "{record}");
    let (error, answer) = mcp.call("cancel", json!({"name": "step"})).await;
    assert!(error);
    assert_eq!(answer["error"]["code"], "already_finished");

    // Inputs are checked by the command line's rules, in its words.
    let (error, answer) = mcp
        .call(
            "execute",
            json!({"agent": agent, "input": "x", "timeout_seconds": 0}),
        )
        .await;
    assert!(error);
    assert_eq!(answer["error"]["code"], "invalid_argument");
    assert_eq!(
        answer["error"]["message"],
        "invalid value '0' for '--timeout-seconds <TIMEOUT_SECONDS>': 0 is not in 1..=604800"
    );
    let (error, answer) = mcp.call("status", json!({"name": "nope"})).await;
    assert!(error);
    assert_eq!(answer["error"]["code"], "not_found");
    assert!(mcp.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_transport_or_killing_the_server_never_stops_a_run() {
    let home = Home::new();
    let agent = home.agent("slow", "sleep 3; echo finished");
    let mcp = session(&home).await;
    let (error, answer) = mcp
        .call(
            "execute",
            json!({"agent": agent, "input": "x", "name": "closed", "until": 0.2}),
        )
        .await;
    assert!(!error, "{answer}");
    assert!(
        mcp.close().await.success(),
        "the server ends when its transport closes"
    );

    let mut mcp = session(&home).await;
    mcp.call(
        "execute",
        json!({"agent": agent, "input": "x", "name": "killed", "until": 0.2}),
    )
    .await;
    mcp.server.kill().await.unwrap();

    for name in ["closed", "killed"] {
        let (code, answer) = home.json(&["wait", name, "--until", "30"]);
        assert_eq!(code, 0, "{answer}");
        assert_eq!(
            answer["execution"]["phase"], "Succeeded",
            "{name}: {answer}"
        );
        assert_eq!(
            answer["execution"]["output"][0]["excerpt"]["data"],
            "finished\n"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_with_a_sink_reports_the_notification_armed() {
    let home = Home::new();
    let agent = home.agent("quick", "echo ok");
    let events = home.path().join("events.ndjson");
    let mcp = session(&home).await;
    let (error, answer, texts) = mcp
        .call_with_texts(
            "execute",
            json!({"agent": agent, "name": "armed", "until": 10, "notify_file": events}),
        )
        .await;
    assert!(!error, "{answer}");
    assert_eq!(answer["execution"]["notify"]["file"], json!(events));
    assert!(
        texts.iter().any(|t| t
            == "notification armed: execution.finished will be delivered to the file sink; no need to poll"),
        "{texts:?}"
    );
    let (_, _, texts) = mcp
        .call_with_texts("execute", json!({"agent": agent, "until": 10}))
        .await;
    assert!(!texts.iter().any(|t| t.contains("armed")), "{texts:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&events).is_ok_and(|t| t.contains("execution.finished")) {
        assert!(
            std::time::Instant::now() < deadline,
            "no event in {}",
            events.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    mcp.close().await;
}
