//! `errand stage`, `errand run-agent` and `errand run-extension`: the flags errand's containers in an execution's pod are started with (see `controller::execution::build::pod`).

use std::path::PathBuf;

use crate::runner::extension_pod::{self, ExtensionPodPaths};
use crate::runner::pod::{self, ExtensionPaths, PodPaths};
use crate::store::grant_request::GrantRequest;
use crate::store::keys::ExecutionId;

/// The mounted inputs both commands read.
#[derive(Debug, clap::Args)]
pub struct PodPathArgs {
    /// The snapshot document (from the execution's snapshot ConfigMap).
    #[arg(long)]
    pub snapshot: PathBuf,
    /// The grants document: signed URLs for the execution's inputs and results. `stage` writes
    /// it when it asks the controller for them; `run-agent` removes it once read.
    #[arg(long)]
    pub grants: PathBuf,
    /// The working directory.
    #[arg(long)]
    pub workspace: PathBuf,
    /// The scratch directory shared by errand's containers (logs, artifacts, spooled uploads).
    #[arg(long)]
    pub scratch: PathBuf,
    /// Where to write the summary Kubernetes reports as the container's termination message.
    #[arg(long, default_value = pod::TERMINATION_LOG)]
    pub termination_log: PathBuf,
    /// For an execution with an extension: where `stage` keeps the extension's grants (a
    /// volume only the extension's container mounts besides the stage's).
    #[arg(long, requires = "handoff")]
    pub extension_grants: Option<PathBuf>,
    /// For an execution with an extension: where `run-agent` writes its summary once the run's
    /// results are saved, for the extension's container.
    #[arg(long, requires = "extension_grants")]
    pub handoff: Option<PathBuf>,
}

impl PodPathArgs {
    fn paths(&self) -> PodPaths {
        PodPaths {
            snapshot: self.snapshot.clone(),
            grants: self.grants.clone(),
            workspace: self.workspace.clone(),
            scratch: self.scratch.clone(),
            termination_log: self.termination_log.clone(),
            extension: self
                .extension_grants
                .clone()
                .zip(self.handoff.clone())
                .map(|(grants, handoff)| ExtensionPaths { grants, handoff }),
        }
    }
}

/// Options of `errand run-extension`.
#[derive(Debug, clap::Args)]
pub struct RunExtensionArgs {
    /// The snapshot document, with the extension's definition.
    #[arg(long)]
    pub snapshot: PathBuf,
    /// The merged agent config the step finds through `AGENT_CONFIG_PATH`.
    #[arg(long)]
    pub agent_config: PathBuf,
    /// The extension's grants, removed once read.
    #[arg(long)]
    pub grants: PathBuf,
    /// Where `run-agent` writes its summary when the run ended.
    #[arg(long)]
    pub handoff: PathBuf,
    /// The step's own directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Where to write the summary Kubernetes reports as the container's termination message.
    #[arg(long, default_value = pod::TERMINATION_LOG)]
    pub termination_log: PathBuf,
}

/// Runs `errand run-extension`; returns the exit code.
pub async fn run_extension(args: RunExtensionArgs) -> i32 {
    init_logs();
    extension_pod::run_extension_in_pod(&ExtensionPodPaths {
        snapshot: args.snapshot,
        agent_config: args.agent_config,
        grants: args.grants,
        handoff: args.handoff,
        dir: args.dir,
        termination_log: args.termination_log,
    })
    .await
}

/// Where `errand stage` asks for the grants, and as which pod of which execution.
#[derive(Debug, clap::Args)]
pub struct GrantRequestArgs {
    /// Ask the controller at this URL for the grants (and keep them at `--grants` for
    /// `run-agent`); without it, `--grants` must hold them already.
    #[arg(
        long,
        requires_all = ["grant_token", "execution_namespace", "execution_name", "execution_uid"]
    )]
    pub controller_url: Option<String>,
    /// The pod's projected ServiceAccount token, with errand's audience.
    #[arg(long)]
    pub grant_token: Option<PathBuf>,
    /// The execution's namespace.
    #[arg(long)]
    pub execution_namespace: Option<String>,
    /// The execution's name.
    #[arg(long)]
    pub execution_name: Option<String>,
    /// The execution's uid.
    #[arg(long)]
    pub execution_uid: Option<String>,
}

impl GrantRequestArgs {
    fn request(&self) -> Option<GrantRequest> {
        Some(GrantRequest {
            controller_url: self.controller_url.clone()?,
            token: self.grant_token.clone()?,
            execution: ExecutionId {
                namespace: self.execution_namespace.clone()?,
                name: self.execution_name.clone()?,
                uid: self.execution_uid.clone()?,
            },
        })
    }
}

/// Options of `errand stage`.
#[derive(Debug, clap::Args)]
pub struct StageArgs {
    /// Where to install this errand binary for the agent's container.
    #[arg(long)]
    pub bin_dir: PathBuf,
    #[command(flatten)]
    pub paths: PodPathArgs,
    #[command(flatten)]
    pub grants: GrantRequestArgs,
    #[command(flatten)]
    pub staging: crate::cli::staging::StagingArgs,
    #[command(flatten)]
    pub telemetry: crate::cli::telemetry::TelemetryArgs,
}

/// Options of `errand run-agent`.
#[derive(Debug, clap::Args)]
pub struct RunAgentArgs {
    /// The merged agent config the agent finds through `AGENT_CONFIG_PATH`.
    #[arg(long)]
    pub agent_config: PathBuf,
    #[command(flatten)]
    pub paths: PodPathArgs,
    #[command(flatten)]
    pub telemetry: crate::cli::telemetry::TelemetryArgs,
    /// The agent's command and arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Runs `errand stage`; returns the exit code.
pub async fn stage(args: StageArgs) -> i32 {
    init_logs();
    let request = args.grants.request();
    pod::stage_in_pod(
        &args.paths.paths(),
        request.as_ref(),
        &args.bin_dir,
        &args.staging.settings(),
        args.telemetry.otlp_endpoint.as_ref(),
    )
    .await
}

/// Runs `errand run-agent`; returns the exit code.
pub async fn run_agent(args: RunAgentArgs) -> i32 {
    init_logs();
    pod::run_agent_in_pod(
        &args.paths.paths(),
        &args.agent_config,
        args.command,
        args.telemetry.otlp_endpoint.as_ref(),
    )
    .await
}

/// errand's own lines go to stderr, prefixed, between the agent's output in the container log.
fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ERRAND_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
