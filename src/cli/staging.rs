//! The flags that bound staging, shared by `execute`, the local supervisor, `errand stage` in pods and the controller that starts them.

use std::time::Duration;

use crate::archive::ExtractLimits;
use crate::runner::{DEFAULT_STAGING_BUDGET, StageSettings};

/// What extraction may write.
#[derive(Debug, Clone, clap::Args)]
pub struct ExtractArgs {
    /// Bytes of file content staging may extract, all Filesets together (sparse files count at
    /// their logical size).
    #[arg(long, env = "ERRAND_MAX_EXTRACT_BYTES", default_value_t = ExtractLimits::DEFAULT.max_bytes,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_extract_bytes: u64,
    /// Files, directories and links staging may create, all Filesets together.
    #[arg(long, env = "ERRAND_MAX_EXTRACT_ENTRIES", default_value_t = ExtractLimits::DEFAULT.max_entries,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_extract_entries: u64,
}

impl ExtractArgs {
    /// The limits the flags set.
    pub fn limits(&self) -> ExtractLimits {
        ExtractLimits {
            max_bytes: self.max_extract_bytes,
            max_entries: self.max_extract_entries,
        }
    }
}

/// The bounds of one staging.
#[derive(Debug, Clone, clap::Args)]
pub struct StagingArgs {
    #[command(flatten)]
    pub extract: ExtractArgs,
    /// Seconds staging (download, extraction, the upload of `input_workdir`) may take before
    /// the run fails with StageFailed; the agent's own timeout starts after it.
    #[arg(long, env = "ERRAND_STAGING_BUDGET_SECONDS", default_value_t = DEFAULT_STAGING_BUDGET.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub staging_budget_seconds: u64,
}

impl StagingArgs {
    /// The settings the flags set.
    pub fn settings(&self) -> StageSettings {
        StageSettings {
            limits: self.extract.limits(),
            budget: Duration::from_secs(self.staging_budget_seconds),
        }
    }
}
