//! `errand execute`, `create`, `start` and `restart`: build a spec from `--spec`/`--spec-file` and flags, then run it, define it, or start what was defined.

use std::path::PathBuf;

use super::observe::{DEFAULT_POLL_SECONDS, answer_observed, observe, with_excerpts, with_sizes};
use crate::api::MAX_TIMEOUT_SECONDS;
use crate::cli::answers::ExecutionView;
use crate::cli::inputs::{piped_stdin, read_inputs};
use crate::cli::output::{Format, print_ok};
use crate::cli::show::{print_record, record_outcome};
use crate::cli::staging::StagingArgs;
use crate::ops::Error;
use crate::ops::backend::Backend;
use crate::ops::execute::{CreateOptions, ExecutionRequest};
use crate::ops::lookup::find;
use crate::ops::request::{SpecFlags, request};

/// The spec flags `execute`, `create` and `schedule create` share; each overrides the same
/// field of `--spec`/`--spec-file`.
#[derive(Debug, Default, clap::Args)]
pub struct SpecArgs {
    /// The agent: the name of an applied Agent (`NAME` or `NAMESPACE/NAME`, which must be the
    /// target namespace), or a manifest file holding one (run inline).
    #[arg(long)]
    pub agent: Option<String>,
    /// The input given to the agent.
    #[arg(long)]
    pub input: Option<String>,
    /// The environment: the name of an applied AgentEnvironment (`NAME` or `NAMESPACE/NAME`,
    /// which must be the target namespace), or a manifest file holding one.
    #[arg(long)]
    pub environment: Option<String>,
    /// The base working directory: a Fileset (`name[#path/]`), or a local directory that is
    /// pushed as a Fileset first.
    #[arg(long = "workdir.base-workdir", value_name = "FILESET|DIR")]
    pub base_workdir: Option<String>,
    /// Seconds the agent may run, at most 604800 (7 days).
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=MAX_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<i64>,
    /// Turn on the agent's telemetry export.
    #[arg(long)]
    pub auto_telemetry: bool,
    /// The whole spec as JSON: the AgentExecution's spec (camelCase), the NeMo job spec
    /// (`agent`, `environment`, `workdir.base_workdir`, `timeout_seconds`, ...), or an
    /// AgentExecution.
    #[arg(long, conflicts_with = "spec_file")]
    pub spec: Option<String>,
    /// A file holding the spec in either shape (or an AgentExecution manifest), YAML or JSON.
    #[arg(long)]
    pub spec_file: Option<PathBuf>,
}

impl SpecArgs {
    /// What these flags say of the spec (no name, no notification).
    pub fn flags(&self) -> SpecFlags {
        SpecFlags {
            agent: self.agent.clone(),
            input: self.input.clone(),
            environment: self.environment.clone(),
            base_workdir: self.base_workdir.clone(),
            timeout_seconds: self.timeout_seconds,
            auto_telemetry: self.auto_telemetry,
            spec: self.spec.clone(),
            spec_file: self.spec_file.clone(),
            ..SpecFlags::default()
        }
    }
}

/// Flags of `errand execute`. Flags override the same fields of `--spec`/`--spec-file`.
#[derive(Debug, clap::Args)]
pub struct ExecuteArgs {
    #[command(flatten)]
    pub spec_args: SpecArgs,
    /// Name of the execution; generated from the agent's name when not given.
    #[arg(long)]
    pub name: Option<String>,
    /// Return at once, leaving the run going in the background.
    #[arg(long, conflicts_with_all = ["until", "forever"])]
    pub no_wait: bool,
    /// Observe the run for up to this many seconds, then return it as it stands with excerpts
    /// of its output; it goes on in the background.
    #[arg(long, value_name = "SECONDS", value_parser = super::observe::parse_until, conflicts_with = "forever")]
    pub until: Option<f64>,
    /// Wait until the run ends (the default).
    #[arg(long)]
    pub forever: bool,
    #[command(flatten)]
    pub excerpt: super::observe::ExcerptArgs,
    /// Give a local agent this shell's whole environment (but errand's own `ERRAND_*`
    /// variables). By default it gets what a pod would: its resolved environment with `PATH`,
    /// `HOME`, `LANG` and `TZ`.
    #[arg(long)]
    pub inherit_env: bool,
    #[command(flatten)]
    pub inputs: crate::cli::inputs::InputArgs,
    #[command(flatten)]
    pub notify: super::notify::NotifyArgs,
    #[command(flatten)]
    pub staging: StagingArgs,
    #[command(flatten)]
    pub telemetry: crate::cli::telemetry::TelemetryArgs,
}

impl ExecuteArgs {
    /// The options a backend creates and runs the execution with, answering in `format`.
    pub fn options(&self, format: Format) -> CreateOptions {
        CreateOptions {
            inherit_env: self.inherit_env,
            otlp_endpoint: self.telemetry.otlp_endpoint.clone(),
            notify: self.notify.change(),
            staging: self.staging.settings(),
            report_gc: format == Format::Human,
        }
    }

    /// What the flags say of the spec.
    fn spec_flags(&self) -> SpecFlags {
        SpecFlags {
            name: self.name.clone(),
            notify: self.notify.change(),
            ..self.spec_args.flags()
        }
    }

    /// The request the flags and the input flags make (standard input read first). A request
    /// with no input at all is made, with a warning on stderr: an agent may work from its
    /// working directory alone, but most want a question.
    async fn request(&self, backend: &dyn Backend) -> Result<ExecutionRequest, Error> {
        let inputs = read_inputs(&self.inputs, piped_stdin)?;
        let request = request(&self.spec_flags(), inputs, backend).await?;
        if let Some(warning) = missing_input(self.spec_args.input.is_some(), &request) {
            eprintln!("{warning}");
        }
        Ok(request)
    }

    /// `errand execute`: creates the execution, then runs or follows it to its end and prints its
    /// record with the response and excerpts of its output; `--until` observes it for a bounded
    /// time instead, `--no-wait` not at all.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let args = self;
        let request = args.request(backend).await?;
        if request.spec.held {
            request.abandon(backend).await;
            return Err(Error::argument(
                "spec.held: `execute` starts the execution it creates; `errand create` defines one without starting it",
            ));
        }
        let options = args.options(format);
        let record = request.create(backend, &options).await?;
        if args.no_wait {
            let record = backend.detach(&record, &options).await?;
            print_ok(
                format,
                "execution",
                &ExecutionView::of(record.clone()),
                || {
                    format!(
                        "execution {} started in the background in namespace {}; follow it with `errand watch {}`",
                        record.name, record.namespace, record.name
                    )
                },
            );
            return Ok(());
        }
        if let Some(until) = args.until {
            let record = backend.detach(&record, &options).await?;
            let (record, observation) =
                observe(backend, record, until, DEFAULT_POLL_SECONDS).await?;
            return answer_observed(backend, record, observation, &args.excerpt, format).await;
        }
        // In JSON mode stdout carries exactly one object, so the agent's output is not passed through.
        let record = backend
            .run(&record, &options, format == Format::Human)
            .await?;
        let view = with_excerpts(backend, record, &args.excerpt).await?;
        record_outcome(format, &view, || print_record(&view.record))
    }

    /// `errand create`: defines an execution as `execute` would, without starting it (phase
    /// `Created`).
    pub async fn create(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let args = self;
        if args.no_wait || args.until.is_some() || args.forever {
            return Err(Error::argument(
                "--no-wait, --until and --forever: create starts nothing to wait for; `errand start NAME` starts it",
            ));
        }
        let mut request = args.request(backend).await?;
        request.spec.held = true;
        let record = request.create(backend, &args.options(format)).await?;
        print_ok(
            format,
            "execution",
            &ExecutionView::of(record.clone()),
            || {
                format!(
                    "execution {} created in namespace {}; start it with `errand start {}`",
                    record.name, record.namespace, record.name
                )
            },
        );
        Ok(())
    }
}

/// The warning for a request that gives the agent nothing to work on: no `--input` (an
/// explicit `--input ""` is meant), no input in the spec, no standard input, and no rerun (which
/// takes its original's input).
fn missing_input(input_given: bool, request: &ExecutionRequest) -> Option<String> {
    let spec = &request.spec;
    let empty = !input_given
        && spec.input.is_empty()
        && request.inputs.stdin.is_none()
        && spec.rerun_of.is_none();
    empty.then(|| {
        "warning: no --input: the agent starts with an empty input (give --input TEXT, \
         --stdin VALUE or --stdin-file PATH, or --input \"\" to mean it)"
            .to_owned()
    })
}

/// Flags of `errand start` and `errand restart`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// Execution name or unambiguous prefix.
    pub name: String,
    #[command(flatten)]
    pub staging: StagingArgs,
}

impl StartArgs {
    /// `errand start NAME`.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        self.start(backend, false, format).await
    }

    /// `errand restart NAME`.
    pub async fn restart(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        self.start(backend, true, format).await
    }

    /// `errand start NAME` and `errand restart NAME`: the execution as it stands once its run was
    /// handed on (it runs without this process).
    async fn start(
        &self,
        backend: &dyn Backend,
        restart: bool,
        format: Format,
    ) -> Result<(), Error> {
        let (name, staging) = (&self.name, &self.staging);
        let record = find(backend, name).await?;
        let record = if restart {
            backend.restart(&record, &staging.settings()).await?
        } else {
            backend.start(&record, &staging.settings()).await?
        };
        let view = with_sizes(backend, record).await?;
        print_ok(format, "execution", &view, || print_record(&view.record));
        Ok(())
    }
}
