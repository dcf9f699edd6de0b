//! Every command that acts on executions or the catalog, written once against [`Backend`]: what it asks the backend, what it prints.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::answers::{
    Deleted, DeletedObject, Downloaded, ExecutionView, Logs, PushedFilesetAnswer,
};
use super::execute::{ExecuteArgs, spec_from_args};
use super::observe::{DEFAULT_POLL_SECONDS, answer_observed, observe, with_excerpts, with_sizes};
use super::output::{Format, OutputArgs, human_size, print_ok};
use super::show::{parse_result_name, print_record, print_results, record_outcome};
use crate::local::{ObjectKind, manifest_documents, read_manifest_file};
use crate::ops::backend::{Backend, Document, LogStream, find};
use crate::ops::{Error, ErrorCode};

/// What to do with Agents, AgentEnvironments or AgentRuntimes.
#[derive(Debug, clap::Subcommand)]
pub enum CatalogAction {
    /// List them (the default).
    List,
    /// Create an Agent from a bare agent config (as `nemo agents create` takes it); it names
    /// no runtime, so it runs with the AgentRuntime of its config's harness kind.
    Create {
        /// The Agent's name.
        #[arg(long)]
        name: String,
        /// The agent config file (`config_format`, `name`, `default_harness`, `harnesses`,
        /// `models`, ...), YAML or JSON.
        #[arg(long, value_name = "FILE")]
        agent_config: PathBuf,
    },
    /// Delete one by name.
    Delete {
        /// Its name.
        name: String,
    },
}

/// `errand execute`: creates the execution, then runs or follows it to its end and prints its
/// record with the response and excerpts of its output; `--until` observes it for a bounded
/// time instead, `--no-wait` not at all.
pub async fn execute(backend: &dyn Backend, args: &ExecuteArgs) -> Result<(), Error> {
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
        let (record, observation) = observe(backend, record, until, DEFAULT_POLL_SECONDS).await?;
        return answer_observed(backend, record, observation, &args.excerpt, args.output).await;
    }
    // In JSON mode stdout carries exactly one object, so the agent's output is not passed through.
    let record = backend
        .run(&record, &options, format == Format::Human)
        .await?;
    let view = with_excerpts(backend, record, &args.excerpt).await?;
    record_outcome(format, &view, || print_record(&view.record))
}

/// `errand status NAME`: the record, with the sizes of the agent's output streams (read from
/// their sizes alone, never from the logs).
pub async fn status(backend: &dyn Backend, name: &str, output: OutputArgs) -> Result<(), Error> {
    let record = find(backend, name).await?;
    let view = with_sizes(backend, record).await?;
    print_ok(output.format, "execution", &view, || {
        print_record(&view.record)
    });
    Ok(())
}

/// `errand watch NAME`: follows the agent's output until the execution ends, then prints it with
/// excerpts of its output.
pub async fn watch(
    backend: &dyn Backend,
    name: &str,
    excerpt: &super::observe::ExcerptArgs,
    output: OutputArgs,
) -> Result<(), Error> {
    let record = find(backend, name).await?;
    let done = backend
        .watch(&record, output.format == Format::Human)
        .await?;
    let view = with_excerpts(backend, done, excerpt).await?;
    record_outcome(output.format, &view, || print_record(&view.record))
}

/// `errand tail -n N NAME`: the last lines of the agent's output.
pub async fn tail(
    backend: &dyn Backend,
    name: &str,
    lines: usize,
    stderr: bool,
    output: OutputArgs,
) -> Result<(), Error> {
    let record = find(backend, name).await?;
    let stream = if stderr {
        LogStream::Stderr
    } else {
        LogStream::Stdout
    };
    let (stream, last) = backend.logs(&record, stream, lines).await?;
    let answer = Logs {
        execution: record.name,
        stream,
        lines: last,
    };
    print_ok(output.format, "logs", &answer, || answer.lines.join("\n"));
    Ok(())
}

/// `errand results list NAME`.
pub async fn results_list(
    backend: &dyn Backend,
    name: &str,
    output: OutputArgs,
) -> Result<(), Error> {
    let record = find(backend, name).await?;
    print_results(output.format, &backend.results(&record).await?);
    Ok(())
}

/// `errand results download RESULT --execution NAME -o FILE`: streams one result into a file
/// (by default the result's name in the current directory).
pub async fn results_download(
    backend: &dyn Backend,
    result: &str,
    name: &str,
    file: Option<PathBuf>,
    format: Format,
) -> Result<(), Error> {
    let result = parse_result_name(result)?;
    let record = find(backend, name).await?;
    let file = file.unwrap_or_else(|| PathBuf::from(result.file_name()));
    let shown = result.as_str().to_owned();
    let size = backend.download(&record, result, &file).await?;
    let answer = Downloaded {
        execution: record.name,
        result: shown,
        file,
        size,
    };
    print_ok(format, "download", &answer, || {
        format!("wrote {} ({})", answer.file.display(), human_size(size))
    });
    Ok(())
}

/// `errand cancel NAME`: stops it and waits until its partial results are saved.
pub async fn cancel(backend: &dyn Backend, name: &str, output: OutputArgs) -> Result<(), Error> {
    let record = find(backend, name).await?;
    if record.phase.is_terminal() {
        return Err(Error::new(
            ErrorCode::AlreadyFinished,
            format!(
                "execution {} already ended {:?}; there is nothing to cancel",
                record.name, record.phase
            ),
        ));
    }
    let record = backend.cancel(&record).await?;
    let view = with_sizes(backend, record).await?;
    print_ok(output.format, "execution", &view, || {
        print_record(&view.record)
    });
    Ok(())
}

/// `errand delete NAME`: stops it if it runs, then removes it with its results.
pub async fn delete(backend: &dyn Backend, name: &str, output: OutputArgs) -> Result<(), Error> {
    let record = find(backend, name).await?;
    let removed = backend.delete(&record).await?;
    let name = record.name;
    let answer = Deleted {
        execution: name.clone(),
        results_removed: removed,
    };
    print_ok(output.format, "deleted", &answer, || match removed {
        Some(removed) => format!("deleted execution {name} and {removed} stored results"),
        None => format!("deleted execution {name} and its results"),
    });
    Ok(())
}

/// `errand apply -f FILE...`: every document of every file, all or nothing.
pub async fn apply(
    backend: &dyn Backend,
    files: &[PathBuf],
    output: OutputArgs,
) -> Result<(), Error> {
    let mut documents = Vec::new();
    for file in files {
        let text = read_manifest_file(file).map_err(|e| Error::manifest_file("-f", e))?;
        let source = file.display().to_string();
        let objects = manifest_documents(&text, &source)?;
        documents.extend(
            objects
                .into_iter()
                .enumerate()
                .map(|(index, object)| Document {
                    source: format!("{source}: document {}", index + 1),
                    object,
                }),
        );
    }
    let applied = backend.apply(&documents).await?;
    print_ok(output.format, "applied", &applied, || {
        applied
            .iter()
            .map(|a| format!("{}/{} applied", a.kind.to_lowercase(), a.name))
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

/// `errand agents` / `errand environments` / `errand runtimes`: list, create (Agents), or
/// delete one.
pub async fn objects(
    backend: &dyn Backend,
    kind: ObjectKind,
    action: Option<&CatalogAction>,
    output: OutputArgs,
) -> Result<(), Error> {
    match action.unwrap_or(&CatalogAction::List) {
        CatalogAction::List => {
            let objects = backend.objects(kind).await?;
            print_ok(output.format, kind.plural(), &objects, || {
                objects
                    .iter()
                    .filter_map(|o| o["metadata"]["name"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        CatalogAction::Create { name, agent_config } if kind == ObjectKind::Agent => {
            let document = agent_from_config(name, agent_config)?;
            let applied = backend.apply(&[document]).await?;
            print_ok(output.format, "created", &applied.first(), || {
                format!("agent/{name} created")
            });
        }
        CatalogAction::Create { .. } => {
            return Err(Error::argument(format!(
                "create makes Agents only; apply {} manifests with `errand apply -f`",
                kind.plural()
            )));
        }
        CatalogAction::Delete { name } => delete_object(backend, kind, name, output).await?,
    }
    Ok(())
}

/// The Agent `name` wrapping the bare agent config in `file`, to apply as `apply` applies one.
pub(super) fn agent_from_config(name: &str, file: &Path) -> Result<Document, Error> {
    let text = read_manifest_file(file).map_err(|e| Error::manifest_file("--agent-config", e))?;
    let source = format!("--agent-config {}", file.display());
    let config: serde_json::Value = serde_saphyr::from_str(&text).map_err(|e| {
        Error::new(
            ErrorCode::InvalidManifest,
            format!("{source}: not valid YAML or JSON: {e}"),
        )
    })?;
    if config.get("kind").is_some() || config.get("apiVersion").is_some() {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            format!(
                "{source}: --agent-config takes a bare agent config (config_format, name, ...), not a manifest; apply manifests with `errand apply -f`"
            ),
        ));
    }
    Ok(Document {
        source,
        object: json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name}, "spec": {"config": config},
        }),
    })
}

/// Deletes one Agent, AgentEnvironment, AgentRuntime or Fileset.
pub async fn delete_object(
    backend: &dyn Backend,
    kind: ObjectKind,
    name: &str,
    output: OutputArgs,
) -> Result<(), Error> {
    backend.delete_object(kind, name).await?;
    let answer = DeletedObject {
        kind: kind.kind(),
        name: name.to_owned(),
    };
    print_ok(output.format, "deleted", &answer, || {
        format!("{} {name} deleted", kind.kind())
    });
    Ok(())
}

/// `errand filesets push NAME DIR`.
pub async fn push(
    backend: &dyn Backend,
    name: &str,
    dir: &Path,
    output: OutputArgs,
) -> Result<(), Error> {
    crate::resolve::object_name(name).map_err(|e| Error::argument(format!("fileset name: {e}")))?;
    if !dir.is_dir() {
        return Err(Error::argument(format!(
            "{}: not a directory",
            dir.display()
        )));
    }
    let status = backend.push_fileset(Some(name), dir).await?.status;
    let answer = PushedFilesetAnswer {
        name: name.to_owned(),
        status,
    };
    let status = &answer.status;
    print_ok(output.format, "fileset", &answer, || {
        format!(
            "fileset {name} pushed: {} files, {}, {}",
            status.file_count.unwrap_or(0),
            human_size(status.size.unwrap_or(0)),
            status.digest.as_deref().unwrap_or_default()
        )
    });
    Ok(())
}

/// `errand filesets list`.
pub async fn list_filesets(backend: &dyn Backend, output: OutputArgs) -> Result<(), Error> {
    let filesets = backend.filesets().await?;
    print_ok(output.format, "filesets", &filesets, || {
        let mut out = format!("{:<32} {:>7} {:>10}  DIGEST", "NAME", "FILES", "SIZE");
        for f in &filesets {
            let status = f.status.clone().unwrap_or_default();
            out.push_str(&format!(
                "\n{:<32} {:>7} {:>10}  {}",
                f.metadata.name.as_deref().unwrap_or_default(),
                status.file_count.unwrap_or(0),
                human_size(status.size.unwrap_or(0)),
                status.digest.as_deref().unwrap_or("(not pushed)")
            ));
        }
        out
    });
    Ok(())
}
