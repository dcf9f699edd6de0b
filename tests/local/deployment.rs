//! AgentDeployments on the local backend (the subprocess mode): the test agent server of `hack/images/agent-server.sh` run by a detached supervisor on an assigned port, reached through the gateway's code — deploy, invoke, chat sessions surviving a restart, the starting window, redeploy (valid during requests, invalid untouched), undeploy.

use std::time::{Duration, Instant};

use crate::support::local::{Deployed, Home, post};
use serde_json::Value;

/// The test agent server, run with `sh` (it needs busybox's `nc`).
fn server_script() -> String {
    format!("{}/hack/images/agent-server.sh", env!("CARGO_MANIFEST_DIR"))
}

/// An Agent manifest named `name` whose command runs the test agent server, its config
/// naming it `config_name` (the server answers with that name); `prefix` goes before it in
/// `sh -c` (an environment setting).
fn agent(name: &str, config_name: &str, prefix: &str) -> Value {
    serde_json::json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": name},
        "spec": {
            "runtime": {"image": "errand.local/agent-server:test",
                        "command": ["sh", "-c", format!("{prefix} exec sh {}", server_script())]},
            "config": {"config_format": "agents-spec-v1", "name": config_name},
        }
    })
}

fn phase(deployment: &Value) -> &str {
    deployment["phase"].as_str().unwrap_or("-")
}

#[test]
fn a_deployment_serves_invoke_and_resumable_chat_sessions_until_it_is_undeployed() {
    let d = Deployed::new(&["calc"]);
    d.apply("agent.json", &agent("calculator", "calculator", ""));
    let (code, answer) = d.json(&["deploy", "calc", "--agent", "calculator"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["type"], "deployment");
    let deployment = &answer["deployment"];
    assert_eq!(
        (phase(deployment), deployment["agent"].as_str()),
        ("Ready", Some("calculator")),
        "{answer}"
    );
    assert_eq!(
        (
            deployment["ready_replicas"].as_i64(),
            deployment["replicas"].as_i64()
        ),
        (Some(1), Some(1))
    );
    let address = deployment["address"].as_str().unwrap().to_owned();
    assert!(address.starts_with("http://127.0.0.1:"), "{address}");
    assert!(
        deployment["snapshot_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );

    let (code, answer) = d.json(&["invoke", "calc", "--input", "1+1"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["invoke"]["output"], "calculator: 1+1");
    let (code, answer) = d.json(&["invoke", "--agent", "calculator", "--input", "2+2"]);
    assert_eq!(
        (code, &answer["invoke"]["output"]),
        (0, &"calculator: 2+2".into())
    );
    for (turn, message) in [(1, "hello"), (2, "again")] {
        let (code, answer) =
            d.json(&["chat", "calc", "--session-name", "s1", "--message", message]);
        assert_eq!(code, 0, "{answer}");
        assert_eq!(answer["chat"]["turn"], turn);
        assert_eq!(
            answer["chat"]["message"]["content"],
            format!("calculator turn {turn}: {message}"),
            "the agent server gets every earlier turn"
        );
    }
    // The OpenAI shape straight from the agent server, streamed.
    let streamed = post(
        &address,
        "/v1/chat/completions",
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}"#,
    );
    assert!(streamed.contains("text/event-stream"), "{streamed}");
    assert!(streamed.contains("data: [DONE]"), "{streamed}");
    // A malformed chat request is refused naming its field, before the agent sees it.
    let (code, answer) = d.json(&[
        "chat",
        "calc",
        "--session-name",
        "Bad_Name",
        "--message",
        "x",
    ]);
    assert_eq!(code, 2, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("session: "),
        "{answer}"
    );

    // The supervisor and its server stop (as at a reboot); the next command brings the
    // deployment back on a fresh port and the session resumes where it was.
    let state: Value = serde_json::from_slice(
        &std::fs::read(
            d.home
                .path()
                .join("home/deployments/default/calc/state.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let supervisor = state["supervisor"]["pid"].as_i64().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &supervisor.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::path::Path::new(&format!("/proc/{supervisor}")).exists() {
        assert!(Instant::now() < deadline, "the supervisor did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        std::net::TcpStream::connect(address.trim_start_matches("http://")).is_err(),
        "its server stopped with it"
    );
    let (code, answer) = d.json(&["deployments", "wait", "calc"]);
    assert_eq!(
        (code, phase(&answer["deployment"])),
        (0, "Ready"),
        "{answer}"
    );
    let (code, answer) = d.json(&["chat", "calc", "--session-name", "s1", "--message", "back"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["chat"]["turn"], 3);
    assert_eq!(
        answer["chat"]["message"]["content"],
        "calculator turn 3: back"
    );
    let (code, answer) = d.json(&["sessions", "list", "calc"]);
    assert_eq!(code, 0, "{answer}");
    let sessions = &answer["sessions"]["sessions"];
    assert_eq!(
        (sessions[0]["name"].as_str(), sessions[0]["turns"].as_i64()),
        (Some("s1"), Some(3)),
        "{answer}"
    );

    let (code, answer) = d.json(&["deployments", "list"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["deployments"][0]["name"], "calc");
    let logs = d.home.run(&["logs", "calc", "--local"]);
    assert!(
        String::from_utf8_lossy(&logs.stdout).contains("started an agent server"),
        "{logs:?}"
    );

    let (code, answer) = d.json(&["undeploy", "calc"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        answer["undeployed"]["deployments"],
        serde_json::json!(["calc"])
    );
    let (code, answer) = d.json(&["deployments", "get", "calc"]);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (3, Some("not_found")),
        "{answer}"
    );
    let (code, answer) = d.json(&["invoke", "calc", "--input", "x"]);
    assert_eq!(answer["error"]["code"], "not_found", "{code} {answer}");
    let port = d.home.path().join("home/deployments/default/calc");
    assert!(!port.exists(), "its files are gone");
}

#[test]
fn a_never_ready_agent_fails_when_its_window_closes() {
    let d = Deployed::new(&["stuck"]);
    d.apply(
        "agent.json",
        &agent("stuck", "stuck", "AGENT_SERVER_NEVER_READY=1"),
    );
    let started = Instant::now();
    let (code, answer) = d.json(&[
        "deploy",
        "stuck",
        "--agent",
        "stuck",
        "--starting-timeout-seconds",
        "3",
    ]);
    assert_ne!(code, 0, "{answer}");
    assert_eq!(answer["error"]["code"], "deployment_failed", "{answer}");
    let failed = &answer["error"]["deployment"];
    assert_eq!(phase(failed), "Failed", "{answer}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("startingTimeoutSeconds (3s)"),
        "{answer}"
    );
    assert!(started.elapsed() >= Duration::from_secs(3));
    // It stays Failed (only a spec change starts it again); get shows it without failing.
    let (code, answer) = d.json(&["deployments", "get", "stuck"]);
    assert_eq!(
        (code, phase(&answer["deployment"])),
        (0, "Failed"),
        "{answer}"
    );
    let (code, answer) = d.json(&["invoke", "stuck", "--input", "x"]);
    assert_eq!(answer["error"]["code"], "not_ready", "{code} {answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is Failed"),
        "{answer}"
    );
}

#[test]
fn readiness_lost_after_ready_opens_a_fresh_window_and_recovering_ends_it() {
    let d = Deployed::new(&["flaky"]);
    d.apply("agent.json", &agent("flaky", "flaky", ""));
    let (code, answer) = d.json(&[
        "deploy",
        "flaky",
        "--agent",
        "flaky",
        "--failure-threshold",
        "1",
        "--starting-timeout-seconds",
        "6",
    ]);
    assert_eq!(
        (code, phase(&answer["deployment"])),
        (0, "Ready"),
        "{answer}"
    );
    let address = answer["deployment"]["address"].as_str().unwrap().to_owned();
    // Ready for longer than the window: a window measured from the deploy would be over.
    std::thread::sleep(Duration::from_secs(7));
    assert!(post(&address, "/admin/unready", "").contains("200 OK"));
    let starting = d.until("flaky", Duration::from_secs(10), |d| phase(d) == "Starting");
    assert!(
        starting["message"]
            .as_str()
            .unwrap()
            .contains("fails if none is ready by"),
        "{starting}"
    );
    let (code, answer) = d.json(&["invoke", "flaky", "--input", "x"]);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (4, Some("not_ready")),
        "no ready server: {answer}"
    );
    // Recovering within the fresh window ends it.
    std::thread::sleep(Duration::from_secs(2));
    assert!(post(&address, "/admin/ready", "").contains("200 OK"));
    d.until("flaky", Duration::from_secs(10), |d| phase(d) == "Ready");
    // Lost again, and not back: the fresh window closes 6 s after this loss.
    assert!(post(&address, "/admin/unready", "").contains("200 OK"));
    let lost = Instant::now();
    d.until("flaky", Duration::from_secs(10), |d| phase(d) == "Starting");
    let failed = d.until("flaky", Duration::from_secs(20), |d| phase(d) == "Failed");
    assert!(lost.elapsed() >= Duration::from_secs(6), "{failed}");
}

#[test]
fn redeploy_rolls_while_serving_and_an_invalid_one_leaves_everything_untouched() {
    let d = Deployed::new(&["calc"]);
    d.apply("agent.json", &agent("calculator", "calculator", ""));
    let (code, answer) = d.json(&["deploy", "calc", "--agent", "calculator"]);
    assert_eq!(code, 0, "{answer}");
    let before = answer["deployment"].clone();

    // An invalid config: refused, nothing changes.
    let bad = d
        .home
        .write("bad.yaml", "config_format: agents-spec-v9\nname: broken\n");
    let (code, answer) = d.json(&["redeploy", "calc", "--agent-config", bad.to_str().unwrap()]);
    assert_ne!(code, 0, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("config_format"),
        "{answer}"
    );
    let (_, now) = d.json(&["deployments", "get", "calc"]);
    assert_eq!(now["deployment"], before, "the deployment is untouched");
    let (_, agents) = d.json(&["agents"]);
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["calculator"], "{agents}");
    let (code, answer) = d.json(&["invoke", "calc", "--input", "1"]);
    assert_eq!(
        (code, &answer["invoke"]["output"]),
        (0, &"calculator: 1".into())
    );

    // A valid one: requests keep being served while it rolls.
    let v2 = d
        .home
        .write("v2.json", &agent("ignored", "calc-v2", "").to_string());
    let home = d.home.path().to_owned();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let invoker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut answers = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let output = std::process::Command::new(env!("CARGO_BIN_EXE_errand"))
                    .args(["invoke", "calc", "--input", "r", "--local", "-o", "json"])
                    .env("ERRAND_HOME", home.join("home"))
                    .output()
                    .unwrap();
                answers.push(String::from_utf8_lossy(&output.stdout).into_owned());
            }
            answers
        })
    };
    let (code, answer) = d.json(&["redeploy", "calc", "-f", v2.to_str().unwrap()]);
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers = invoker.join().unwrap();
    assert_eq!(code, 0, "{answer}");
    let redeployed = &answer["redeployed"];
    let new_agent = redeployed["agent"].as_str().unwrap();
    assert!(new_agent.starts_with("calc-"), "{answer}");
    assert_eq!(redeployed["replaced"], "calculator");
    assert_eq!(redeployed["replaced_removed"], true);
    assert_eq!(phase(&redeployed["deployment"]), "Ready");
    assert_ne!(
        redeployed["deployment"]["snapshot_digest"], before["snapshot_digest"],
        "{answer}"
    );
    assert!(answers.len() >= 2, "{answers:?}");
    for served in &answers {
        assert!(
            served.contains("\"output\":\"calculator: r\"")
                || served.contains("\"output\":\"calc-v2: r\""),
            "a request during the roll was not served: {served}"
        );
    }
    let (code, answer) = d.json(&["invoke", "calc", "--input", "2"]);
    assert_eq!(
        (code, &answer["invoke"]["output"]),
        (0, &"calc-v2: 2".into())
    );
    let (_, agents) = d.json(&["agents"]);
    assert!(!agents.to_string().contains("\"calculator\""), "{agents}");
    let (code, answer) = d.json(&["undeploy", "--agent", new_agent]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        answer["undeployed"]["deployments"],
        serde_json::json!(["calc"])
    );
}

#[test]
fn bad_deployments_are_refused_naming_the_field() {
    let home = Home::new();
    let (code, answer) = home.json(&["deploy", "calc", "--agent", "nope", "--local"]);
    assert_eq!(code, 2, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_spec");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.agentRef.name"),
        "{answer}"
    );
    let (code, answer) = home.json(&["deploy", "Calc", "--agent", "nope", "--local"]);
    assert_eq!(code, 2, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("metadata.name"),
        "{answer}"
    );
    for args in [
        &["deployments", "get", "calc", "--local"][..],
        &["undeploy", "calc", "--local"],
        &["invoke", "calc", "--input", "x", "--local"],
        &["sessions", "list", "calc", "--local"],
    ] {
        let (code, answer) = home.json(args);
        assert_eq!(
            answer["error"]["code"], "not_found",
            "{args:?}: {code} {answer}"
        );
    }
    let (code, answer) = home.json(&["deployments", "list", "--local"]);
    assert_eq!(
        (code, answer["deployments"].as_array().map(Vec::len)),
        (0, Some(0))
    );
}
