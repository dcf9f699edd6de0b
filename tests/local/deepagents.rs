//! The deepagents runtime (runtimes/deepagents) on the local backend: NeMo agents run as real deepagents agents against the stand-in model provider, through an environment that binds the key from a Secret and points the model at the stand-in.

use std::sync::Once;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::errand::wait_for;
use crate::support::local::{Deployed, Home, exchange, post};
use crate::support::model_server::{
    ModelServer, assert_from_the_nemo_calculator, assert_sent_the_nemo_calculator,
    calculator_script,
};
use crate::support::python_clients;
use crate::support::store::tar_files;
use crate::support::telemetry::{CollectedSpan, local_collector, parse_spans, trace_id_of};

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

/// Creates the runtime's Python environment once for this binary (its cache outlives the run):
/// a run that had to build it would spend its timeout on pip. Not being able to build it fails
/// the tests: they never skip.
fn prepared() {
    static PREPARE: Once = Once::new();
    PREPARE.call_once(|| {
        let output = std::process::Command::new(repo("runtimes/deepagents/errand-deepagents"))
            .arg("--prepare")
            .output()
            .expect("running runtimes/deepagents/errand-deepagents --prepare");
        assert!(
            output.status.success(),
            "the deepagents runtime's Python environment could not be created: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

fn applied(home: &Home, file: &str) {
    let (code, answer) = home.json(&["apply", "-f", file]);
    assert_eq!(code, 0, "{answer}");
}

/// A home with the deepagents runtime installed: its launcher run from the checkout.
fn home_with_runtime() -> Home {
    prepared();
    let home = Home::new();
    let runtime = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentRuntime", "metadata": {"name": "deepagents"},
        "spec": {"harnessKind": "deepagents", "image": "errand.local/deepagents:test",
                 "command": [repo("runtimes/deepagents/errand-deepagents")],
                 "configFormats": ["nemo-agents-spec-v1", "agents-spec-v1"]},
    });
    let file = home.write("runtime.json", &runtime.to_string());
    applied(&home, file.to_str().unwrap());
    home
}

/// A home with the deepagents runtime installed, the NeMo calculator Agent, the model key
/// Secret and the `stand-in` environment, which binds `NVIDIA_API_KEY` from the Secret, points
/// the default model at `server` and adds `mcp` (the config's `mcp` section, `null` for none).
fn home_for(server: &ModelServer, mcp: Value) -> Home {
    let home = home_with_runtime();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "model-keys"},
        "stringData": {"nvidia": "nvapi-stand-in-key"},
    });
    // Where the runtime keeps its Python environment, should this process say (a local run gets
    // only PATH, HOME, LANG and TZ of errand's environment).
    let env: serde_json::Map<String, Value> = std::env::var("DEEPAGENTS_CACHE_DIR")
        .into_iter()
        .map(|dir| ("DEEPAGENTS_CACHE_DIR".to_owned(), Value::String(dir)))
        .collect();
    let mut environment = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment", "metadata": {"name": "stand-in"},
        "spec": {"overlay": {"secrets": {"NVIDIA_API_KEY": "model-keys#nvidia"},
                             "models": {"default": {"base_url": server.base_url()}},
                             "env": env}},
    });
    if !mcp.is_null() {
        environment["spec"]["overlay"]["mcp"] = mcp;
    }
    for (name, manifest) in [("secret", secret), ("environment", environment)] {
        let file = home.write(&format!("{name}.json"), &manifest.to_string());
        applied(&home, file.to_str().unwrap());
    }
    applied(&home, &repo("examples/nemo/agent.yaml"));
    home
}

/// `errand execute` of the calculator in the `stand-in` environment with `timeout`, and `extra`
/// flags.
fn execute(home: &Home, timeout: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "execute",
        "--agent",
        "calculator-agent",
        "--environment",
        "stand-in",
        "--input",
        "What is 12 multiplied by 8?",
        "--timeout-seconds",
        timeout,
    ];
    args.extend(extra);
    home.json(&args)
}

#[test]
fn the_nemo_calculator_runs_as_a_deepagents_agent_that_writes_its_answer_with_a_tool() {
    let server = ModelServer::start(&calculator_script(0));
    let home = home_for(&server, Value::Null);
    let (code, answer) = execute(&home, "120", &[]);
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(execution["phase"], "Succeeded", "{answer}");
    assert_eq!(execution["response"], "96", "{answer}");
    let name = execution["name"].as_str().unwrap();

    // The tool the model asked for wrote into the workspace, which errand kept.
    let workdir = tar_files(&home.download("output_workdir", name));
    assert_eq!(workdir.get("answer.txt").map(String::as_str), Some("96\n"));
    // The transcript names the tool call, its result and the token counts.
    let artifacts = tar_files(&home.download("output_artifacts", name));
    let transcript: Value = serde_json::from_str(&artifacts["transcript.json"]).unwrap();
    assert_eq!(
        transcript["tool_calls"][0]["name"], "write_file",
        "{transcript}"
    );
    assert_eq!(
        transcript["tool_calls"][0]["args"]["file_path"],
        "/answer.txt"
    );
    let tool = transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["type"] == "tool")
        .expect("a tool message");
    assert_eq!(tool["name"], "write_file");
    assert_eq!(transcript["model_calls"], 2);
    assert!(
        transcript["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{transcript}"
    );

    // What the stand-in was sent: the config's model, the key from the Secret, the
    // instructions as the system prompt, deepagents' filesystem tools, streamed.
    let requests = assert_sent_the_nemo_calculator(&server);
    for request in &requests {
        assert_eq!(request["stream"], true);
        assert!(
            request["tools"]
                .as_array()
                .unwrap()
                .contains(&json!("write_file")),
            "{request}"
        );
    }
    assert_eq!(
        requests[0]["messages"][1]["content"],
        "What is 12 multiplied by 8?"
    );
    // The second request carries the tool's result back to the model.
    let returned = requests[1]["messages"].as_array().unwrap();
    assert!(
        returned
            .iter()
            .any(|m| m["role"] == "tool" && m["content"].as_str().unwrap().contains("answer.txt")),
        "{returned:?}"
    );
}

#[tokio::test]
async fn with_auto_telemetry_each_model_call_is_a_span_of_the_executions_trace() {
    let Some(collector) = local_collector().await else {
        return;
    };
    let server = ModelServer::start(&calculator_script(0));
    let home = home_for(&server, Value::Null);
    let endpoint = collector.endpoint.as_str();
    let (code, answer) = execute(
        &home,
        "120",
        &["--auto-telemetry", "--otlp-endpoint", endpoint],
    );
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], "96", "{answer}");
    let trace_id = trace_id_of(answer["execution"]["uid"].as_str().unwrap());
    let model = "nvidia-nemotron-3-5-lightning-30b-a3b";
    let chat = format!("chat {model}");
    let spans = wait_for("the model calls' spans", Duration::from_secs(60), || {
        let spans: Vec<CollectedSpan> = parse_spans(&collector.output())
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect();
        let calls = spans.iter().filter(|s| s.name == chat).count();
        let run = spans.iter().any(|s| s.name == "run");
        std::future::ready((calls == 2 && run).then_some(spans))
    })
    .await;
    let run = spans.iter().find(|s| s.name == "run").unwrap();
    for call in spans.iter().filter(|s| s.name == chat) {
        assert_eq!(
            call.parent_span_id, run.span_id,
            "a child of errand's run span: {call:?}"
        );
        assert_eq!(call.attributes["gen_ai.operation.name"], "chat", "{call:?}");
        assert_eq!(call.attributes["gen_ai.request.model"], model, "{call:?}");
        assert_eq!(
            call.attributes["gen_ai.provider.name"], "nvidia",
            "{call:?}"
        );
        assert!(
            call.attributes.contains_key("gen_ai.usage.input_tokens"),
            "{call:?}"
        );
        assert_eq!(
            call.resource["service.name"], "calculator-agent",
            "{call:?}"
        );
    }
}

#[test]
fn a_timed_out_deepagents_run_stops_the_model_call_and_keeps_its_transcript_and_files() {
    // The model takes a minute over its answer; the run may take 15 seconds.
    let server = ModelServer::start(&calculator_script(60));
    let home = home_for(&server, Value::Null);
    let started = std::time::Instant::now();
    let (code, answer) = execute(&home, "15", &[]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(45),
        "{answer}"
    );
    assert_eq!(code, 1, "{answer}");
    let execution = &answer["error"]["execution"];
    assert_eq!(execution["reason"], "DeadlineExceeded", "{answer}");
    let name = execution["name"].as_str().unwrap();
    let run_error: Value = serde_json::from_slice(&home.download("run_error", name)).unwrap();
    assert_eq!(run_error["timed_out"], true, "{run_error}");
    // The file the tool wrote before the deadline, and the transcript up to the model call
    // SIGTERM stopped.
    let workdir = tar_files(&home.download("output_workdir", name));
    assert_eq!(workdir.get("answer.txt").map(String::as_str), Some("96\n"));
    let artifacts = tar_files(&home.download("output_artifacts", name));
    let transcript: Value = serde_json::from_str(&artifacts["transcript.json"]).unwrap();
    assert_eq!(transcript["error"], "stopped by signal 15", "{transcript}");
    assert_eq!(transcript["tool_calls"][0]["name"], "write_file");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn an_mcp_server_in_the_environment_gives_the_deepagents_agent_its_tool() {
    let server = ModelServer::start(&json!([
        {"tool_calls": [{"name": "multiply", "arguments": {"a": 12, "b": 8}}]},
        {"content": "96"},
    ]));
    let log = tempfile::tempdir().unwrap();
    let log_file = log.path().join("calls.log");
    let support = repo("tests/support");
    // The server, built with the official MCP Python SDK, runs over stdio in the tests'
    // Python clients' environment.
    let mcp = json!({"servers": {"calculator": {
        "command": "python3",
        "args": [format!("{support}/python_clients.py"), format!("{support}/mcp_tool_server.py")],
        "env": {"MCP_TOOL_LOG": log_file},
    }}});
    let home = home_for(&server, mcp);
    let (code, answer) = execute(&home, "120", &[]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["response"], "96", "{answer}");
    // The call reached the MCP server, which logged it; the model's key did not.
    assert_eq!(
        std::fs::read_to_string(&log_file).unwrap_or_default(),
        "multiply 12 8 = 96\n"
    );
    let requests = server.requests();
    assert!(
        requests[0]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("multiply")),
        "{}",
        requests[0]
    );
    let returned = requests[1]["messages"].as_array().unwrap();
    assert!(
        returned
            .iter()
            // The MCP tool's result, as text or as content blocks.
            .any(|m| m["role"] == "tool" && m["content"].to_string().contains("96")),
        "{returned:?}"
    );
}

#[test]
fn a_provider_without_a_known_endpoint_fails_naming_the_field_before_any_model_call() {
    let server = ModelServer::start(&calculator_script(0));
    let home = home_for(&server, Value::Null);
    let environment = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment", "metadata": {"name": "acme"},
        "spec": {"overlay": {"secrets": {"NVIDIA_API_KEY": "model-keys#nvidia"},
                             "models": {"default": {"provider": "openai_compatible"}}}},
    });
    let file = home.write("acme.json", &environment.to_string());
    applied(&home, file.to_str().unwrap());
    let (code, answer) = home.json(&[
        "execute",
        "--agent",
        "calculator-agent",
        "--environment",
        "acme",
        "--input",
        "What is 12 multiplied by 8?",
    ]);
    assert_eq!(code, 1, "{answer}");
    let execution = &answer["error"]["execution"];
    assert_eq!(execution["phase"], "Failed", "{answer}");
    let stderr = execution["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["stream"] == "stderr")
        .map(|o| o["excerpt"]["data"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    assert!(
        stderr.contains(
            "models.default: provider 'openai_compatible' has no known OpenAI-compatible endpoint; set models.default.base_url"
        ),
        "{answer}"
    );
    let name = execution["name"].as_str().unwrap();
    let run_result: Value = serde_json::from_slice(&home.download("run_result", name)).unwrap();
    assert_eq!(run_result["exit_code"], 2, "{run_result}");
    assert!(server.requests().is_empty());
}

/// The endpoint `examples/nemo/stand-in-environment.yaml` points the model at; a test puts its
/// own stand-in's there.
const EXAMPLE_BASE_URL: &str = "http://127.0.0.1:8000/v1";

#[test]
fn the_nemo_inline_agent_runs_as_written_with_only_its_endpoint_pointed_at_the_stand_in() {
    let reply = "The north grew fastest: two new stores opened there.";
    let server = ModelServer::start(&json!([{ "content": reply }]));
    let home = home_with_runtime();
    let example = std::fs::read_to_string(repo("examples/nemo/stand-in-environment.yaml")).unwrap();
    assert!(example.contains(EXAMPLE_BASE_URL), "{example}");
    let environment = home.write(
        "stand-in-environment.yaml",
        &example.replace(EXAMPLE_BASE_URL, &server.base_url()),
    );
    applied(&home, environment.to_str().unwrap());

    let spec_file = repo("examples/nemo/inline-agent.json");
    let (code, answer) = home.json(&["execute", "--local", "--spec-file", &spec_file]);
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(execution["phase"], "Succeeded", "{answer}");
    assert_eq!(execution["agent"], "one-off-analyst", "{answer}");
    assert_eq!(execution["response"], reply, "{answer}");

    // deepagents ran it, against the endpoint the environment merged in.
    let name = execution["name"].as_str().unwrap();
    let artifacts = tar_files(&home.download("output_artifacts", name));
    let transcript: Value = serde_json::from_str(&artifacts["transcript.json"]).unwrap();
    assert_eq!(transcript["runtime"], "errand-deepagents", "{transcript}");
    assert_eq!(transcript["model"]["base_url"], server.base_url());

    // The stand-in was sent the document's model, the Secret's key and its instructions.
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(&spec_file).unwrap()).unwrap();
    let config = &spec["agent"]["config"];
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let request = &requests[0];
    assert_eq!(request["model"], config["models"]["default"]["model"]);
    assert_eq!(request["authorization"], "Bearer nvapi-stand-in-key");
    assert_eq!(request["messages"][0]["role"], "system");
    let instructions = config["instructions"].as_str().unwrap();
    assert!(
        request["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with(instructions),
        "{request}"
    );
    assert_eq!(request["messages"][1]["content"], spec["input"]);
}

#[test]
fn a_deployed_deepagents_agent_answers_through_the_gateway_and_openais_client_from_its_server() {
    let server = ModelServer::start(&json!([
        // `invoke`: the tool writes the answer into the workspace, then the answer.
        {"tool_calls": [{"name": "write_file", "arguments": {"file_path": "/answer.txt", "content": "96\n"}}]},
        {"content": "96"},
        // Two turns of a chat session.
        {"content": "Hello, I multiply."},
        {"content": "Still 96."},
        // OpenAI's client: plain, streamed, async.
        {"content": "a plain answer"},
        {"content": "an answer streamed in pieces"},
        {"content": "an async answer"},
    ]));
    let d = Deployed::in_home(home_for(&server, Value::Null), &["calc"]);
    let (code, answer) = d.json(&[
        "deploy",
        "calc",
        "--agent",
        "calculator-agent",
        "--environment",
        "stand-in",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["deployment"]["phase"], "Ready", "{answer}");
    let address = answer["deployment"]["address"].as_str().unwrap().to_owned();

    // Through errand's gateway (served by the command): one run of the agent a request.
    let (code, answer) = d.json(&["invoke", "calc", "--input", "What is 12 multiplied by 8?"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["invoke"]["output"], "96", "{answer}");
    let workspace = d
        .home
        .path()
        .join("home/deployments/default/calc/workspace");
    assert_eq!(
        std::fs::read_to_string(workspace.join("answer.txt"))
            .ok()
            .as_deref(),
        Some("96\n"),
        "the deployment's workspace is the agent's filesystem"
    );
    for (message, reply) in [("hello", "Hello, I multiply."), ("and now?", "Still 96.")] {
        let (code, answer) =
            d.json(&["chat", "calc", "--session-name", "s1", "--message", message]);
        assert_eq!(code, 0, "{answer}");
        assert_eq!(answer["chat"]["message"]["content"], reply, "{answer}");
    }
    // The second turn carried the whole conversation to the model.
    let requests = server.requests();
    let contents: Vec<(&str, &str)> = requests[3]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        contents,
        [
            ("user", "hello"),
            ("assistant", "Hello, I multiply."),
            ("user", "and now?")
        ]
    );

    // Bad requests are refused in OpenAI's error shape (`type` its class of the status)
    // before the agent runs.
    let host = address.trim_start_matches("http://");
    for (response, status, message, kind) in [
        (
            post(&address, "/invoke", "{not json"),
            "400",
            "the body is not JSON",
            "invalid_request_error",
        ),
        (
            post(&address, "/invoke", r#"{"input": 7}"#),
            "400",
            "input: is required (a string)",
            "invalid_request_error",
        ),
        (
            post(&address, "/chat", r#"{"messages": []}"#),
            "400",
            "messages: is required (a non-empty list of {role, content})",
            "invalid_request_error",
        ),
        (
            post(&address, "/nowhere", "{}"),
            "404",
            "no route POST /nowhere",
            "not_found_error",
        ),
        (
            // Refused on its header, unread.
            exchange(
                &address,
                &format!(
                    "POST /invoke HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5000000\r\n\r\n"
                ),
            ),
            "413",
            "the body is 5000000 bytes; at most 4194304 are taken",
            "invalid_request_error",
        ),
    ] {
        assert!(
            response.starts_with(&format!("HTTP/1.1 {status} ")),
            "{response}"
        );
        let body: Value = serde_json::from_str(response.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        let error = &body["error"];
        assert_eq!(error["type"], kind, "{body}");
        assert!(
            error["message"].as_str().unwrap().starts_with(message),
            "{body}"
        );
    }

    // Past its 32 connections (each held here without a request) one more is answered 503 at
    // once, and a freed slot serves again.
    let held: Vec<std::net::TcpStream> = (0..32)
        .map(|_| std::net::TcpStream::connect(host).expect("a connection to the server"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut busy = String::new();
    std::io::Read::read_to_string(
        &mut std::net::TcpStream::connect(host).expect("one more connection"),
        &mut busy,
    )
    .expect("the 503, then the server closes");
    assert!(busy.starts_with("HTTP/1.1 503 "), "{busy}");
    assert!(busy.contains("\"code\": \"overloaded\""), "{busy}");
    drop(held);
    let health = format!("GET /health HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let served = (0..40).any(|_| {
        std::thread::sleep(Duration::from_millis(250));
        exchange(&address, &health).starts_with("HTTP/1.1 200 ")
    });
    assert!(served, "a freed connection slot serves again");

    // OpenAI's own Python client against the agent server (the local backend has no standing
    // gateway listener): a completion validated strictly, streamed, async, and a refusal.
    let args = [
        format!("{address}/v1"),
        "unused".to_owned(),
        "calculator-agent".to_owned(),
    ];
    let openai = python_clients::openai_report(&args);
    python_clients::assert_openai_answers(
        &openai,
        [
            "a plain answer",
            "an answer streamed in pieces",
            "an async answer",
        ],
    );
    assert_eq!(
        openai["completion"]["raw_keys"],
        json!(["choices", "created", "id", "model", "object", "usage"]),
        "{openai}"
    );
    let refused = &openai["refusals"]["bad_request"];
    assert_eq!(
        (
            &refused["class"],
            &refused["status"],
            &refused["type"],
            &refused["code"]
        ),
        (
            &json!("BadRequestError"),
            &json!(400),
            &json!("invalid_request_error"),
            &json!("bad_request")
        ),
        "{openai}"
    );

    // Every model call had the config's model, the Secret's key and the instructions; the
    // refused request never reached the model.
    let requests = server.requests();
    assert_eq!(requests.len(), 7, "{requests:?}");
    requests.iter().for_each(assert_from_the_nemo_calculator);
}
