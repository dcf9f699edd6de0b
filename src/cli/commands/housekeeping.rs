//! Housekeeping commands: `delete` of one execution or `--all` finished ones (with `--dry-run`), shell completion scripts and `crds`.

use clap::CommandFactory;

use std::path::{Path, PathBuf};

use crate::cli::answers::{Deleted, DeletedAll, DeletedExecution};
use crate::cli::output::{Format, print_ok, write_stdout};
use crate::ops::backend::Backend;
use crate::ops::lookup::find;
use crate::ops::{Error, ErrorCode};

/// Flags of `errand delete`.
#[derive(Debug, clap::Args)]
pub struct DeleteArgs {
    /// Execution name or unambiguous prefix.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub name: Option<String>,
    #[command(flatten)]
    pub all: DeleteAllArgs,
}

impl DeleteArgs {
    /// `errand delete NAME` or `errand delete --all`.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        match &self.name {
            Some(name) => delete(backend, name, format).await,
            None => delete_all(backend, &self.all, format).await,
        }
    }
}

/// `delete --all [--dry-run]`.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct DeleteAllArgs {
    /// Delete every finished execution (Succeeded, Failed, Cancelled) of the namespace; running
    /// ones are kept.
    #[arg(long)]
    pub all: bool,
    /// With `--all`: report what would be deleted, delete nothing.
    #[arg(long, conflicts_with = "name")]
    pub dry_run: bool,
}

/// `errand delete NAME`: stops it if it runs, then removes it with its results.
async fn delete(backend: &dyn Backend, name: &str, format: Format) -> Result<(), Error> {
    let record = find(backend, name).await?;
    let removed = backend.delete(&record).await?;
    let name = record.name;
    let answer = Deleted {
        execution: name.clone(),
        results_removed: removed,
    };
    print_ok(format, "deleted", &answer, || match removed {
        Some(removed) => format!("deleted execution {name} and {removed} stored results"),
        None => format!("deleted execution {name} and its results"),
    });
    Ok(())
}

/// `errand delete --all`: removes (or with `--dry-run` lists) every finished execution with its
/// results; executions that have not ended are kept and named.
async fn delete_all(
    backend: &dyn Backend,
    args: &DeleteAllArgs,
    format: Format,
) -> Result<(), Error> {
    let (finished, running): (Vec<_>, Vec<_>) = backend
        .executions()
        .await?
        .into_iter()
        .partition(|r| r.phase.is_terminal());
    let mut executions = Vec::with_capacity(finished.len());
    for record in finished {
        let results_removed = if args.dry_run {
            None
        } else {
            backend.delete(&record).await?
        };
        executions.push(DeletedExecution {
            execution: record.name,
            phase: record.phase,
            results_removed,
        });
    }
    let answer = DeletedAll {
        dry_run: args.dry_run,
        executions,
        kept_running: running.into_iter().map(|r| r.name).collect(),
    };
    print_ok(format, "deleted_all", &answer, || {
        let verb = if answer.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        let mut lines: Vec<String> = answer
            .executions
            .iter()
            .map(|e| format!("{verb} execution {} ({:?})", e.execution, e.phase))
            .collect();
        if lines.is_empty() {
            lines.push(format!(
                "no finished executions in namespace {}",
                backend.namespace()
            ));
        }
        if !answer.kept_running.is_empty() {
            lines.push(format!(
                "kept (not finished): {}",
                answer.kept_running.join(", ")
            ));
        }
        lines.join("\n")
    });
    Ok(())
}

/// `errand completions SHELL`: the completion script of the whole command line, written as
/// every answer is (a closed stdout ends the command quietly).
pub fn print_completions(shell: clap_complete::Shell) {
    let mut command = crate::cli::Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "errand", &mut script);
    write_stdout(&String::from_utf8_lossy(&script));
}

/// Flags of `errand crds`.
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Write `<plural>.errand.dev.yaml` files into this directory (created when missing)
    /// instead of printing.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

impl CrdsArgs {
    /// `errand crds [--out-dir DIR]`: every CustomResourceDefinition as YAML.
    pub fn exec(&self) -> Result<(), Error> {
        print_crds(self.out_dir.as_deref())
    }
}

fn print_crds(out_dir: Option<&Path>) -> Result<(), Error> {
    let render_error = |e: serde_saphyr::ser::Error| {
        Error::new(ErrorCode::Internal, format!("cannot render the CRDs: {e}"))
    };
    let Some(dir) = out_dir else {
        crate::cli::output::write_stdout(&crate::api::crds::all_yaml().map_err(render_error)?);
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::new(
            ErrorCode::IoError,
            format!(
                "cannot create the output directory {}: {e}; pass --out-dir a directory you can write",
                dir.display()
            ),
        )
    })?;
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
