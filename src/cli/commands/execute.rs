//! `errand execute`, `create`, `start` and `restart`: build a spec from `--spec`/`--spec-file` and flags, then run it, define it, or start what was defined.

use std::path::{Path, PathBuf};

use super::observe::{DEFAULT_POLL_SECONDS, answer_observed, observe, with_excerpts, with_sizes};
use crate::api::{AgentExecutionSpec, MAX_TIMEOUT_SECONDS, Reference, Workdir};
use crate::cli::answers::ExecutionView;
use crate::cli::inputs::{add_env, piped_stdin, read_inputs};
use crate::cli::output::{Format, OutputArgs, print_ok};
use crate::cli::show::{print_record, record_outcome};
use crate::cli::staging::StagingArgs;
use crate::local::{
    DocumentError, ManifestObject, parse_document, parse_manifests, read_manifest_file,
};
use crate::ops::backend::undo_push;
use crate::ops::backend::{Backend, PushedFileset, find};
use crate::ops::execute::{CreateOptions, ExecutionRequest};
use crate::ops::{Error, ErrorCode};
use crate::resolve::{InvalidSpec, parse_spec, workspace_name};

/// Flags of `errand execute`. Flags override the same fields of `--spec`/`--spec-file`.
#[derive(Debug, clap::Args)]
pub struct ExecuteArgs {
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
    #[command(flatten)]
    pub output: OutputArgs,
}

impl ExecuteArgs {
    /// The options a backend creates and runs the execution with.
    pub fn options(&self) -> CreateOptions {
        CreateOptions {
            inherit_env: self.inherit_env,
            otlp_endpoint: self.telemetry.otlp_endpoint.clone(),
            notify: self.notify.change(),
            staging: self.staging.settings(),
            report_gc: self.output.format == Format::Human,
        }
    }

    /// `errand execute`: creates the execution, then runs or follows it to its end and prints its
    /// record with the response and excerpts of its output; `--until` observes it for a bounded
    /// time instead, `--no-wait` not at all.
    pub async fn exec(&self, backend: &dyn Backend) -> Result<(), Error> {
        let args = self;
        let format = args.output.format;
        let request = spec_from_args(args, backend).await?;
        if request.spec.held {
            request.abandon(backend).await;
            return Err(Error::argument(
                "spec.held: `execute` starts the execution it creates; `errand create` defines one without starting it",
            ));
        }
        let options = args.options();
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
            return answer_observed(backend, record, observation, &args.excerpt, args.output).await;
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
    pub async fn create(&self, backend: &dyn Backend) -> Result<(), Error> {
        let args = self;
        if args.no_wait || args.until.is_some() || args.forever {
            return Err(Error::argument(
                "--no-wait, --until and --forever: create starts nothing to wait for; `errand start NAME` starts it",
            ));
        }
        let mut request = spec_from_args(args, backend).await?;
        request.spec.held = true;
        let record = request.create(backend, &args.options()).await?;
        print_ok(
            args.output.format,
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

/// Flags of `errand start` and `errand restart`.
#[derive(Debug, clap::Args)]
pub struct StartArgs {
    /// Execution name or unambiguous prefix.
    pub name: String,
    #[command(flatten)]
    pub staging: StagingArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

impl StartArgs {
    /// `errand start NAME`.
    pub async fn exec(&self, backend: &dyn Backend) -> Result<(), Error> {
        self.start(backend, false).await
    }

    /// `errand restart NAME`.
    pub async fn restart(&self, backend: &dyn Backend) -> Result<(), Error> {
        self.start(backend, true).await
    }

    /// `errand start NAME` and `errand restart NAME`: the execution as it stands once its run was
    /// handed on (it runs without this process).
    async fn start(&self, backend: &dyn Backend, restart: bool) -> Result<(), Error> {
        let (name, staging, output) = (&self.name, &self.staging, self.output);
        let record = find(backend, name).await?;
        let record = if restart {
            backend.restart(&record, &staging.settings()).await?
        } else {
            backend.start(&record, &staging.settings()).await?
        };
        let view = with_sizes(backend, record).await?;
        print_ok(output.format, "execution", &view, || {
            print_record(&view.record)
        });
        Ok(())
    }
}

/// The spec and name from `--spec`/`--spec-file`: an AgentExecution, or a bare spec in either
/// shape (the CRD's camelCase spec or the NeMo job spec) for `namespace`. Either is checked
/// against the AgentExecution schema (types, unknown fields, bounds), each problem naming its
/// field; the CEL rules hold for the spec the flags complete, when it is created.
fn base_spec(
    args: &ExecuteArgs,
    namespace: &str,
) -> Result<(AgentExecutionSpec, Option<String>), Error> {
    let (text, source) = match (&args.spec, &args.spec_file) {
        (Some(json), _) => (json.clone(), "--spec".to_owned()),
        (None, Some(path)) => (read_text(path, "--spec-file")?, path.display().to_string()),
        (None, None) => return Ok((AgentExecutionSpec::default(), None)),
    };
    let value: serde_json::Value = serde_saphyr::from_str(&text).map_err(|e| {
        Error::new(
            ErrorCode::InvalidManifest,
            format!("{source}: not valid YAML or JSON: {e}"),
        )
    })?;
    if value.get("kind").is_some() {
        return match parse_document(value) {
            Ok(ManifestObject::Execution(execution)) => {
                Ok((execution.spec, execution.metadata.name))
            }
            Ok(_) => Err(Error::new(
                ErrorCode::InvalidManifest,
                format!("{source}: expected an AgentExecution"),
            )),
            Err(DocumentError::Invalid { kind, problems, .. }) if kind == "AgentExecution" => {
                Err(InvalidSpec { problems }.into())
            }
            Err(error) => Err(Error::new(
                ErrorCode::InvalidManifest,
                format!("{source}: {error}"),
            )),
        };
    }
    Ok((parse_spec(value, namespace)?, None))
}

/// A manifest file's text, refused when it is larger than the API server would take.
fn read_text(path: &Path, flag: &str) -> Result<String, Error> {
    read_manifest_file(path).map_err(|e| Error::manifest_file(flag, e))
}

/// Whether a flag value names a manifest file rather than an object.
fn is_manifest_file(value: &str) -> bool {
    let path = Path::new(value);
    path.is_file()
        && matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        )
}

/// The spec in the manifest file `value` names, picked by `pick`; `None` when `value` is not a
/// manifest file but an object name.
fn manifest_file_object<T>(
    value: &str,
    flag: &str,
    what: &str,
    pick: impl FnOnce(ManifestObject) -> Option<T>,
) -> Result<Option<T>, Error> {
    if !is_manifest_file(value) {
        return Ok(None);
    }
    let text = read_text(Path::new(value), flag)?;
    let mut objects = parse_manifests(&text, value)?;
    if objects.len() != 1 {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            format!(
                "{flag} {value}: expected exactly one object, found {}",
                objects.len()
            ),
        ));
    }
    pick(objects.remove(0))
        .map(Some)
        .ok_or_else(|| Error::argument(format!("{flag} {value}: the file does not hold {what}")))
}

/// The spec (and the name given, if any) from `--spec`/`--spec-file` with the flags applied.
/// A directory given as the base workdir is pushed to `backend` as a Fileset.
pub async fn spec_from_args(
    args: &ExecuteArgs,
    backend: &dyn Backend,
) -> Result<ExecutionRequest, Error> {
    let namespace = backend.namespace();
    let inputs = read_inputs(&args.inputs, piped_stdin)?;
    let (mut spec, name) = base_spec(args, namespace)?;
    let pushed = apply_flags(backend, args, namespace, &mut spec).await?;
    if let Err(error) = add_env(backend, &mut spec, &inputs.env).await {
        undo_push(backend, pushed.as_ref()).await;
        return Err(error);
    }
    Ok(ExecutionRequest {
        spec,
        name: args.name.clone().or(name),
        pushed,
        inputs,
    })
}

/// Applies the flags on top of the spec; returns the Fileset it pushed, if any.
async fn apply_flags(
    backend: &dyn Backend,
    args: &ExecuteArgs,
    namespace: &str,
    spec: &mut AgentExecutionSpec,
) -> Result<Option<PushedFileset>, Error> {
    let in_namespace = |reference: &str, flag: &str| {
        workspace_name(reference, flag, namespace).map_err(|p| InvalidSpec { problems: vec![p] })
    };
    let mut pushed = None;
    if let Some(agent) = &args.agent {
        let inline = manifest_file_object(agent, "--agent", "an Agent", |m| match m {
            ManifestObject::Agent(agent) => Some(agent.spec),
            _ => None,
        })?;
        spec.agent_ref = match inline {
            Some(_) => None,
            None => Some(Reference::named(in_namespace(agent, "--agent")?)),
        };
        spec.agent = inline;
    }
    if let Some(environment) = &args.environment {
        let inline = manifest_file_object(
            environment,
            "--environment",
            "an AgentEnvironment",
            |m| match m {
                ManifestObject::Environment(environment) => Some(environment.spec),
                _ => None,
            },
        )?;
        spec.environment_ref = match inline {
            Some(_) => None,
            None => Some(Reference::named(in_namespace(
                environment,
                "--environment",
            )?)),
        };
        spec.environment = inline;
    }
    if let Some(base) = &args.base_workdir {
        refuse_missing_directory(base)?;
        let base = if Path::new(base).is_dir() {
            let entry = backend.push_fileset(None, Path::new(base)).await?;
            let name = entry.name.clone();
            pushed = Some(entry);
            name
        } else {
            base.clone()
        };
        spec.workdir.get_or_insert_with(Workdir::default).base = Some(base);
    }
    if let Some(input) = &args.input {
        spec.input = input.clone();
    }
    if let Some(seconds) = args.timeout_seconds {
        spec.timeout_seconds = seconds;
    }
    if args.auto_telemetry {
        spec.auto_telemetry = true;
    }
    if let Some(notify) = args.notify.change().webhook()? {
        spec.notify = Some(notify);
    }
    Ok(pushed)
}

/// Refuses a `--workdir.base-workdir` that reads as a path (`/…`, `./…`, `../…`, `~…`) but
/// names no directory, which would otherwise be taken for a `namespace/fileset` reference.
fn refuse_missing_directory(base: &str) -> Result<(), Error> {
    let looks_like_path = ["/", "./", "../", "~"].iter().any(|p| base.starts_with(p))
        || base.split('#').next().unwrap_or(base).matches('/').count() > 1;
    let path = Path::new(base);
    if path.is_dir() || !(looks_like_path || path.exists()) {
        return Ok(());
    }
    let what = if path.exists() {
        "is not a directory"
    } else {
        "does not exist"
    };
    Err(Error::argument(format!(
        "--workdir.base-workdir {base}: the directory {what} (give a directory to push, or a Fileset as NAME[#PATH/])"
    )))
}
