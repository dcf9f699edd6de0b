//! What creating an execution takes, apart from the flags that ask for it: the request (spec, name, pushed workdir, inputs), the options a backend creates and runs it with, and the inputs as a record shows them.

use std::collections::{BTreeMap, BTreeSet};

use super::notify::NotifyChange;
use crate::api::{AgentExecutionSpec, FilesetStatus};
use crate::runner::StageSettings;
use crate::telemetry::TelemetryTarget;

/// What a masked variable's value reads as.
pub const MASKED_VALUE: &str = "***";

/// How a backend creates and runs an execution, beyond its spec: what `execute`'s flags ask
/// of the run itself.
#[derive(Clone, Debug, Default)]
pub struct CreateOptions {
    /// Whether the agent inherits this process's environment (local runs).
    pub inherit_env: bool,
    /// Where auto telemetry goes (local runs).
    pub otlp_endpoint: Option<TelemetryTarget>,
    /// Where the run's notifications go (local runs).
    pub notify: NotifyChange,
    /// The bounds of staging.
    pub staging: StageSettings,
    /// Whether the automatic gc says on stderr what it removed (human output only).
    pub report_gc: bool,
}

/// What the input flags add to a new execution.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunInputs {
    /// The bytes for the agent's standard input, when given.
    pub stdin: Option<Vec<u8>>,
    /// The variables `--env` and `--env-file` set.
    pub env: BTreeMap<String, String>,
    /// The variables never shown.
    pub masked: BTreeSet<String>,
    /// The tags, checked and sorted.
    pub tags: Vec<String>,
}

impl RunInputs {
    /// The variables as errand shows them: masked values read [`MASKED_VALUE`].
    pub fn shown_env(&self) -> BTreeMap<String, String> {
        shown_env(&self.env, &self.masked)
    }
}

/// `env` as errand shows it: the value of every name in `masked` reads [`MASKED_VALUE`].
pub fn shown_env(
    env: &BTreeMap<String, String>,
    masked: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    env.iter()
        .map(|(k, v)| {
            let shown = if masked.contains(k) { MASKED_VALUE } else { v };
            (k.clone(), shown.to_owned())
        })
        .collect()
}

/// The spec from `--spec`/`--spec-file` with the flags applied: the execution's name (`--name`,
/// else the one the spec gives, if any) and the Fileset pushed for a base workdir directory.
pub struct ExecutionRequest {
    /// The complete spec.
    pub spec: AgentExecutionSpec,
    /// The execution's name, when the command line or the spec gives one.
    pub name: Option<String>,
    /// The Fileset this command pushed for `--workdir.base-workdir DIR`.
    pub pushed: Option<PushedFileset>,
    /// Standard input, variables and tags from the input flags.
    pub inputs: RunInputs,
}

/// A Fileset a command pushed, and how to take the push back.
#[derive(Clone, Debug)]
pub struct PushedFileset {
    /// The Fileset's name.
    pub name: String,
    /// Its new content.
    pub status: FilesetStatus,
    /// Whether the Fileset did not exist before this push.
    pub new_fileset: bool,
    /// The blob's digest (hex), when this push stored it.
    pub new_blob: Option<String>,
}
