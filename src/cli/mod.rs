//! The `errand` command line: argument parsing and dispatch to the commands.

mod admin;
mod answers;
mod commands;
mod control;
mod controller;
mod deploy;
mod execute;
mod gc;
mod housekeeping;
mod inputs;
mod listing;
mod mcp;
mod notify;
mod observe;
mod output;
mod pod;
mod rerun;
mod schema;
mod show;
mod staging;
mod target;
mod telemetry;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::local::ObjectKind;
use crate::ops::{Error, ErrorCode};
use commands::CatalogAction;
use execute::ExecuteArgs;
pub use output::{EXIT_BROKEN_PIPE, Format, OutputArgs, SCHEMA_VERSION};
use target::Target;

/// Run an AI agent once, to completion, and keep everything it produced.
#[derive(Debug, Parser)]
#[command(name = "errand", version, about)]
pub struct Cli {
    /// Where commands act.
    #[command(flatten)]
    pub target: Target,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run an agent once, to completion; waits and prints its record unless `--no-wait`.
    Execute(Box<ExecuteArgs>),
    /// Follow an execution's output until it ends, then print its record.
    Watch {
        /// Execution name or unambiguous prefix.
        name: String,
        #[command(flatten)]
        excerpt: observe::ExcerptArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Look at an execution until it ends or `--until` seconds pass (it goes on either way);
    /// print it with excerpts of its output.
    Wait(Box<observe::WaitArgs>),
    /// Print an execution's record.
    Status {
        /// Execution name or unambiguous prefix.
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Print the last lines of an execution's stdout (or stderr).
    Tail {
        /// Execution name or unambiguous prefix.
        name: String,
        /// How many lines (`-n` is the namespace, as in kubectl).
        #[arg(long = "tail", visible_alias = "lines", default_value_t = 20)]
        lines: usize,
        /// Show stderr instead of stdout (local runs only: a pod's log holds both).
        #[arg(long)]
        stderr: bool,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List or download an execution's results.
    Results {
        #[command(subcommand)]
        action: ResultsAction,
    },
    /// Stop a running execution; its partial results are saved.
    Cancel {
        /// Execution name or unambiguous prefix.
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Delete an execution with its record and results (stopping it first if it runs), or with
    /// `--all` every finished one.
    #[command(visible_alias = "rm")]
    Delete {
        /// Execution name or unambiguous prefix.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        name: Option<String>,
        #[command(flatten)]
        all: housekeeping::DeleteAllArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Stop a running execution (`--signal TERM`, the default: a cancel), stop it without the
    /// grace period (`KILL`), or locally send its agent's process group any other signal.
    Kill(Box<control::KillArgs>),
    /// Move a running execution's deadline (`set --in SECONDS --acknowledge-result-loss`) or
    /// go back to its timeoutSeconds (`clear`).
    Deadline {
        #[command(subcommand)]
        action: control::DeadlineAction,
    },
    /// Define an execution without starting it (phase `Created`); takes `execute`'s flags.
    Create(Box<ExecuteArgs>),
    /// Start an execution `create` defined.
    Start {
        /// Execution name or unambiguous prefix.
        name: String,
        #[command(flatten)]
        staging: staging::StagingArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Run a finished local execution again in place, from the same snapshot, once its old
    /// processes are gone (a running one is cancelled first). On a cluster use `rerun`.
    Restart {
        /// Execution name or unambiguous prefix.
        name: String,
        #[command(flatten)]
        staging: staging::StagingArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List executions, filtered by phase and tags.
    List(Box<listing::ListArgs>),
    /// List the executions that have not ended (pending, queued, starting, running).
    Ps(Box<listing::ListArgs>),
    /// Change where a running local execution's notifications go.
    Notify {
        #[command(subcommand)]
        action: NotifyAction,
    },
    /// Change an execution's tags.
    Tag {
        #[command(subcommand)]
        action: TagAction,
    },
    /// Run an execution again from its snapshot: the same config, environment, workdir digests
    /// and input, and on a cluster the image digest it ran; the new execution records which
    /// one it reran (`rerunOf`).
    Rerun(Box<rerun::RerunArgs>),
    /// Remove finished local executions (records, files and results) by age, count or size.
    Gc(Box<gc::GcArgs>),
    /// Operator commands: `sweep-store`.
    Admin {
        #[command(subcommand)]
        action: admin::AdminAction,
    },
    /// Store Agents, AgentEnvironments, AgentRuntimes, AgentExtensions, Filesets and Secrets from manifest files.
    Apply {
        /// Manifest files (YAML or JSON, several documents each).
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List, create (from a bare agent config) or delete Agents.
    Agents {
        #[command(subcommand)]
        action: Option<CatalogAction>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List or delete AgentEnvironments.
    Environments {
        #[command(subcommand)]
        action: Option<CatalogAction>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List or delete AgentRuntimes (cluster-scoped: how each harness kind runs).
    Runtimes {
        #[command(subcommand)]
        action: Option<CatalogAction>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List or delete AgentExtensions (cluster-scoped: the trusted steps after an agent run).
    Extensions {
        #[command(subcommand)]
        action: Option<CatalogAction>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Push, list or delete Filesets.
    Filesets {
        #[command(subcommand)]
        action: FilesetsAction,
    },
    /// Serve an Agent as an AgentDeployment; waits until it is Ready (or Failed: non-zero)
    /// unless `--no-wait`.
    Deploy(Box<deploy::DeployArgs>),
    /// Remove a deployment with its children, or with `--agent` every deployment of an Agent.
    Undeploy {
        /// The deployment.
        #[arg(required_unless_present = "agent", conflicts_with = "agent")]
        name: Option<String>,
        /// Remove every deployment that serves this Agent.
        #[arg(long)]
        agent: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Replace a deployment's agent: the new config is checked first (an invalid one changes
    /// nothing), then rolled out; the replaced Agent goes once nothing references it.
    Redeploy(Box<deploy::RedeployArgs>),
    /// List, show or wait for AgentDeployments.
    Deployments {
        #[command(subcommand)]
        action: deploy::DeploymentsAction,
    },
    /// Send one request to a deployment (or an agent's active one) through the gateway.
    Invoke {
        #[command(flatten)]
        target: deploy::GatewayTarget,
        /// The input.
        #[arg(long)]
        input: String,
        #[command(flatten)]
        gateway: deploy::GatewayArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// One turn of a named chat session with a deployment, through the gateway (resumable:
    /// the gateway keeps the session).
    Chat {
        #[command(flatten)]
        target: deploy::GatewayTarget,
        /// The session's name.
        #[arg(long)]
        session_name: String,
        /// The message.
        #[arg(long)]
        message: String,
        #[command(flatten)]
        gateway: deploy::GatewayArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// A deployment's chat sessions, through the gateway.
    Sessions {
        #[command(subcommand)]
        action: SessionsAction,
    },
    /// Print the JSON Schema of every answer `-o json` prints.
    Schema,
    /// Print a shell completion script: `errand completions bash > /etc/bash_completion.d/errand`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Serve errand's commands as MCP tools on stdin/stdout (execute, status, tail, wait,
    /// cancel, results_list, results_download, list); runs outlive the server.
    Mcp(Box<mcp::McpArgs>),
    /// Print every errand CustomResourceDefinition as YAML (or write one file each).
    Crds {
        /// Write `<plural>.errand.dev.yaml` files into this directory instead of printing.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Run the cluster controller (in the controller's Deployment).
    Controller(Box<controller::ControllerArgs>),
    /// In a pod's init container: install errand, stage the workdir, save `input_workdir`.
    #[command(hide = true)]
    Stage(Box<pod::StageArgs>),
    /// In a pod's agent container: run the agent under errand's runner and save its results.
    #[command(hide = true)]
    RunAgent(Box<pod::RunAgentArgs>),
    /// In a pod's extension container: after the agent's run succeeded, run the execution's
    /// extension and save its results.
    #[command(hide = true)]
    RunExtension(Box<pod::RunExtensionArgs>),
    /// Print the output of a deployment's agent servers (on a cluster: its pods' agent
    /// containers, each line prefixed with its pod when there are several).
    Logs {
        /// The deployment.
        name: String,
        /// How many of the last lines to print first.
        #[arg(long = "tail", default_value_t = 100)]
        lines: usize,
        /// Keep printing what the servers write until the deployment is removed (on a
        /// cluster: until its pods stop).
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Internal: the detached supervisor of a local AgentDeployment.
    #[command(name = "__serve-deployment", hide = true)]
    ServeDeployment {
        /// The deployment.
        name: String,
    },
    /// Internal: the detached supervisor of `execute --no-wait`.
    #[command(name = "__supervise", hide = true)]
    Supervise {
        /// The prepared execution.
        name: String,
        #[command(flatten)]
        staging: staging::StagingArgs,
    },
}

/// `errand results ...`
#[derive(Debug, Subcommand)]
pub enum ResultsAction {
    /// List the saved results with size and sha256.
    List {
        /// Execution name or unambiguous prefix.
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Download one result into a file.
    Download {
        /// `input_workdir`, `output_workdir`, `output_artifacts`, `run_result`, `run_error` or `manifest.json`.
        result: String,
        /// Execution name or unambiguous prefix (`--job` is the same option).
        #[arg(long, visible_alias = "job")]
        execution: String,
        /// File to write; defaults to the result's name in the current directory.
        #[arg(short = 'o', long = "out")]
        file: Option<PathBuf>,
        /// Answer format.
        #[arg(long, value_enum, default_value_t = Format::Human)]
        format: Format,
    },
}

/// `errand notify ...`
#[derive(Debug, Subcommand)]
pub enum NotifyAction {
    /// Set sinks or add an output watch (matching lines that appear from now on).
    Set {
        /// Execution name or unambiguous prefix.
        name: String,
        #[command(flatten)]
        notify: notify::NotifyArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// `errand tag ...`
#[derive(Debug, Subcommand)]
pub enum TagAction {
    /// Replace the execution's tags (none clears them).
    Set {
        /// Execution name or unambiguous prefix.
        name: String,
        /// The tags: dot-separated segments of lowercase letters, digits and inner `-`.
        tags: Vec<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// `errand sessions ...`
#[derive(Debug, Subcommand)]
pub enum SessionsAction {
    /// List a deployment's sessions (name, turns, last update).
    List {
        #[command(flatten)]
        target: deploy::GatewayTarget,
        #[command(flatten)]
        gateway: deploy::GatewayArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// `errand filesets ...`
#[derive(Debug, Subcommand)]
pub enum FilesetsAction {
    /// Pack a directory and store it as the Fileset's new content.
    Push {
        /// Fileset name.
        name: String,
        /// Directory to pack.
        dir: PathBuf,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// List Filesets.
    List {
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Delete a Fileset (executions keep the content they pinned).
    Delete {
        /// Fileset name.
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
}

impl Command {
    /// The output format the command answers in, for reporting its errors the same way.
    fn format(&self) -> Format {
        match self {
            Command::Execute(args) | Command::Create(args) => args.output.format,
            Command::Kill(args) => args.output.format,
            Command::Deadline { action } => action.output().format,
            Command::Start { output, .. } | Command::Restart { output, .. } => output.format,
            Command::Gc(args) => args.output.format,
            Command::Rerun(args) => args.output.format,
            Command::Wait(args) => args.output.format,
            Command::List(args) | Command::Ps(args) => args.output.format,
            Command::Tag {
                action: TagAction::Set { output, .. },
            }
            | Command::Notify {
                action: NotifyAction::Set { output, .. },
            } => output.format,
            Command::Admin { action } => action.output().format,
            Command::Deploy(args) => args.output.format,
            Command::Redeploy(args) => args.output.format,
            Command::Deployments { action } => action.output().format,
            Command::Watch { output, .. }
            | Command::Status { output, .. }
            | Command::Tail { output, .. }
            | Command::Cancel { output, .. }
            | Command::Delete { output, .. }
            | Command::Apply { output, .. }
            | Command::Agents { output, .. }
            | Command::Environments { output, .. }
            | Command::Runtimes { output, .. }
            | Command::Extensions { output, .. }
            | Command::Undeploy { output, .. }
            | Command::Invoke { output, .. }
            | Command::Chat { output, .. }
            | Command::Sessions {
                action: SessionsAction::List { output, .. },
            }
            | Command::Results {
                action: ResultsAction::List { output, .. },
            }
            | Command::Filesets {
                action:
                    FilesetsAction::Push { output, .. }
                    | FilesetsAction::List { output }
                    | FilesetsAction::Delete { output, .. },
            } => output.format,
            Command::Results {
                action: ResultsAction::Download { format, .. },
            } => *format,
            Command::Crds { .. }
            | Command::Schema
            | Command::Completions { .. }
            | Command::Mcp(_)
            | Command::Supervise { .. }
            | Command::ServeDeployment { .. }
            | Command::Logs { .. }
            | Command::Controller(_)
            | Command::Stage(_)
            | Command::RunAgent(_)
            | Command::RunExtension(_) => Format::Human,
        }
    }
}

/// Parses the command line `args` (the program name first) and runs it; returns the process
/// exit code. Arguments the parser refuses are reported like any other failure: with `-o json`
/// as exactly one JSON error object (`invalid_argument`, exit code 2).
pub fn run_args(args: Vec<OsString>) -> i32 {
    match Cli::try_parse_from(&args) {
        Ok(cli) => run(cli),
        Err(error) => report_parse_error(&args, &error),
    }
}

fn report_parse_error(args: &[OsString], error: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    let informational = matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    );
    let format = requested_format(args);
    if informational || format == Format::Human {
        // clap's own text: usage for people, and help or the version on request.
        let _ = error.print();
        return error.exit_code();
    }
    output::print_error(format, &Error::argument(parse_error_message(error)))
}

/// The first paragraph of clap's message, on one line and without its `error: ` prefix.
fn parse_error_message(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let paragraph = text.split("\n\n").next().unwrap_or_default();
    let words: Vec<&str> = paragraph.split_whitespace().collect();
    let line = words.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_owned()
}

/// The answer format the raw arguments ask for (`-o json`, `--output=yaml`, `--format json`,
/// `--yaml`), read before parsing so that a refused command line can still be answered in it.
/// Arguments after `--` belong to the agent.
fn requested_format(args: &[OsString]) -> Format {
    let args: Vec<&str> = args
        .iter()
        .skip(1)
        .map(|a| a.to_str().unwrap_or_default())
        .take_while(|a| *a != "--")
        .collect();
    let named = |value: &str| match value {
        "json" => Some(Format::Json),
        "yaml" => Some(Format::Yaml),
        _ => None,
    };
    let mut format = Format::Human;
    for (i, arg) in args.iter().enumerate() {
        let chosen = match *arg {
            "-o" | "--output" | "--format" => args.get(i + 1).and_then(|v| named(v)),
            "--yaml" => Some(Format::Yaml),
            _ => ["-o=", "--output=", "--format=", "-o"]
                .iter()
                .find_map(|prefix| arg.strip_prefix(prefix))
                .and_then(named),
        };
        format = chosen.unwrap_or(format);
    }
    format
}

/// The runtime a command runs on: a local run's own process (`execute --local`, the detached
/// supervisor) is one short task tree that waits on one child, and worker threads only add
/// thread starts and cross-thread wake-ups to it; everything else gets the worker pool.
fn runtime_builder(cli: &Cli) -> tokio::runtime::Builder {
    let local_run = match &cli.command {
        Command::Execute(_) => cli.target.local,
        Command::Supervise { .. } => true,
        _ => false,
    };
    if local_run {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let format = cli.command.format();
    let runtime = match runtime_builder(&cli).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            return output::print_error(
                format,
                &Error::new(
                    ErrorCode::Internal,
                    format!("cannot start the runtime: {e}"),
                ),
            );
        }
    };
    match runtime.block_on(dispatch(&cli.target, cli.command)) {
        Ok(code) => code,
        Err(error) => output::print_error(format, &error),
    }
}

/// Runs one command: the pod commands return their exit code, the others succeed (0) or fail
/// with the error `run` prints.
async fn dispatch(target: &Target, command: Command) -> Result<i32, Error> {
    let backend = || target.backend();
    let done = match command {
        Command::Controller(args) => controller::controller(*args).await,
        Command::Crds { out_dir } => print_crds(out_dir.as_deref()),
        Command::Schema => {
            output::write_line(format!("{:#}", schema::answers_schema()));
            Ok(())
        }
        Command::Completions { shell } => {
            housekeeping::print_completions(shell);
            Ok(())
        }
        Command::Mcp(args) => mcp::serve(target, &args).await,
        Command::Supervise { name, staging } => {
            crate::ops::local::Local::new(&target.config())?
                .supervise(&name, staging.settings())
                .await
        }
        Command::ServeDeployment { name } => {
            let local = crate::ops::local::Local::new(&target.config())?;
            crate::ops::local::serve_deployment(local.data, &local.namespace, &name).await
        }
        // Local only (gc refuses a cluster), or an operator's store with either backend.
        Command::Gc(args) => gc::gc(target, &args).await,
        Command::Admin { action } => admin::admin(target, &action).await,
        // The pod commands report through their exit code and termination message.
        Command::Stage(args) => return Ok(pod::stage(*args).await),
        Command::RunAgent(args) => return Ok(pod::run_agent(*args).await),
        Command::RunExtension(args) => return Ok(pod::run_extension(*args).await),
        Command::Execute(args) => commands::execute(&*backend().await?, &args).await,
        Command::Watch {
            name,
            excerpt,
            output,
        } => commands::watch(&*backend().await?, &name, &excerpt, output).await,
        Command::Wait(args) => observe::wait(&*backend().await?, &args).await,
        Command::Kill(args) => control::kill(&*backend().await?, &args).await,
        Command::Deadline { action } => control::deadline(&*backend().await?, &action).await,
        Command::Create(args) => control::create(&*backend().await?, &args).await,
        Command::Start {
            name,
            staging,
            output,
        } => control::start(&*backend().await?, &name, false, &staging, output).await,
        Command::Restart {
            name,
            staging,
            output,
        } => control::start(&*backend().await?, &name, true, &staging, output).await,
        Command::Status { name, output } => {
            commands::status(&*backend().await?, &name, output).await
        }
        Command::Tail {
            name,
            lines,
            stderr,
            output,
        } => commands::tail(&*backend().await?, &name, lines, stderr, output).await,
        Command::Results {
            action: ResultsAction::List { name, output },
        } => commands::results_list(&*backend().await?, &name, output).await,
        Command::Results {
            action:
                ResultsAction::Download {
                    result,
                    execution,
                    file,
                    format,
                },
        } => {
            commands::results_download(&*backend().await?, &result, &execution, file, format).await
        }
        Command::Cancel { name, output } => {
            commands::cancel(&*backend().await?, &name, output).await
        }
        Command::Delete {
            name: Some(name),
            output,
            ..
        } => commands::delete(&*backend().await?, &name, output).await,
        Command::Delete {
            name: None,
            all,
            output,
        } => housekeeping::delete_all(&*backend().await?, &all, output).await,
        Command::List(args) => listing::list(&*backend().await?, &args).await,
        Command::Ps(args) => listing::ps(&*backend().await?, &args).await,
        Command::Tag {
            action: TagAction::Set { name, tags, output },
        } => listing::tag_set(&*backend().await?, &name, &tags, output).await,
        Command::Notify {
            action:
                NotifyAction::Set {
                    name,
                    notify,
                    output,
                },
        } => notify::notify_set(&*backend().await?, &name, &notify, output).await,
        Command::Rerun(args) => rerun::rerun(&*backend().await?, *args).await,
        Command::Apply { files, output } => {
            commands::apply(&*backend().await?, &files, output).await
        }
        Command::Agents { action, output } => {
            commands::objects(
                &*backend().await?,
                ObjectKind::Agent,
                action.as_ref(),
                output,
            )
            .await
        }
        Command::Environments { action, output } => {
            commands::objects(
                &*backend().await?,
                ObjectKind::Environment,
                action.as_ref(),
                output,
            )
            .await
        }
        Command::Runtimes { action, output } => {
            commands::objects(
                &*backend().await?,
                ObjectKind::Runtime,
                action.as_ref(),
                output,
            )
            .await
        }
        Command::Extensions { action, output } => {
            commands::objects(
                &*backend().await?,
                ObjectKind::Extension,
                action.as_ref(),
                output,
            )
            .await
        }
        Command::Filesets {
            action: FilesetsAction::Push { name, dir, output },
        } => commands::push(&*backend().await?, &name, &dir, output).await,
        Command::Filesets {
            action: FilesetsAction::List { output },
        } => commands::list_filesets(&*backend().await?, output).await,
        Command::Filesets {
            action: FilesetsAction::Delete { name, output },
        } => commands::delete_object(&*backend().await?, ObjectKind::Fileset, &name, output).await,
        Command::Deploy(args) => deploy::deploy(&*backend().await?, &args).await,
        Command::Undeploy {
            name,
            agent,
            output,
        } => {
            deploy::undeploy(
                &*backend().await?,
                name.as_deref(),
                agent.as_deref(),
                output,
            )
            .await
        }
        Command::Redeploy(args) => deploy::redeploy(&*backend().await?, &args).await,
        Command::Deployments { action } => deploy::deployments(&*backend().await?, &action).await,
        Command::Logs {
            name,
            lines,
            follow,
        } => {
            backend()
                .await?
                .deployments()
                .logs(&name, lines, follow)
                .await
        }
        Command::Invoke {
            target,
            input,
            gateway,
            output,
        } => deploy::invoke(&*backend().await?, &target, &input, &gateway, output).await,
        Command::Chat {
            target,
            session_name,
            message,
            gateway,
            output,
        } => {
            deploy::chat(
                &*backend().await?,
                &target,
                &session_name,
                &message,
                &gateway,
                output,
            )
            .await
        }
        Command::Sessions {
            action:
                SessionsAction::List {
                    target,
                    gateway,
                    output,
                },
        } => deploy::sessions(&*backend().await?, &target, &gateway, output).await,
    };
    done.map(|()| 0)
}

fn print_crds(out_dir: Option<&std::path::Path>) -> Result<(), Error> {
    let render_error = |e: serde_saphyr::ser::Error| {
        Error::new(ErrorCode::Internal, format!("cannot render the CRDs: {e}"))
    };
    let Some(dir) = out_dir else {
        output::write_stdout(&crate::api::crds::all_yaml().map_err(render_error)?);
        return Ok(());
    };
    for (file, crd) in crate::api::crds::all() {
        let path = dir.join(file);
        let yaml = crate::api::crds::to_yaml(&crd).map_err(render_error)?;
        std::fs::write(&path, yaml).map_err(|e| {
            Error::new(
                ErrorCode::IoError,
                format!("cannot write {}: {e}", path.display()),
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_pod_commands_are_hidden_from_help() {
        let cli = super::Cli::command();
        for name in ["stage", "run-agent", "run-extension"] {
            let command = cli.find_subcommand(name).expect("a pod command");
            assert!(command.is_hide_set(), "{name} is listed in --help");
        }
        let help = cli.clone().render_help().to_string();
        assert!(!help.contains("run-agent"), "{help}");
        assert!(help.contains("execute"), "{help}");
    }

    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn the_answer_format_is_read_from_raw_arguments() {
        use super::{Format, requested_format};
        let format = |args: &[&str]| {
            let args: Vec<std::ffi::OsString> = std::iter::once("errand")
                .chain(args.iter().copied())
                .map(Into::into)
                .collect();
            requested_format(&args)
        };
        for json in [
            &["status", "-o", "json"][..],
            &["status", "-ojson"],
            &["--output=json", "list"],
            &["results", "download", "x", "--format", "json"],
        ] {
            assert_eq!(format(json), Format::Json, "{json:?}");
        }
        for yaml in [
            &["status", "-o", "yaml"][..],
            &["status", "--yaml"],
            &["--output=yaml", "list"],
            &["status", "-oyaml"],
        ] {
            assert_eq!(format(yaml), Format::Yaml, "{yaml:?}");
        }
        for human in [
            &["status", "x"][..],
            &["status", "-o", "human"],
            &["run-agent", "--", "agent", "-o", "json"],
        ] {
            assert_eq!(format(human), Format::Human, "{human:?}");
        }
    }

    #[test]
    fn a_refused_argument_reads_as_one_line() {
        let error = <super::Cli as clap::Parser>::try_parse_from([
            "errand",
            "execute",
            "--timeout-seconds",
            "abc",
        ])
        .unwrap_err();
        assert_eq!(
            super::parse_error_message(&error),
            "invalid value 'abc' for '--timeout-seconds <TIMEOUT_SECONDS>': invalid digit found in string"
        );
        let error =
            <super::Cli as clap::Parser>::try_parse_from(["errand", "status", "-o", "json"])
                .unwrap_err();
        assert_eq!(
            super::parse_error_message(&error),
            "the following required arguments were not provided: <NAME>"
        );
    }

    #[test]
    fn a_download_names_its_execution_with_execution_or_the_older_job() {
        for flag in ["--execution", "--job"] {
            let cli = <super::Cli as clap::Parser>::try_parse_from([
                "errand",
                "results",
                "download",
                "run_result",
                flag,
                "calc-1",
            ])
            .unwrap();
            let super::Command::Results {
                action: super::ResultsAction::Download { execution, .. },
            } = cli.command
            else {
                panic!("{flag}: not a download: {:?}", cli.command);
            };
            assert_eq!(execution, "calc-1", "{flag}");
        }
    }
}
