//! The stand-in model provider for one test (`tests/support/model_server.py`, run with the machine's `python3`): started with a script of replies, stopped when dropped, and its record of what the agent sent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running stand-in model server answering from `script`.
pub struct ModelServer {
    child: Child,
    dir: tempfile::TempDir,
    host: String,
    port: u16,
}

impl ModelServer {
    /// Starts the server on loopback with `replies` (each `{"content": .., "tool_calls": [{"name",
    /// "arguments"}], "delay_seconds": ..}`), waiting until it listens.
    pub fn start(replies: &Value) -> Self {
        Self::start_on("127.0.0.1", replies)
    }

    /// [`ModelServer::start`] listening on `host` (the pods' gateway, for agents in pods).
    pub fn start_on(host: &str, replies: &Value) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script.json");
        std::fs::write(&script, replies.to_string()).unwrap();
        let port_file = dir.path().join("port");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/model_server.py");
        let child = Command::new("python3")
            .arg(server)
            .arg("--script")
            .arg(&script)
            .arg("--record")
            .arg(dir.path().join("record.jsonl"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--host")
            .arg(host)
            .stdin(Stdio::null())
            .spawn()
            .expect("starting the stand-in model server with python3");
        let mut server = Self {
            child,
            dir,
            host: host.to_owned(),
            port: 0,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while server.port == 0 {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                server.port = port.trim().parse().unwrap();
            } else if let Some(status) = server.child.try_wait().unwrap() {
                panic!("the stand-in model server exited: {status}");
            } else {
                assert!(
                    Instant::now() < deadline,
                    "the stand-in model server did not listen in 20s"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        server
    }

    /// Its OpenAI-compatible base URL (`http://HOST:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}:{}/v1", self.host, self.port)
    }

    /// The record file: one JSON line per chat request.
    pub fn record_path(&self) -> PathBuf {
        self.dir.path().join("record.jsonl")
    }

    /// The chat requests it was sent, in order: `path`, `authorization`, `model`, `stream`,
    /// `messages`, `tools` (names).
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.record_path())
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stand-in's script for the NeMo calculator: a `write_file` tool call writing the product
/// into the workspace, then the answer, `answer_delay_seconds` late.
pub fn calculator_script(answer_delay_seconds: u64) -> Value {
    serde_json::json!([
        {"tool_calls": [{"name": "write_file", "arguments": {"file_path": "/answer.txt", "content": "96\n"}}]},
        {"content": "96", "delay_seconds": answer_delay_seconds},
    ])
}

/// Asserts the stand-in was sent two requests, each with the NeMo calculator config's model,
/// the key its environment bound from the `model-keys` Secret, and its instructions as the
/// system prompt; returns them.
pub fn assert_sent_the_nemo_calculator(server: &ModelServer) -> Vec<Value> {
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    requests.iter().for_each(assert_from_the_nemo_calculator);
    requests
}

/// Asserts `request` has the NeMo calculator config's model, the key its environment bound from
/// the `model-keys` Secret, and its instructions as the system prompt.
pub fn assert_from_the_nemo_calculator(request: &Value) {
    assert_eq!(request["model"], "nvidia-nemotron-3-5-lightning-30b-a3b");
    assert_eq!(request["authorization"], "Bearer nvapi-stand-in-key");
    assert_eq!(request["messages"][0]["role"], "system");
    assert!(
        request["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are a concise calculator agent."),
        "{request}"
    );
}
