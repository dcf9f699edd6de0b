//! The gateway on the test cluster: invoke, chat sessions (resumed after a gateway restart) and OpenAI chat completions (plain and streamed, with curl) reach a deployment's ready pod; unknown targets, deployments not Ready, malformed bodies, missing tokens and tokens without RBAC are refused with 404, 503, 400, 401 and 403.

mod support;

use std::time::Duration;

use serde_json::{Value, json};

use errand::api::DeploymentPhase;
use support::deployments::{
    allow_invoke, create_deployment, create_server_agent, token_of, wait_for_phase,
};
use support::errand::wait_for;
use support::harness::{Harness, RUN_WAIT};

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

/// Sends a request to the gateway and returns the status and the body as JSON (or text).
async fn call(
    harness: &Harness,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    try_call(harness, method, path, token, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// [`call`], with a gateway that may not listen (yet): `Err` when it does not answer.
async fn try_call(
    harness: &Harness,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Result<(u16, Value), reqwest::Error> {
    let url = format!(
        "{}/v1/namespaces/{}/{path}",
        harness.gateway_url(),
        harness.namespace.name()
    );
    let client = reqwest::Client::new();
    let mut request = match method {
        "GET" => client.get(&url),
        _ => client.post(&url),
    };
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await?;
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((status, body))
}

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

#[tokio::test]
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
