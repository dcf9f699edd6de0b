//! What every local command needs: the data directory, the store and the namespace.

use crate::local::{DataDir, LocalCatalog, RecordError, Records};
use crate::store::{Store, StoreError};

use super::output::CliError;

/// Options shared by the commands that touch executions or the catalog.
#[derive(Clone, Debug, clap::Args)]
pub struct Target {
    /// Namespace (workspace) to work in. It has no short form: `-n` is `tail`'s line count.
    #[arg(
        long,
        env = "ERRAND_NAMESPACE",
        default_value = "default",
        global = true
    )]
    pub namespace: String,
    /// Object store URL for filesets and results (`file://`, `s3://`, `gs://`, `az://`);
    /// defaults to `file://$XDG_DATA_HOME/errand/store`.
    #[arg(long, env = "ERRAND_STORE", global = true)]
    pub store: Option<String>,
    /// Use the local backend (runs on this machine, no cluster).
    #[arg(long, global = true)]
    pub local: bool,
}

/// The local backend as the commands see it.
pub struct Local {
    /// The data directory.
    pub data: DataDir,
    /// The store URL.
    pub store_url: String,
    /// The namespace.
    pub namespace: String,
}

impl Local {
    /// The local backend chosen by `target` and the environment.
    pub fn new(target: &Target) -> Result<Self, CliError> {
        crate::resolve::object_name(&target.namespace)
            .map_err(|e| CliError::argument(format!("--namespace: {e}")))?;
        let data = DataDir::from_env();
        let store_url = target
            .store
            .clone()
            .unwrap_or_else(|| data.default_store_url());
        Ok(Self {
            data,
            store_url,
            namespace: target.namespace.clone(),
        })
    }

    /// The execution records.
    pub fn records(&self) -> Records {
        Records::new(self.data.clone())
    }

    /// The catalog of applied objects.
    pub fn catalog(&self) -> LocalCatalog {
        LocalCatalog::new(self.data.clone())
    }

    /// The store.
    pub fn store(&self) -> Result<Store, CliError> {
        Store::open(&self.store_url).map_err(store_error)
    }

    /// The full name of the execution `name` (or the only one starting with it).
    pub fn resolve_name(&self, name: &str) -> Result<String, CliError> {
        self.records()
            .resolve_name(&self.namespace, name)
            .map_err(record_error)
    }
}

/// A store failure as a CLI error.
pub fn store_error(error: StoreError) -> CliError {
    CliError::new("store_error", error.to_string())
}

/// A record failure as a CLI error.
pub fn record_error(error: RecordError) -> CliError {
    let code = match error {
        RecordError::NotFound(..) => "not_found",
        RecordError::Ambiguous { .. } => "ambiguous_name",
        RecordError::Io { .. } => "io_error",
    };
    CliError::new(code, error.to_string())
}
