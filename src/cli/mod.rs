//! The `errand` command line: argument parsing and dispatch to the commands.

mod answers;
mod commands;
mod inputs;
mod output;
mod show;
mod staging;
mod target;
mod telemetry;

use std::ffi::OsString;

use clap::{Parser, Subcommand};

use crate::local::ObjectKind;
use crate::ops::{Error, ErrorCode};
use commands::execute::{ExecuteArgs, StartArgs};
use commands::{
    admin, control, controller, deploy, filesets, gc, housekeeping, listing, mcp, notify, objects,
    observe, pod, rerun, results, schedule, schema,
};
pub use output::{EXIT_BROKEN_PIPE, Format, OutputArgs, SCHEMA_VERSION};
#[cfg(test)]
use results::ResultsAction;
use target::Target;

/// Run an AI agent once, to completion, and keep everything it produced.
#[derive(Debug, Parser)]
#[command(name = "errand", version, about)]
pub struct Cli {
    /// Where commands act.
    #[command(flatten)]
    pub target: Target,
    /// How the answer is printed, anywhere on the line.
    #[command(flatten)]
    pub output: OutputArgs,
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
    Watch(observe::WatchArgs),
    /// Look at an execution until it ends or `--until` seconds pass (it goes on either way);
    /// print it with excerpts of its output.
    Wait(Box<observe::WaitArgs>),
    /// Print an execution's record.
    Status(observe::StatusArgs),
    /// Print the last lines of an execution's stdout (or stderr).
    Tail(observe::TailArgs),
    /// List or download an execution's results.
    Results {
        #[command(subcommand)]
        action: results::ResultsAction,
    },
    /// Stop a running execution; its partial results are saved.
    Cancel(control::CancelArgs),
    /// Delete an execution with its record and results (stopping it first if it runs), or with
    /// `--all` every finished one.
    #[command(visible_alias = "rm")]
    Delete(housekeeping::DeleteArgs),
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
    Start(Box<StartArgs>),
    /// Run a finished local execution again in place, from the same snapshot, once its old
    /// processes are gone (a running one is cancelled first). On a cluster use `rerun`.
    Restart(Box<StartArgs>),
    /// List executions, filtered by phase and tags.
    List(Box<listing::ListArgs>),
    /// List the executions that have not ended (pending, queued, starting, running).
    Ps(Box<listing::ListArgs>),
    /// Change where a running local execution's notifications go.
    Notify {
        #[command(subcommand)]
        action: notify::NotifyAction,
    },
    /// Change an execution's tags.
    Tag {
        #[command(subcommand)]
        action: listing::TagAction,
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
    Apply(objects::ApplyArgs),
    /// List, create (from a bare agent config) or delete Agents.
    Agents(objects::CatalogArgs),
    /// List or delete AgentEnvironments.
    Environments(objects::CatalogArgs),
    /// List or delete AgentRuntimes (cluster-scoped: how each harness kind runs).
    Runtimes(objects::CatalogArgs),
    /// List or delete AgentExtensions (cluster-scoped: the trusted steps after an agent run).
    Extensions(objects::CatalogArgs),
    /// Push, list or delete Filesets.
    Filesets {
        #[command(subcommand)]
        action: filesets::FilesetsAction,
    },
    /// Serve an Agent as an AgentDeployment; waits until it is Ready (or Failed: non-zero)
    /// unless `--no-wait`.
    Deploy(Box<deploy::DeployArgs>),
    /// Remove a deployment with its children, or with `--agent` every deployment of an Agent.
    Undeploy(deploy::UndeployArgs),
    /// Replace a deployment's agent: the new config is checked first (an invalid one changes
    /// nothing), then rolled out; the replaced Agent goes once nothing references it.
    Redeploy(Box<deploy::RedeployArgs>),
    /// List, show or wait for AgentDeployments.
    Deployments {
        #[command(subcommand)]
        action: deploy::DeploymentsAction,
    },
    /// Create, list, show, suspend, resume, trigger or delete AgentSchedules: executions
    /// created on a cron schedule.
    Schedule {
        #[command(subcommand)]
        action: schedule::ScheduleAction,
    },
    /// Send one request to a deployment (or an agent's active one) through the gateway.
    Invoke(Box<deploy::InvokeArgs>),
    /// One turn of a named chat session with a deployment, through the gateway (resumable:
    /// the gateway keeps the session).
    Chat(Box<deploy::ChatArgs>),
    /// A deployment's chat sessions, through the gateway.
    Sessions {
        #[command(subcommand)]
        action: deploy::SessionsAction,
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
    /// cancel, results_list, results_download, list, schedule_create, schedule_list,
    /// schedule_trigger); runs outlive the server.
    Mcp(Box<mcp::McpArgs>),
    /// Print every errand CustomResourceDefinition as YAML (or write one file each).
    Crds(housekeeping::CrdsArgs),
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
    Logs(deploy::LogsArgs),
    /// Internal: the detached supervisor of a local AgentDeployment.
    #[command(name = "__serve-deployment", hide = true)]
    ServeDeployment {
        /// The deployment.
        name: String,
    },
    /// Internal: the detached supervisor of a local AgentSchedule.
    #[command(name = "__serve-schedule", hide = true)]
    ServeSchedule {
        /// The schedule.
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

impl Command {
    /// Whether the command prints its own format (YAML, a script, a protocol, a pod's
    /// termination message) and so takes no `-o`.
    fn answers_in_own_format(&self) -> bool {
        matches!(
            self,
            Command::Crds(_)
                | Command::Schema
                | Command::Completions { .. }
                | Command::Mcp(_)
                | Command::Supervise { .. }
                | Command::ServeDeployment { .. }
                | Command::ServeSchedule { .. }
                | Command::Logs(_)
                | Command::Controller(_)
                | Command::Stage(_)
                | Command::RunAgent(_)
                | Command::RunExtension(_)
        )
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

/// Whether the command creates files in the data directory (or starts what does), and so runs
/// under umask 077: all but the pod commands and the controller (whose files are the pod's and
/// the store volume's) and those that only print.
fn keeps_files_private(command: &Command) -> bool {
    !matches!(
        command,
        Command::Controller(_)
            | Command::Stage(_)
            | Command::RunAgent(_)
            | Command::RunExtension(_)
            | Command::Crds(_)
            | Command::Schema
            | Command::Completions { .. }
    )
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    if keeps_files_private(&cli.command) {
        crate::ops::private::make_private();
    }
    let format = cli.output.format;
    if format != Format::Human && cli.command.answers_in_own_format() {
        return output::print_error(
            format,
            &Error::argument(
                "this command prints its own format and takes no -o/--output; leave the option out",
            ),
        );
    }
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
    match runtime.block_on(dispatch(&cli.target, format, cli.command)) {
        Ok(code) => code,
        Err(error) => output::print_error(format, &error),
    }
}

/// Runs one command: the pod commands return their exit code, the others succeed (0) or fail
/// with the error `run` prints.
async fn dispatch(target: &Target, format: Format, command: Command) -> Result<i32, Error> {
    let backend = || target.backend();
    let done = match command {
        Command::Controller(args) => controller::controller(*args).await,
        Command::Crds(args) => args.exec(),
        Command::Schema => {
            output::write_line(format!("{:#}", schema::answers_schema()));
            Ok(())
        }
        Command::Completions { shell } => {
            housekeeping::print_completions(shell);
            Ok(())
        }
        Command::Mcp(args) => args.exec(target).await,
        Command::Supervise { name, staging } => {
            crate::ops::local::Local::new(&target.config())?
                .supervise(&name, staging.settings())
                .await
        }
        Command::ServeDeployment { name } => {
            let local = crate::ops::local::Local::new(&target.config())?;
            crate::ops::local::serve_deployment(local.data, &local.namespace, &name).await
        }
        Command::ServeSchedule { name } => {
            let local = crate::ops::local::Local::new(&target.config())?;
            crate::ops::local::serve_schedule(local, &name).await
        }
        // Local only (gc refuses a cluster), or an operator's store with either backend.
        Command::Gc(args) => args.exec(target, format).await,
        Command::Admin { action } => action.exec(target, format).await,
        // The pod commands report through their exit code and termination message.
        Command::Stage(args) => return Ok(pod::stage(*args).await),
        Command::RunAgent(args) => return Ok(pod::run_agent(*args).await),
        Command::RunExtension(args) => return Ok(pod::run_extension(*args).await),
        Command::Execute(args) => args.exec(&*backend().await?, format).await,
        Command::Watch(args) => args.exec(&*backend().await?, format).await,
        Command::Wait(args) => args.exec(&*backend().await?, format).await,
        Command::Status(args) => args.exec(&*backend().await?, format).await,
        Command::Tail(args) => args.exec(&*backend().await?, format).await,
        Command::Results { action } => action.exec(&*backend().await?, format).await,
        Command::Cancel(args) => args.exec(&*backend().await?, format).await,
        Command::Delete(args) => args.exec(&*backend().await?, format).await,
        Command::Kill(args) => args.exec(&*backend().await?, format).await,
        Command::Deadline { action } => action.exec(&*backend().await?, format).await,
        Command::Create(args) => args.create(&*backend().await?, format).await,
        Command::Start(args) => args.exec(&*backend().await?, format).await,
        Command::Restart(args) => args.restart(&*backend().await?, format).await,
        Command::List(args) => args.exec(&*backend().await?, format).await,
        Command::Ps(args) => args.ps(&*backend().await?, format).await,
        Command::Tag { action } => action.exec(&*backend().await?, format).await,
        Command::Notify { action } => action.exec(&*backend().await?, format).await,
        Command::Rerun(args) => args.exec(&*backend().await?, format).await,
        Command::Apply(args) => args.exec(&*backend().await?, format).await,
        Command::Agents(args) => {
            args.exec(&*backend().await?, ObjectKind::Agent, format)
                .await
        }
        Command::Environments(args) => {
            args.exec(&*backend().await?, ObjectKind::Environment, format)
                .await
        }
        Command::Runtimes(args) => {
            args.exec(&*backend().await?, ObjectKind::Runtime, format)
                .await
        }
        Command::Extensions(args) => {
            args.exec(&*backend().await?, ObjectKind::Extension, format)
                .await
        }
        Command::Filesets { action } => action.exec(&*backend().await?, format).await,
        Command::Deploy(args) => args.exec(&*backend().await?, format).await,
        Command::Undeploy(args) => args.exec(&*backend().await?, format).await,
        Command::Redeploy(args) => args.exec(&*backend().await?, format).await,
        Command::Deployments { action } => action.exec(&*backend().await?, format).await,
        Command::Schedule { action } => action.exec(&*backend().await?, format).await,
        Command::Logs(args) => args.exec(&*backend().await?).await,
        Command::Invoke(args) => args.exec(&*backend().await?, format).await,
        Command::Chat(args) => args.exec(&*backend().await?, format).await,
        Command::Sessions { action } => action.exec(&*backend().await?, format).await,
    };
    done.map(|()| 0)
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
    fn the_answer_format_is_one_option_anywhere_on_the_line() {
        use super::Format;
        for args in [
            &["errand", "-o", "json", "status", "x"][..],
            &["errand", "status", "-o", "json", "x"],
            &["errand", "status", "x", "--output=json"],
            &["errand", "results", "list", "x", "--format", "json"],
            &["errand", "schedule", "list", "-ojson"],
        ] {
            let cli = <super::Cli as clap::Parser>::try_parse_from(args).unwrap();
            assert_eq!(cli.output.format, Format::Json, "{args:?}");
        }
        let cli =
            <super::Cli as clap::Parser>::try_parse_from(["errand", "list", "--yaml"]).unwrap();
        assert_eq!(cli.output.format, Format::Yaml);
        let cli = <super::Cli as clap::Parser>::try_parse_from(["errand", "list"]).unwrap();
        assert_eq!(cli.output.format, Format::Human);
    }

    #[test]
    fn a_command_that_prints_its_own_format_refuses_another() {
        for args in [
            &["errand", "crds", "-o", "json"][..],
            &["errand", "schema", "--yaml"],
            &["errand", "completions", "bash", "-o", "json"],
        ] {
            let cli = <super::Cli as clap::Parser>::try_parse_from(args).unwrap();
            assert!(cli.command.answers_in_own_format(), "{args:?}");
            assert_eq!(super::run(cli), 2, "{args:?}");
        }
        let cli = <super::Cli as clap::Parser>::try_parse_from(["errand", "status", "x"]).unwrap();
        assert!(!cli.command.answers_in_own_format());
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
