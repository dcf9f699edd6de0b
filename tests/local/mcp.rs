//! `errand mcp` on the local backend, driven by a real MCP client (`rmcp`'s) through a whole run: its tools, their checks (every bad argument of every tool named in the tool's words), the session's order in raw JSON-RPC, and runs that outlive the transport.

use crate::support::local::Home;
use crate::support::mcp::{McpSession, RawSession};
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
            "schedule_create",
            "schedule_list",
            "schedule_trigger",
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

    // Inputs are checked by the command line's rules, in the tool's argument names.
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
        "timeout_seconds: invalid value '0': 0 is not in 1..=604800"
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

/// Whether `message` spells a command-line flag or value name (`--timeout-seconds`,
/// `<SECONDS>`), other than the server's own `--max-wait`.
fn spells_the_command_line(message: &str) -> bool {
    let flag = message
        .match_indices("--")
        .any(|(at, _)| !message[at..].starts_with("--max-wait"));
    let value_name = message.split('<').skip(1).any(|rest| {
        rest.split_once('>').is_some_and(|(name, _)| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c == ':')
        })
    });
    flag || value_name
}

/// A value of the wrong type for a property of an input schema (none for one of any type).
fn wrong_value(property: &Value) -> Option<Value> {
    let types: Vec<&str> = match &property["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    match types.into_iter().find(|t| *t != "null")? {
        "string" => Some(json!(5)),
        "integer" => Some(json!(1.5)),
        _ => Some(json!("abc")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_argument_of_every_tool_is_a_structured_error_naming_it() {
    let home = Home::new();
    let agent = home.agent("quick", "echo ok");
    let mcp = session(&home).await;
    let (error, answer) = mcp
        .call(
            "execute",
            json!({"agent": agent, "name": "done", "until": 10}),
        )
        .await;
    assert!(!error, "{answer}");
    let path = home.path().join("downloaded");
    // Values every tool is given for the arguments it needs.
    let needed = json!({"name": "done", "result": "run_result", "path": path, "agent": agent, "cron": "0 3 * * *"});

    // (tool, arguments, the argument named, errand's codes for it)
    let mut cases: Vec<(String, Value, String, &[&str])> = Vec::new();
    let decoding: &[&str] = &["invalid_argument"];
    let schemas = mcp.input_schemas().await;
    assert_eq!(schemas.len(), 11, "every tool is walked");
    for (tool, schema) in &schemas {
        let properties = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let valid: serde_json::Map<String, Value> = required
            .iter()
            .map(|r| ((*r).to_owned(), needed[*r].clone()))
            .collect();
        let with = |key: &str, value: Value| {
            let mut arguments = valid.clone();
            arguments.insert(key.to_owned(), value);
            Value::Object(arguments)
        };
        cases.push((
            tool.clone(),
            with("colour", json!("red")),
            "colour".into(),
            decoding,
        ));
        for (name, property) in &properties {
            if let Some(value) = wrong_value(property) {
                cases.push((tool.clone(), with(name, value), name.clone(), decoding));
            }
        }
        for missing in &required {
            let mut arguments = valid.clone();
            arguments.remove(*missing);
            cases.push((
                tool.clone(),
                Value::Object(arguments),
                (*missing).to_owned(),
                decoding,
            ));
        }
    }
    // Values of the right type that the command line refuses.
    let refused = [
        (
            "execute",
            json!({"agent": agent, "timeout_seconds": 0}),
            "timeout_seconds",
        ),
        (
            "execute",
            json!({"agent": agent, "max_bytes": 0}),
            "max_bytes",
        ),
        (
            "execute",
            json!({"agent": agent, "workdir": "/no/such/dir/"}),
            "workdir",
        ),
        (
            "execute",
            json!({"agent": agent, "notify_webhook": "https://example.com/hook"}),
            "notify_webhook_secret",
        ),
        (
            "execute",
            json!({"agent": agent, "notify_webhook": "x", "notify_webhook_secret": "s:k"}),
            "notify_webhook",
        ),
        ("execute", json!({"agent": agent, "spec": "abc"}), "spec"),
        // A manifest path that does not exist (issue 31): refused, whichever way, naming it.
        ("execute", json!({"agent": "no/such/agent.yaml"}), "agent"),
        ("wait", json!({"name": "done", "until": -1}), "until"),
        ("wait", json!({"name": "done", "poll": -1}), "poll"),
        ("wait", json!({"name": "done", "max_bytes": 0}), "max_bytes"),
    ];
    let refusals: &[&str] = &["invalid_argument", "invalid_spec", "not_found"];
    cases.extend(
        refused.map(|(tool, arguments, named)| {
            (tool.to_owned(), arguments, named.to_owned(), refusals)
        }),
    );

    for (tool, arguments, named, codes) in cases {
        let (error, answer) = mcp.call(&tool, arguments.clone()).await;
        let case = format!("{tool} {arguments}: {answer}");
        assert!(error, "{case}");
        let code = answer["error"]["code"].as_str().unwrap();
        assert!(codes.contains(&code), "{case}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(named.as_str()), "names {named}: {case}");
        assert!(!spells_the_command_line(message), "{case}");
        for problem in answer["error"]["problems"].as_array().into_iter().flatten() {
            assert!(!spells_the_command_line(&problem.to_string()), "{case}");
        }
    }
    assert!(mcp.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_out_of_order_or_unknown_get_a_json_rpc_error_and_the_server_serves_on() {
    let home = Home::new();
    let mut raw = RawSession::start(home.command(&["mcp"]));
    let discover = raw.request(1, "server/discover", json!({})).await;
    assert_eq!(
        discover["error"],
        json!({"code": -32601, "message": "method not found: server/discover"})
    );
    let early = raw.request(2, "tools/list", json!({})).await;
    assert_eq!(early["error"]["code"], -32600, "{early}");
    // A notification before the session exists is dropped, unanswered.
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let ping = raw.request(3, "ping", json!({})).await;
    assert_eq!(ping["result"], json!({}), "{ping}");
    let client = json!({"name": "raw", "version": "1"});
    let initialized = raw
        .request(
            4,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}),
        )
        .await;
    assert_eq!(
        initialized["result"]["protocolVersion"], "2025-06-18",
        "a version the server knows is the one agreed: {initialized}"
    );
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let unknown = raw.request(5, "no/such/method", json!({})).await;
    assert_eq!(
        unknown["error"],
        json!({"code": -32601, "message": "method not found: no/such/method"})
    );
    let again = raw
        .request(
            6,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}),
        )
        .await;
    assert_eq!(again["error"]["code"], -32600, "{again}");
    let bad_params = raw.request(7, "tools/call", json!({})).await;
    assert_eq!(bad_params["error"]["code"], -32602, "{bad_params}");
    let tools = raw.request(8, "tools/list", json!({})).await;
    assert_eq!(
        tools["result"]["tools"].as_array().map(Vec::len),
        Some(11),
        "{tools}"
    );
    let call = raw
        .request(9, "tools/call", json!({"name": "list", "arguments": {}}))
        .await;
    assert_eq!(call["result"]["structuredContent"]["ok"], true, "{call}");
    assert!(raw.close().await.success());

    // A version the server does not know: it answers with its own, and the client decides.
    let mut raw = RawSession::start(home.command(&["mcp"]));
    let initialized = raw
        .request(
            1,
            "initialize",
            json!({"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": client}),
        )
        .await;
    assert_eq!(
        initialized["result"]["protocolVersion"], "2025-11-25",
        "{initialized}"
    );
    assert!(raw.close().await.success());
    // A client that goes away before initializing ends the server cleanly.
    let raw = RawSession::start(home.command(&["mcp"]));
    assert!(raw.close().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_tools_create_list_and_trigger_a_schedule() {
    let home = Home::new();
    let agent = home.agent("nightly", "echo scheduled");
    let mcp = session(&home).await;
    let (error, answer) = mcp
        .call(
            "schedule_create",
            json!({"name": "nightly", "cron": "0 3 * * *", "time_zone": "Europe/Berlin",
                   "concurrency_policy": "forbid", "agent": agent, "input": "x"}),
        )
        .await;
    assert!(!error, "{answer}");
    assert_eq!(
        answer["schedule"]["concurrency_policy"], "Forbid",
        "{answer}"
    );
    let (_, answer) = mcp.call("schedule_list", json!({})).await;
    assert_eq!(answer["schedules"][0]["name"], "nightly", "{answer}");
    assert_eq!(answer["schedules"][0]["supervisor"], "running", "{answer}");
    let (error, answer) = mcp
        .call("schedule_trigger", json!({"name": "nightly"}))
        .await;
    assert!(!error, "{answer}");
    let run = answer["execution"]["name"].as_str().unwrap().to_owned();
    let (error, answer) = mcp.call("wait", json!({"name": run, "until": 15})).await;
    assert!(!error, "{answer}");
    assert_eq!(answer["execution"]["phase"], "Succeeded", "{answer}");
    // A cron the schedule cannot take is refused in the tool's own argument name.
    let (error, answer) = mcp
        .call(
            "schedule_create",
            json!({"name": "bad", "cron": "61 * * * *", "agent": agent}),
        )
        .await;
    assert!(error, "{answer}");
    assert!(
        answer["error"]["message"].as_str().unwrap().contains("61"),
        "{answer}"
    );
    let (error, answer) = mcp
        .call("schedule_trigger", json!({"name": "missing"}))
        .await;
    assert!(error, "{answer}");
    assert_eq!(answer["error"]["code"], "not_found", "{answer}");
    let deleted = home.run(&["schedule", "delete", "nightly"]);
    assert!(
        deleted.status.success(),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
}
