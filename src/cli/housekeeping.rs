//! Housekeeping commands: `delete --all` of finished executions (with `--dry-run`) and shell completion scripts.

use clap::CommandFactory;

use super::answers::{DeletedAll, DeletedExecution};
use super::output::{OutputArgs, print_ok};
use crate::ops::Error;
use crate::ops::backend::Backend;

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

/// `errand delete --all`: removes (or with `--dry-run` lists) every finished execution with its
/// results; executions that have not ended are kept and named.
pub async fn delete_all(
    backend: &dyn Backend,
    args: &DeleteAllArgs,
    output: OutputArgs,
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
    print_ok(output.format, "deleted_all", &answer, || {
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

/// `errand completions SHELL`: the completion script of the whole command line.
pub fn print_completions(shell: clap_complete::Shell) {
    let mut command = super::Cli::command();
    clap_complete::generate(shell, &mut command, "errand", &mut std::io::stdout());
}
