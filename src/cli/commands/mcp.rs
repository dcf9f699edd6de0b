//! `errand mcp`: a stdio MCP server (the official Rust SDK, `rmcp`) whose tools are errand's commands, run as the command line runs them.
//!
//! Each tool call runs this same `errand` binary with the command line the tool's arguments
//! spell (`errand execute --agent ... --until 30 -o json`) against the server's target, and
//! answers with the one JSON object it printed: the same checks, the same messages, the same
//! answers (`errand schema`) as the command line, by construction. Runs are never children of
//! the server: `execute` always observes for a bounded time and leaves the run to its detached
//! supervisor (locally) or the controller (on a cluster), so closing the transport, or killing
//! the server, never stops one.

use std::path::PathBuf;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerInfo};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::cli::target::Target;
use crate::ops::{Error, ErrorCode};

/// The default `--max-wait`: below the 60 s many MCP hosts allow a tool call.
pub const DEFAULT_MAX_WAIT_SECONDS: f64 = 50.0;

/// Flags of `errand mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// The longest a tool call may observe a run (`until` of `execute` and `wait`), in seconds;
    /// keep it below the tool-call deadline of the MCP host.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_MAX_WAIT_SECONDS, value_parser = super::observe::parse_until)]
    pub max_wait: f64,
}

/// `execute`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteTool {
    /// The agent: the name of an applied Agent, or a manifest file holding one.
    pub agent: Option<String>,
    /// The input given to the agent.
    pub input: Option<String>,
    /// The environment: an applied AgentEnvironment's name, or a manifest file holding one.
    pub environment: Option<String>,
    /// The base working directory: a Fileset (`name[#path/]`) or a directory to push.
    pub workdir: Option<String>,
    /// Seconds the agent may run.
    pub timeout_seconds: Option<i64>,
    /// The execution's name (generated when not given).
    pub name: Option<String>,
    /// The whole spec (the AgentExecution's spec or the NeMo job spec); the other arguments
    /// override its fields.
    pub spec: Option<Value>,
    /// Seconds to observe the run before answering (default 30, at most the server's
    /// `--max-wait`); the run goes on either way.
    pub until: Option<f64>,
    /// Bytes of each output stream the answer carries (default 65536).
    pub max_bytes: Option<u64>,
    /// A shell command run when the run ends, the event JSON on its stdin (local runs).
    pub notify_command: Option<String>,
    /// A file the run's `execution.finished` event is appended to as one JSON line (local runs).
    pub notify_file: Option<PathBuf>,
    /// A URL the controller POSTs the run's end to as a signed CloudEvent (cluster runs; with
    /// `notify_webhook_secret`).
    pub notify_webhook: Option<String>,
    /// `NAME:KEY` of the Secret key that signs webhook deliveries (cluster runs).
    pub notify_webhook_secret: Option<String>,
}

/// What `execute` adds to its answer when a sink is set: the notification is armed, so the
/// caller can stop polling and wait for the event.
fn armed_notice(answer: &CallToolResult) -> Option<String> {
    let notify = &answer.structured_content.as_ref()?["execution"]["notify"];
    let sinks: Vec<&str> = ["command", "file", "webhook"]
        .into_iter()
        .filter(|s| !notify[*s].is_null())
        .collect();
    (!sinks.is_empty() && answer.is_error != Some(true)).then(|| {
        format!(
            "notification armed: execution.finished will be delivered to the {} sink; no need to poll",
            sinks.join(" and ")
        )
    })
}

/// Arguments of the tools that take only an execution.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameTool {
    /// Execution name or unambiguous prefix.
    pub name: String,
}

/// `wait`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitTool {
    /// Execution name or unambiguous prefix.
    pub name: String,
    /// Seconds to look before answering (default 30, at most the server's `--max-wait`).
    pub until: Option<f64>,
    /// Seconds between looks (default 0.5).
    pub poll: Option<f64>,
    /// Bytes of each output stream the answer carries (default 65536).
    pub max_bytes: Option<u64>,
    /// Start each excerpt at this byte (an earlier excerpt's `end`).
    pub from_byte: Option<u64>,
}

/// `tail`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TailTool {
    /// Execution name or unambiguous prefix.
    pub name: String,
    /// How many lines (default 20).
    pub lines: Option<usize>,
}

/// `results_download`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DownloadTool {
    /// Execution name or unambiguous prefix.
    pub name: String,
    /// `input_workdir`, `output_workdir`, `output_artifacts`, `run_result`, `run_error` or
    /// `manifest.json`.
    pub result: String,
    /// The file to write, on the server's machine.
    pub path: PathBuf,
}

/// `list`'s arguments (none).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTool {}

/// The MCP server: the target every tool acts on, and the longest observation it allows.
#[derive(Clone)]
pub struct ErrandMcp {
    target_args: Vec<String>,
    max_wait: f64,
}

/// The arguments of one tool call: `words` (the command), `--flag=value` for each flag of the
/// table `flags` that has a value, then `--` and the `positionals`: a value a tool call sends
/// (a name like `--help`) is never read as a flag.
fn command(
    words: &[&str],
    positionals: &[&str],
    flags: Vec<(&str, Option<String>)>,
) -> Vec<String> {
    let mut args: Vec<String> = words.iter().map(|word| (*word).to_owned()).collect();
    for (name, value) in flags {
        if let Some(value) = value {
            args.push(format!("{name}={value}"));
        }
    }
    if !positionals.is_empty() {
        args.push("--".to_owned());
        args.extend(positionals.iter().map(|p| (*p).to_owned()));
    }
    args
}

/// A flag's value as its text.
fn text(value: Option<impl ToString>) -> Option<String> {
    value.map(|value| value.to_string())
}

impl ErrandMcp {
    /// A server acting on `target`.
    pub fn new(target: &Target, max_wait: f64) -> Self {
        Self {
            target_args: target_args(target),
            max_wait,
        }
    }

    /// `until` as the command line takes it, refused over `--max-wait`.
    fn until(&self, until: Option<f64>) -> Result<String, Error> {
        let until = until.unwrap_or(super::observe::DEFAULT_UNTIL_SECONDS.min(self.max_wait));
        if until > self.max_wait {
            return Err(Error::argument(format!(
                "until: {until} is over this server's --max-wait of {} seconds; call wait again to look longer",
                self.max_wait
            )));
        }
        Ok(until.to_string())
    }

    /// Runs `errand ARGS -o json` against the server's target and answers with its JSON.
    async fn run(&self, args: Result<Vec<String>, Error>) -> Result<CallToolResult, ErrorData> {
        let args = match args {
            Ok(args) => args,
            Err(error) => return Ok(CallToolResult::structured_error(error_answer(&error))),
        };
        let exe = std::env::current_exe()
            .map_err(|e| ErrorData::internal_error(format!("cannot find errand: {e}"), None))?;
        // `results download` keeps `-o` for its file; its answer format is `--format`.
        let json = if args.starts_with(&["results".to_owned(), "download".to_owned()]) {
            ["--format", "json"]
        } else {
            ["-o", "json"]
        };
        // The answer format goes before `--`, after which only positionals come.
        let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
        let output = tokio::process::Command::new(exe)
            .args(&self.target_args)
            .args(&args[..split])
            .args(json)
            .args(&args[split..])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| ErrorData::internal_error(format!("cannot run errand: {e}"), None))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let answer: Value = stdout
            .lines()
            .last()
            .and_then(|line| serde_json::from_str(line).ok())
            .ok_or_else(|| {
                ErrorData::internal_error(
                    format!(
                        "errand {} gave no JSON answer: {}",
                        args.join(" "),
                        String::from_utf8_lossy(&output.stderr)
                    ),
                    None,
                )
            })?;
        Ok(if answer["ok"] == true {
            CallToolResult::structured(answer)
        } else {
            CallToolResult::structured_error(answer)
        })
    }
}

/// The target flags that choose the same backend and namespace for every tool call.
fn target_args(target: &Target) -> Vec<String> {
    let local: &[&str] = if target.local { &["--local"] } else { &[] };
    command(
        local,
        &[],
        vec![
            ("--namespace", target.namespace.clone()),
            (
                "--kubeconfig",
                text(target.kubeconfig.as_ref().map(|p| p.display())),
            ),
            ("--context", target.context.clone()),
            ("--store", target.store.clone()),
        ],
    )
}

/// An error the server itself refuses a call with, in the command line's error answer.
fn error_answer(error: &Error) -> Value {
    serde_json::json!({
        "schema_version": crate::cli::output::SCHEMA_VERSION, "ok": false, "type": "error",
        "error": {"code": error.code, "message": error.message},
    })
}

#[tool_router]
impl ErrandMcp {
    #[tool(
        description = "Run an agent once (errand execute): observe it up to `until` seconds, then answer with its record and excerpts of its output; it goes on in the background."
    )]
    async fn execute(
        &self,
        Parameters(tool): Parameters<ExecuteTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let args = self.until(tool.until).map(|until| {
            command(
                &["execute"],
                &[],
                vec![
                    ("--until", Some(until)),
                    ("--agent", tool.agent),
                    ("--input", tool.input),
                    ("--environment", tool.environment),
                    ("--workdir.base-workdir", tool.workdir),
                    ("--timeout-seconds", text(tool.timeout_seconds)),
                    ("--name", tool.name),
                    ("--spec", text(tool.spec)),
                    ("--max-bytes", text(tool.max_bytes)),
                    ("--notify-command", tool.notify_command),
                    (
                        "--notify-file",
                        tool.notify_file.map(|p| p.display().to_string()),
                    ),
                    ("--notify-webhook", tool.notify_webhook),
                    ("--notify-webhook-secret", tool.notify_webhook_secret),
                ],
            )
        });
        let mut answer = self.run(args).await?;
        if let Some(notice) = armed_notice(&answer) {
            answer.content.push(rmcp::model::Content::text(notice));
        }
        Ok(answer)
    }

    #[tool(description = "An execution's record, with the sizes of its output streams.")]
    async fn status(
        &self,
        Parameters(tool): Parameters<NameTool>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(Ok(command(&["status"], &[&tool.name], vec![])))
            .await
    }

    #[tool(description = "The last lines of an execution's output.")]
    async fn tail(
        &self,
        Parameters(tool): Parameters<TailTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let args = command(&["tail"], &[&tool.name], vec![("--tail", text(tool.lines))]);
        self.run(Ok(args)).await
    }

    #[tool(
        description = "Look at an execution until it ends or `until` seconds pass (it goes on either way); answer with its record and excerpts of its output."
    )]
    async fn wait(
        &self,
        Parameters(tool): Parameters<WaitTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let args = self.until(tool.until).map(|until| {
            command(
                &["wait"],
                &[&tool.name],
                vec![
                    ("--until", Some(until)),
                    ("--poll", text(tool.poll)),
                    ("--max-bytes", text(tool.max_bytes)),
                    ("--from-byte", text(tool.from_byte)),
                ],
            )
        });
        self.run(args).await
    }

    #[tool(description = "Stop a running execution; its partial results are saved.")]
    async fn cancel(
        &self,
        Parameters(tool): Parameters<NameTool>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(Ok(command(&["cancel"], &[&tool.name], vec![])))
            .await
    }

    #[tool(description = "The results an execution saved, with size and sha256.")]
    async fn results_list(
        &self,
        Parameters(tool): Parameters<NameTool>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(Ok(command(&["results", "list"], &[&tool.name], vec![])))
            .await
    }

    #[tool(
        description = "Download one result of an execution into a file on the server's machine."
    )]
    async fn results_download(
        &self,
        Parameters(tool): Parameters<DownloadTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let args = command(
            &["results", "download"],
            &[&tool.result],
            vec![
                ("--execution", Some(tool.name)),
                ("--out", Some(tool.path.display().to_string())),
            ],
        );
        self.run(Ok(args)).await
    }

    #[tool(description = "The executions of the namespace.")]
    async fn list(&self, Parameters(_): Parameters<ListTool>) -> Result<CallToolResult, ErrorData> {
        self.run(Ok(command(&["list"], &[], vec![]))).await
    }
}

#[tool_handler]
impl ServerHandler for ErrandMcp {
    fn get_info(&self) -> ServerInfo {
        ServerInfo::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("errand", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "errand runs an AI agent once, to completion, and keeps its results. `execute` \
                 starts a run and observes it briefly; `wait` looks again; every answer is one \
                 errand JSON object (`errand schema`).",
            )
    }
}

impl McpArgs {
    /// `errand mcp`: serves the tools on stdin/stdout until the client closes them.
    pub async fn exec(&self, target: &Target) -> Result<(), Error> {
        let args = self;
        let failed = |e: String| Error::new(ErrorCode::McpError, e);
        let server = ErrandMcp::new(target, args.max_wait)
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| failed(e.to_string()))?;
        server.waiting().await.map_err(|e| failed(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{ErrandMcp, Target, command};

    #[test]
    fn until_defaults_below_and_is_refused_over_the_servers_maximum() {
        let server = ErrandMcp::new(&Target::default(), 20.0);
        assert_eq!(
            server.until(None).unwrap(),
            "20",
            "the default is capped too"
        );
        assert_eq!(server.until(Some(5.5)).unwrap(), "5.5");
        let refused = server.until(Some(21.0)).unwrap_err();
        assert_eq!(refused.code, "invalid_argument");
        assert_eq!(
            refused.message,
            "until: 21 is over this server's --max-wait of 20 seconds; call wait again to look longer"
        );
    }

    #[test]
    fn values_from_a_tool_call_are_never_read_as_flags() {
        assert_eq!(
            command(
                &["wait"],
                &["--help"],
                vec![("--until", Some("-5".into())), ("--poll", None)]
            ),
            ["wait", "--until=-5", "--", "--help"]
        );
        assert_eq!(command(&["list"], &[], vec![]), ["list"]);
    }
}
