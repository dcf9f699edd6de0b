//! The gateway on the test cluster: invoke, chat sessions (resumed after a gateway restart) and OpenAI chat completions (plain and streamed, with curl and with OpenAI's own Python client, which also lists and retrieves the model) reach a deployment's ready pod; unknown targets, deployments not Ready, malformed bodies, missing tokens and tokens without RBAC are refused with 404, 503, 400, 401 and 403.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::deployments::{
    allow_invoke, call, create_deployment, create_server_agent, token_of, try_call, wait_for_phase,
};
use crate::support::errand::wait_for;
use crate::support::harness::{Harness, RUN_WAIT};
use crate::support::python_clients;
use errand::api::DeploymentPhase;

/// Agent and deployment `name` of the test agent server, with `env` in its environment.
async fn deploy(harness: &Harness, name: &str, env: Value) {
    create_server_agent(harness, name).await;
    create_deployment(
        harness,
        name,
        name,
        json!({"environment": {"overlay": {"env": env}}}),
    )
    .await;
}

/// Blocks its thread: the tests run on a multi-thread runtime so that the gateway and the
/// controller in this process keep serving meanwhile (as for `Harness::cli`).
fn curl(args: &[&str]) -> String {
    let output = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "30"])
        .args(args)
        .output()
        .expect("curl runs");
    assert!(
        output.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_invokes_chats_and_completes_for_callers_with_rbac_only() {
    let Some(mut harness) = Harness::start_with_gateway("gateway").await else {
        return;
    };
    let caller = token_of(&harness, "caller").await;
    let stranger = token_of(&harness, "stranger").await;
    allow_invoke(&harness, "caller").await;
    deploy(&harness, "calc", json!({})).await;
    deploy(&harness, "stuck", json!({"AGENT_SERVER_NEVER_READY": "1"})).await;
    wait_for_phase(&harness, "calc", DeploymentPhase::Ready, RUN_WAIT).await;
    let token = Some(caller.as_str());

    // invoke, by deployment and by agent (once the gateway's caches have the ready pod).
    let invoke = json!({"input": "hello"});
    let answer = wait_for(
        "the gateway to route to calc",
        Duration::from_secs(30),
        || {
            let invoke = invoke.clone();
            let harness = &harness;
            async move {
                let (status, body) = call(
                    harness,
                    "POST",
                    "deployments/calc/invoke",
                    token,
                    Some(invoke),
                )
                .await;
                (status == 200).then_some(body)
            }
        },
    )
    .await;
    assert_eq!(answer["output"], "calc: hello");
    let (status, by_agent) = call(
        &harness,
        "POST",
        "agents/calc/invoke",
        token,
        Some(json!({"input": "hi"})),
    )
    .await;
    assert_eq!(
        (status, by_agent["output"].as_str()),
        (200, Some("calc: hi"))
    );

    // A chat session: the agent sees the whole conversation (its turn count).
    for (turn, message) in [(1, "one"), (2, "two")] {
        let (status, reply) = call(
            &harness,
            "POST",
            "deployments/calc/chat",
            token,
            Some(json!({"session": "s1", "message": message})),
        )
        .await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["turn"], turn);
        assert_eq!(
            reply["message"]["content"],
            format!("calc turn {turn}: {message}")
        );
    }
    // The gateway restarts (the whole controller process's tasks go); the session resumes.
    harness.kill_controller().await;
    harness.start_controller().await;
    let resumed = wait_for(
        "the restarted gateway to answer",
        Duration::from_secs(60),
        || {
            let harness = &harness;
            async move {
                let (status, reply) = try_call(
                    harness,
                    "POST",
                    "deployments/calc/chat",
                    token,
                    Some(json!({"session": "s1", "message": "three"})),
                )
                .await
                .ok()?;
                (status == 200).then_some(reply)
            }
        },
    )
    .await;
    assert_eq!(resumed["message"]["content"], "calc turn 3: three");
    let (_, sessions) = call(&harness, "GET", "deployments/calc/sessions", token, None).await;
    assert_eq!(sessions["sessions"][0]["name"], "s1");
    assert_eq!(sessions["sessions"][0]["turns"], 3);
    let (_, session) = call(&harness, "GET", "deployments/calc/sessions/s1", token, None).await;
    assert_eq!(session["turns"][0]["user"], "one");

    // OpenAI chat completions with curl, as any OpenAI client sends them; streamed too.
    let base = format!(
        "{}/v1/namespaces/{}/agents/calc/v1",
        harness.gateway_url(),
        harness.namespace.name()
    );
    let auth = format!("Authorization: Bearer {caller}");
    let completion: Value = serde_json::from_str(&curl(&[
        "-H",
        &auth,
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"model":"calc","messages":[{"role":"user","content":"what is up"}]}"#,
        &format!("{base}/chat/completions"),
    ]))
    .unwrap();
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(
        completion["choices"][0]["message"]["content"],
        "calc turn 1: what is up"
    );
    let stream = curl(&[
        "-N",
        "-H",
        &auth,
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"model":"calc","stream":true,"messages":[{"role":"user","content":"a b"}]}"#,
        &format!("{base}/chat/completions"),
    ]);
    let chunks: Vec<&str> = stream.lines().filter(|l| l.starts_with("data: ")).collect();
    assert!(chunks.len() >= 3, "{stream}");
    assert_eq!(chunks.last(), Some(&"data: [DONE]"));
    assert!(stream.contains("chat.completion.chunk"), "{stream}");

    // OpenAI's own Python client: the model list, completions plain (validated strictly as
    // its `ChatCompletion`), streamed and async, and each refusal raised as its error class.
    let args = [
        base.clone(),
        caller.clone(),
        "calc".to_owned(),
        stranger.clone(),
    ];
    let openai = tokio::task::spawn_blocking(move || python_clients::openai_report(&args))
        .await
        .unwrap();
    assert_eq!(openai["models"], json!(["calc"]), "{openai}");
    assert_eq!(openai["model"]["id"], "calc", "{openai}");
    assert_eq!(
        openai["model"]["owned_by"],
        harness.namespace.name(),
        "{openai}"
    );
    assert_eq!(
        (
            &openai["missing_model"]["class"],
            &openai["missing_model"]["code"]
        ),
        (&json!("NotFoundError"), &json!("model_not_found")),
        "{openai}"
    );
    let completion = &openai["completion"];
    assert_eq!(completion["content"], "calc turn 1: what is up", "{openai}");
    assert!(completion["created"].as_i64().unwrap() > 0, "{openai}");
    assert!(
        completion["usage"]["total_tokens"].as_i64().unwrap() > 0,
        "{openai}"
    );
    assert_eq!(openai["streamed"], "calc turn 1: what is up ", "{openai}");
    assert_eq!(openai["async"], "calc turn 1: what is up", "{openai}");
    for (refusal, class, status, kind, code) in [
        (
            "bad_request",
            "BadRequestError",
            400,
            "invalid_request_error",
            "bad_request",
        ),
        (
            "unauthenticated",
            "AuthenticationError",
            401,
            "authentication_error",
            "unauthorized",
        ),
        (
            "forbidden",
            "PermissionDeniedError",
            403,
            "permission_error",
            "forbidden",
        ),
    ] {
        let raised = &openai["refusals"][refusal];
        assert_eq!(
            (
                &raised["class"],
                &raised["status"],
                &raised["type"],
                &raised["code"]
            ),
            (&json!(class), &json!(status), &json!(kind), &json!(code)),
            "{refusal}: {openai}"
        );
    }

    // Refusals.
    let (status, body) = call(
        &harness,
        "POST",
        "deployments/nope/invoke",
        token,
        Some(invoke.clone()),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = call(
        &harness,
        "POST",
        "deployments/stuck/invoke",
        token,
        Some(invoke.clone()),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is Starting"),
        "{body}"
    );
    let (status, body) = call(
        &harness,
        "POST",
        "deployments/calc/v1/chat/completions",
        token,
        Some(json!({"messages": [{"role": "robot", "content": "x"}]})),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("messages[0].role"),
        "{body}"
    );
    let (status, _) = call(
        &harness,
        "POST",
        "deployments/calc/invoke",
        None,
        Some(invoke.clone()),
    )
    .await;
    assert_eq!(status, 401);
    let (status, _) = call(
        &harness,
        "POST",
        "deployments/calc/invoke",
        Some("not-a-token"),
        Some(invoke.clone()),
    )
    .await;
    assert_eq!(status, 401);
    let (status, body) = call(
        &harness,
        "POST",
        "deployments/calc/invoke",
        Some(&stranger),
        Some(invoke),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("agentdeployments/invoke"),
        "{body}"
    );
    harness.finish().await;
}

/// `errand invoke DEPLOYMENT` through the gateway until it answers (the gateway's caches take
/// a moment to see a new ready pod), returning its answer.
async fn cli_invoke_until_ok(harness: &Harness, gateway: &[&str], deployment: &str) -> Value {
    wait_for(
        "errand invoke to reach a ready pod",
        Duration::from_secs(60),
        || async move {
            let args: Vec<&str> = ["invoke", deployment, "--input", "hello"]
                .into_iter()
                .chain(gateway.iter().copied())
                .collect();
            let (code, answer) = harness.cli(&args);
            (code == 0).then_some(answer)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_deploys_invokes_chats_redeploys_and_undeploys() {
    let Some(harness) = Harness::start_with_gateway("gateway-cli").await else {
        return;
    };
    let caller = token_of(&harness, "caller").await;
    allow_invoke(&harness, "caller").await;
    create_server_agent(&harness, "echo").await;
    let (code, answer) = harness.cli(&["deploy", "svc", "--agent", "echo"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["deployment"]["phase"], "Ready", "{answer}");
    assert_eq!(answer["deployment"]["agent"], "echo", "{answer}");
    let (code, answer) = harness.cli(&["deployments", "list"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["deployments"][0]["name"], "svc", "{answer}");

    let url = harness.gateway_url();
    let gateway = [
        "--gateway",
        url.as_str(),
        "--gateway-token",
        caller.as_str(),
    ];
    let answer = cli_invoke_until_ok(&harness, &gateway, "svc").await;
    assert_eq!(answer["invoke"]["output"], "echo: hello", "{answer}");
    for turn in 1..=2 {
        let args: Vec<&str> = ["chat", "svc", "--session-name", "s1", "--message", "hi"]
            .into_iter()
            .chain(gateway)
            .collect();
        let (code, answer) = harness.cli(&args);
        assert_eq!(code, 0, "{answer}");
        assert_eq!(answer["chat"]["turn"], turn, "{answer}");
    }
    let args: Vec<&str> = ["sessions", "list", "svc"]
        .into_iter()
        .chain(gateway)
        .collect();
    let (code, answer) = harness.cli(&args);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["sessions"]["sessions"][0]["name"], "s1", "{answer}");
    assert_eq!(answer["sessions"]["sessions"][0]["turns"], 2, "{answer}");
    // The agent server's log, read through the API server: its one start-up line.
    let logs = harness
        .command(&["logs", "svc", "--tail", "20"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&logs.stderr)
    );
    assert!(
        text.contains("agent-server: serving on port"),
        "errand logs svc printed: {text}"
    );
    // Without RBAC: 403 as the CLI reports it.
    let stranger = token_of(&harness, "stranger").await;
    let (code, answer) = harness.cli(&[
        "invoke",
        "svc",
        "--input",
        "x",
        "--gateway",
        &url,
        "--gateway-token",
        &stranger,
    ]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &json!("forbidden")),
        "{answer}"
    );

    // Redeploy: a new Agent, the deployment rolled to it, the old Agent removed.
    let manifest = std::env::temp_dir().join(format!("{}-agent.json", harness.namespace.name()));
    let mut agent = serde_json::to_value(
        harness
            .api::<errand::api::Agent>()
            .get("echo")
            .await
            .unwrap(),
    )
    .unwrap();
    agent["spec"]["config"]["name"] = json!("echo-v2");
    std::fs::write(&manifest, agent.to_string()).unwrap();
    let (code, answer) = harness.cli(&["redeploy", "svc", "-f", manifest.to_str().unwrap()]);
    std::fs::remove_file(&manifest).unwrap();
    assert_eq!(code, 0, "{answer}");
    let redeployed = &answer["redeployed"];
    let new_agent = redeployed["agent"].as_str().unwrap().to_owned();
    assert!(new_agent.starts_with("svc-"), "{answer}");
    assert_eq!(
        redeployed["deployment"]["agent"],
        new_agent.as_str(),
        "{answer}"
    );
    assert_eq!(redeployed["replaced"], "echo", "{answer}");
    assert_eq!(redeployed["replaced_removed"], true, "{answer}");
    let agents = harness.api::<errand::api::Agent>();
    assert!(agents.get_opt("echo").await.unwrap().is_none());
    let answer = wait_for(
        "the redeployed agent to answer",
        Duration::from_secs(60),
        || {
            let harness = &harness;
            async move {
                let answer = cli_invoke_until_ok(harness, &gateway, "svc").await;
                (answer["invoke"]["output"] == "echo-v2: hello").then_some(answer)
            }
        },
    )
    .await;
    assert_eq!(answer["invoke"]["output"], "echo-v2: hello");

    // Undeploy by agent: every deployment of it goes with its children.
    let (code, answer) = harness.cli(&["undeploy", "--agent", &new_agent]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["undeployed"]["deployments"], json!(["svc"]));
    let (code, answer) = harness.cli(&["deployments", "get", "svc"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (3, &json!("not_found")),
        "{answer}"
    );
    let (code, answer) = harness.cli(&["undeploy", "--agent", &new_agent]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (3, &json!("not_found")),
        "{answer}"
    );
    harness.finish().await;
}
