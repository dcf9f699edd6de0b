//! `errand mcp`: a stdio MCP server (the official Rust SDK, `rmcp`) whose tools are errand's commands, run as the command line runs them.
//!
//! Each tool call runs this same `errand` binary with the command line the tool's arguments
//! spell (`errand execute --agent ... --until 30 -o json`) against the server's target, and
//! answers with the one JSON object it printed: the same checks, the same messages (in the
//! tool's argument names, [`arguments`]), the same answers (`errand schema`) as the command
//! line, by construction. Runs are never children of the server: `execute` always observes for
//! a bounded time and leaves the run to its detached supervisor (locally) or the controller (on
//! a cluster), so closing the transport, or killing the server, never stops one. The session
//! keeps the protocol's order in front of `rmcp` ([`handshake`]).

mod arguments;
mod handshake;

use std::path::PathBuf;

use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerInfo};
use rmcp::transport::IntoTransport;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use self::arguments::{Arguments, Spelling, respell_error, schema};
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

/// `schedule_trigger`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleNameTool {
    /// The schedule's name.
    pub name: String,
}

/// `schedule_create`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleCreateTool {
    /// The schedule's name (a DNS label of at most 52 characters).
    pub name: String,
    /// When it runs: a five-field cron expression (`*/15 * * * *`) or `@hourly`, `@daily`,
    /// `@weekly`, `@monthly`, `@yearly`.
    pub cron: String,
    /// The IANA time zone the expression is read in (UTC when not given).
    pub time_zone: Option<String>,
    /// What a due run does while one still runs: `allow` (default), `forbid` or `replace`.
    pub concurrency_policy: Option<String>,
    /// Seconds after its time a run may still start; later, it counts as missed.
    pub starting_deadline_seconds: Option<i64>,
    /// The agent of each run: an applied Agent's name, or a manifest file holding one.
    pub agent: Option<String>,
    /// The input given to the agent on every run.
    pub input: Option<String>,
    /// The environment: an applied AgentEnvironment's name, or a manifest file holding one.
    pub environment: Option<String>,
    /// The base working directory: a Fileset (`name[#path/]`) or a directory to push.
    pub workdir: Option<String>,
    /// Seconds each run's agent may run.
    pub timeout_seconds: Option<i64>,
    /// The runs' whole spec (the AgentExecution's spec or the NeMo job spec); the other
    /// arguments override its fields.
    pub spec: Option<Value>,
}

/// The MCP server: the target every tool acts on, and the longest observation it allows.
#[derive(Clone)]
pub struct ErrandMcp {
    target_args: Vec<String>,
    max_wait: f64,
}

/// One tool call as a command line: its arguments, and the tool argument each flag or
/// positional of it spells (for errors in the tool's names).
#[derive(Debug)]
struct Call {
    args: Vec<String>,
    spelling: Spelling,
}

/// A flag or positional of a tool call: its command-line name (`--timeout-seconds`, or the
/// positional's value name `<NAME>`), the tool argument it comes from, and its value, if any.
type Spelled = (&'static str, &'static str, Option<String>);

/// The command line of one tool call: `words` (the command), `--flag=value` for each of
/// `flags` that has a value, then `--` and the `positionals`: a value a tool call sends (a name
/// like `--help`) is never read as a flag.
fn command(words: &[&str], positionals: Vec<Spelled>, flags: Vec<Spelled>) -> Call {
    let mut args: Vec<String> = words.iter().map(|word| (*word).to_owned()).collect();
    let spelling = flags
        .iter()
        .chain(&positionals)
        .map(|(name, argument, _)| (*name, *argument))
        .collect();
    args.extend(flag_args(
        flags.into_iter().map(|(name, _, value)| (name, value)),
    ));
    if !positionals.is_empty() {
        args.push("--".to_owned());
        args.extend(positionals.into_iter().filter_map(|(_, _, value)| value));
    }
    Call { args, spelling }
}

/// `--flag=value` for each flag that has a value.
fn flag_args<'a>(
    flags: impl IntoIterator<Item = (&'a str, Option<String>)>,
) -> impl Iterator<Item = String> {
    flags
        .into_iter()
        .filter_map(|(name, value)| value.map(|value| format!("{name}={value}")))
}

/// A tool call's execution name, as the positional `<NAME>`.
fn execution(name: String) -> Vec<Spelled> {
    vec![("<NAME>", "name", Some(name))]
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

    /// Runs `errand ARGS -o json` against the server's target and answers with its JSON, an
    /// error in the tool's argument names.
    async fn run(&self, call: Result<Call, Error>) -> Result<CallToolResult, ErrorData> {
        let Call { args, spelling } = match call {
            Ok(call) => call,
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
        let mut answer: Value = stdout
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
            respell_error(&mut answer["error"], &spelling);
            CallToolResult::structured_error(answer)
        })
    }
}

/// The target flags that choose the same backend and namespace for every tool call.
fn target_args(target: &Target) -> Vec<String> {
    let local = target.local.then(|| "--local".to_owned());
    local
        .into_iter()
        .chain(flag_args([
            ("--namespace", target.namespace.clone()),
            (
                "--kubeconfig",
                text(target.kubeconfig.as_ref().map(|p| p.display())),
            ),
            ("--context", target.context.clone()),
            ("--store", target.store.clone()),
        ]))
        .collect()
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
        description = "Run an agent once (errand execute): observe it up to `until` seconds, then answer with its record and excerpts of its output; it goes on in the background.",
        input_schema = schema::<ExecuteTool>()
    )]
    async fn execute(
        &self,
        Arguments(tool): Arguments<ExecuteTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.and_then(|tool| {
            let until = self.until(tool.until)?;
            Ok(command(
                &["execute"],
                vec![],
                vec![
                    ("--until", "until", Some(until)),
                    ("--agent", "agent", tool.agent),
                    ("--input", "input", tool.input),
                    ("--environment", "environment", tool.environment),
                    ("--workdir.base-workdir", "workdir", tool.workdir),
                    (
                        "--timeout-seconds",
                        "timeout_seconds",
                        text(tool.timeout_seconds),
                    ),
                    ("--name", "name", tool.name),
                    ("--spec", "spec", text(tool.spec)),
                    ("--max-bytes", "max_bytes", text(tool.max_bytes)),
                    ("--notify-command", "notify_command", tool.notify_command),
                    (
                        "--notify-file",
                        "notify_file",
                        tool.notify_file.map(|p| p.display().to_string()),
                    ),
                    ("--notify-webhook", "notify_webhook", tool.notify_webhook),
                    (
                        "--notify-webhook-secret",
                        "notify_webhook_secret",
                        tool.notify_webhook_secret,
                    ),
                ],
            ))
        });
        let mut answer = self.run(call).await?;
        if let Some(notice) = armed_notice(&answer) {
            answer.content.push(rmcp::model::Content::text(notice));
        }
        Ok(answer)
    }

    #[tool(
        description = "An execution's record, with the sizes of its output streams.",
        input_schema = schema::<NameTool>()
    )]
    async fn status(
        &self,
        Arguments(tool): Arguments<NameTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.map(|tool| command(&["status"], execution(tool.name), vec![]));
        self.run(call).await
    }

    #[tool(
        description = "The last lines of an execution's output.",
        input_schema = schema::<TailTool>()
    )]
    async fn tail(
        &self,
        Arguments(tool): Arguments<TailTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.map(|tool| {
            command(
                &["tail"],
                execution(tool.name),
                vec![("--tail", "lines", text(tool.lines))],
            )
        });
        self.run(call).await
    }

    #[tool(
        description = "Look at an execution until it ends or `until` seconds pass (it goes on either way); answer with its record and excerpts of its output.",
        input_schema = schema::<WaitTool>()
    )]
    async fn wait(
        &self,
        Arguments(tool): Arguments<WaitTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.and_then(|tool| {
            let until = self.until(tool.until)?;
            Ok(command(
                &["wait"],
                execution(tool.name),
                vec![
                    ("--until", "until", Some(until)),
                    ("--poll", "poll", text(tool.poll)),
                    ("--max-bytes", "max_bytes", text(tool.max_bytes)),
                    ("--from-byte", "from_byte", text(tool.from_byte)),
                ],
            ))
        });
        self.run(call).await
    }

    #[tool(
        description = "Stop a running execution; its partial results are saved.",
        input_schema = schema::<NameTool>()
    )]
    async fn cancel(
        &self,
        Arguments(tool): Arguments<NameTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.map(|tool| command(&["cancel"], execution(tool.name), vec![]));
        self.run(call).await
    }

    #[tool(
        description = "The results an execution saved, with size and sha256.",
        input_schema = schema::<NameTool>()
    )]
    async fn results_list(
        &self,
        Arguments(tool): Arguments<NameTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.map(|tool| command(&["results", "list"], execution(tool.name), vec![]));
        self.run(call).await
    }

    #[tool(
        description = "Download one result of an execution into a file on the server's machine.",
        input_schema = schema::<DownloadTool>()
    )]
    async fn results_download(
        &self,
        Arguments(tool): Arguments<DownloadTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.map(|tool| {
            command(
                &["results", "download"],
                vec![("<RESULT>", "result", Some(tool.result))],
                vec![
                    ("--execution", "name", Some(tool.name)),
                    ("--out", "path", Some(tool.path.display().to_string())),
                ],
            )
        });
        self.run(call).await
    }

    #[tool(
        description = "The executions of the namespace.",
        input_schema = schema::<ListTool>()
    )]
    async fn list(
        &self,
        Arguments(tool): Arguments<ListTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.map(|ListTool {}| command(&["list"], vec![], vec![]));
        self.run(call).await
    }

    #[tool(
        description = "Create an AgentSchedule (errand schedule create): runs of an agent on a cron schedule, checked as the API server checks them.",
        input_schema = schema::<ScheduleCreateTool>()
    )]
    async fn schedule_create(
        &self,
        Arguments(tool): Arguments<ScheduleCreateTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.map(|tool| {
            command(
                &["schedule", "create"],
                vec![("<NAME>", "name", Some(tool.name))],
                vec![
                    ("--cron", "cron", Some(tool.cron)),
                    ("--time-zone", "time_zone", tool.time_zone),
                    (
                        "--concurrency-policy",
                        "concurrency_policy",
                        tool.concurrency_policy,
                    ),
                    (
                        "--starting-deadline-seconds",
                        "starting_deadline_seconds",
                        text(tool.starting_deadline_seconds),
                    ),
                    ("--agent", "agent", tool.agent),
                    ("--input", "input", tool.input),
                    ("--environment", "environment", tool.environment),
                    ("--workdir.base-workdir", "workdir", tool.workdir),
                    (
                        "--timeout-seconds",
                        "timeout_seconds",
                        text(tool.timeout_seconds),
                    ),
                    ("--spec", "spec", text(tool.spec)),
                ],
            )
        });
        self.run(call).await
    }

    #[tool(
        description = "The AgentSchedules of the namespace: cron, zone, suspended, active runs, last and next times (locally, whether each one's supervisor runs).",
        input_schema = schema::<ListTool>()
    )]
    async fn schedule_list(
        &self,
        Arguments(tool): Arguments<ListTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.map(|ListTool {}| command(&["schedule", "list"], vec![], vec![]));
        self.run(call).await
    }

    #[tool(
        description = "Run a schedule once now, as its next run would be; answers with the execution it created.",
        input_schema = schema::<ScheduleNameTool>()
    )]
    async fn schedule_trigger(
        &self,
        Arguments(tool): Arguments<ScheduleNameTool>,
    ) -> Result<CallToolResult, ErrorData> {
        let call = tool.map(|tool| {
            command(
                &["schedule", "trigger"],
                vec![("<NAME>", "name", Some(tool.name))],
                vec![],
            )
        });
        self.run(call).await
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
        let stdio = IntoTransport::<RoleServer, _, _>::into_transport(rmcp::transport::stdio());
        let server = match ErrandMcp::new(target, args.max_wait)
            .serve(handshake::Handshake::new(stdio))
            .await
        {
            Ok(server) => server,
            // The client went away before initializing (a probe): nothing to serve.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
            Err(e) => return Err(failed(e.to_string())),
        };
        server.waiting().await.map_err(|e| failed(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{ErrandMcp, Target, command, execution};

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
        let call = command(
            &["wait"],
            execution("--help".into()),
            vec![
                ("--until", "until", Some("-5".into())),
                ("--poll", "poll", None),
            ],
        );
        assert_eq!(call.args, ["wait", "--until=-5", "--", "--help"]);
        assert_eq!(
            call.spelling,
            [("--until", "until"), ("--poll", "poll"), ("<NAME>", "name")]
        );
        assert_eq!(command(&["list"], vec![], vec![]).args, ["list"]);
    }
}
