//! `errand rerun NAME`: a new execution from the snapshot another one ran from, pinned to the image digest it ran (on a cluster).

use serde_json::json;

use super::execute::ExecuteArgs;
use crate::cli::output::Format;
use crate::cli::staging::StagingArgs;
use crate::cli::telemetry::TelemetryArgs;
use crate::ops::backend::Backend;
use crate::ops::lookup::find;
use crate::ops::{Error, ErrorCode};

/// Flags of `errand rerun`.
#[derive(Debug, clap::Args)]
pub struct RerunArgs {
    /// The execution to run again (or an unambiguous prefix). Its snapshot must still
    /// exist: a deleted or expired execution cannot be rerun.
    pub execution: String,
    /// Name of the new execution; generated from the agent's name when not given.
    #[arg(long)]
    pub name: Option<String>,
    /// Return at once, leaving the run going in the background.
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub staging: StagingArgs,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

impl RerunArgs {
    /// `errand execute` with the spec `{rerunOf: {name: execution}}`: the execution is
    /// created, checked, run and reported like any other, and both backends resolve `rerunOf`
    /// from the named execution's snapshot.
    fn into_execute(self, execution: &str) -> ExecuteArgs {
        ExecuteArgs {
            spec_args: super::execute::SpecArgs {
                spec: Some(json!({"rerunOf": {"name": execution}}).to_string()),
                ..Default::default()
            },
            name: self.name,
            no_wait: self.no_wait,
            until: None,
            forever: false,
            excerpt: super::observe::ExcerptArgs {
                max_bytes: crate::ops::excerpt::DEFAULT_MAX_BYTES,
                from_byte: None,
            },
            inherit_env: false,
            inputs: crate::cli::inputs::InputArgs {
                ignore_piped_stdin: true,
                ..Default::default()
            },
            notify: Default::default(),
            staging: self.staging,
            telemetry: self.telemetry,
        }
    }
}

impl RerunArgs {
    /// `errand rerun NAME` on either backend.
    pub async fn exec(self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let args = self;
        // A name that matches nothing goes on as it is, so that the refusal says the snapshot
        // went with the execution.
        let execution = match find(backend, &args.execution).await {
            Ok(record) => record.name,
            Err(error) if error.code == ErrorCode::NotFound => args.execution.clone(),
            Err(error) => return Err(error),
        };
        args.into_execute(&execution).exec(backend, format).await
    }
}
