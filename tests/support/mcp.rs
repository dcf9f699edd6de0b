//! MCP clients driving `errand mcp` over its stdin and stdout: `rmcp`'s, the official Python SDK's (`mcp` 2.3.0, `mcp.Client` and `ClientSession`), and raw JSON-RPC lines for what no SDK sends.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};

/// `errand mcp` running as a child process, with a client session on its stdio.
pub struct McpSession {
    /// The server process.
    pub server: tokio::process::Child,
    client: RunningService<RoleClient, ()>,
}

impl McpSession {
    /// Starts `command` (an `errand ... mcp` command line) and initializes a session with it.
    pub async fn start(command: std::process::Command) -> Self {
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut server = command.spawn().expect("errand mcp starts");
        let stdout = server.stdout.take().unwrap();
        let stdin = server.stdin.take().unwrap();
        let client = ().serve((stdout, stdin)).await.expect("an MCP session");
        Self { server, client }
    }

    /// The names of the tools the server lists.
    pub async fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        names.sort();
        names
    }

    /// Each tool the server lists, with the input schema of its arguments.
    pub async fn input_schemas(&self) -> Vec<(String, Value)> {
        self.client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| (t.name.to_string(), Value::Object((*t.input_schema).clone())))
            .collect()
    }

    /// Calls `tool` with `arguments`: whether the call is an error, and the errand answer it
    /// carries (checked against `errand schema`).
    pub async fn call(&self, tool: &str, arguments: Value) -> (bool, Value) {
        let (error, answer, _) = self.call_with_texts(tool, arguments).await;
        (error, answer)
    }

    /// [`McpSession::call`], with the text contents of the result besides its answer.
    pub async fn call_with_texts(
        &self,
        tool: &str,
        arguments: Value,
    ) -> (bool, Value, Vec<String>) {
        let Value::Object(arguments) = arguments else {
            panic!("tool arguments are an object");
        };
        let result = self
            .client
            .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
            .await
            .unwrap_or_else(|e| panic!("calling {tool}: {e}"));
        let texts = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        let answer = result
            .structured_content
            .unwrap_or_else(|| panic!("{tool} gave no structured answer"));
        super::answers::assert_conforms(&answer);
        (result.is_error == Some(true), answer, texts)
    }

    /// Closes the transport (the client side of stdin and stdout) and waits for the server to
    /// exit.
    pub async fn close(mut self) -> std::process::ExitStatus {
        self.client.close().await.unwrap();
        self.server.wait().await.unwrap()
    }
}

/// Runs tests/support/mcp_sdk_client.py: the official MCP Python SDK's `client` (`"client"`,
/// the default `mcp.Client`, which negotiates with `server/discover` first; or `"session"`,
/// `ClientSession`) drives `server` (an `errand ... mcp` command line, run with its
/// environment and directory) through `calls`. Its answer: the server's name, the protocol
/// version agreed, the tools listed, and each call's `is_error` and result. A call with
/// `"until_ended": N` is repeated, up to N times, until its execution has ended. The SDK's
/// environment is created on first use; not being able to create it fails the test.
pub fn python_sdk(client: &str, server: &std::process::Command, calls: Value) -> Value {
    let mut command: Vec<String> = vec![server.get_program().to_string_lossy().into_owned()];
    command.extend(server.get_args().map(|a| a.to_string_lossy().into_owned()));
    let plan = json!({"client": client, "command": command, "calls": calls});
    let dir = tempfile::tempdir().unwrap();
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    let mut python = super::python_clients::command("mcp_sdk_client.py");
    python.arg(&plan_file);
    for (key, value) in server.get_envs() {
        match value {
            Some(value) => python.env(key, value),
            None => python.env_remove(key),
        };
    }
    if let Some(cwd) = server.get_current_dir() {
        python.current_dir(cwd);
    }
    super::python_clients::json_of(python, &format!("the MCP Python SDK's {client}"))
}

/// `errand mcp` spoken to in raw JSON-RPC lines, one message a line.
pub struct RawSession {
    /// The server process.
    pub server: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: Lines<BufReader<tokio::process::ChildStdout>>,
}

impl RawSession {
    /// Starts `command` (an `errand ... mcp` command line); nothing is sent yet.
    pub fn start(command: std::process::Command) -> Self {
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut server = command.spawn().expect("errand mcp starts");
        let stdin = server.stdin.take().unwrap();
        let stdout = BufReader::new(server.stdout.take().unwrap()).lines();
        Self {
            server,
            stdin,
            stdout,
        }
    }

    /// Sends `message` as one line.
    pub async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// The next message the server sends (within 10 s; the server must not have ended).
    pub async fn receive(&mut self) -> Value {
        let line =
            tokio::time::timeout(std::time::Duration::from_secs(10), self.stdout.next_line())
                .await
                .expect("an answer within 10 s")
                .unwrap()
                .expect("the server still serves");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Sends request `id` of `method` with `params` and answers with the server's reply to it.
    pub async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let reply = self.receive().await;
        assert_eq!(reply["id"], id, "a reply to another request: {reply}");
        reply
    }

    /// Closes the server's stdin and waits for it to exit.
    pub async fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin);
        self.server.wait().await.unwrap()
    }
}
