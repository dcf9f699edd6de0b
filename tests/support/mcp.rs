//! A real MCP client (`rmcp`'s) driving `errand mcp` over its stdin and stdout.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::Value;

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

    /// Calls `tool` with `arguments`: whether the call is an error, and the errand answer it
    /// carries (checked against `errand schema`).
    pub async fn call(&self, tool: &'static str, arguments: Value) -> (bool, Value) {
        let Value::Object(arguments) = arguments else {
            panic!("tool arguments are an object");
        };
        let result = self
            .client
            .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
            .await
            .unwrap_or_else(|e| panic!("calling {tool}: {e}"));
        let answer = result
            .structured_content
            .unwrap_or_else(|| panic!("{tool} gave no structured answer"));
        super::answers::assert_conforms(&answer);
        (result.is_error == Some(true), answer)
    }

    /// Closes the transport (the client side of stdin and stdout) and waits for the server to
    /// exit.
    pub async fn close(mut self) -> std::process::ExitStatus {
        self.client.close().await.unwrap();
        self.server.wait().await.unwrap()
    }
}
