//! What every local command needs: the data directory, the store and the namespace.

use std::path::Path;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::FilesetStatus;
use crate::local::{DataDir, ExecutionRecord, LocalCatalog, ObjectKind, RecordError, Records};
use crate::resolve::Catalog;
use crate::store::{Store, StoreError};

use super::output::CliError;

/// Options shared by the commands that touch executions or the catalog.
#[derive(Clone, Debug, clap::Args)]
pub struct Target {
    /// Namespace (workspace) to work in. It has no short form: `-n` is `tail`'s line count.
    #[arg(long, env = "ERRAND_NAMESPACE", global = true)]
    pub namespace: Option<String>,
    /// Object store URL for filesets and results (`file://`, `s3://`, `gs://`, `az://`).
    /// Locally it defaults to `store/` in the data directory (`$ERRAND_HOME`, else
    /// `$XDG_DATA_HOME/errand`, else `~/.local/share/errand`); against a cluster, results are
    /// read from the store the operator configured, which must be given.
    #[arg(long, env = "ERRAND_STORE", global = true)]
    pub store: Option<String>,
    /// Use the local backend (runs on this machine, no cluster). Without it, errand uses the
    /// cluster of the current kube context when one is configured, else the local backend;
    /// `ERRAND_BACKEND=local|cluster` decides explicitly.
    #[arg(long, global = true)]
    pub local: bool,
}

/// A Fileset a command pushed, with what the push added.
pub struct PushedFilesetEntry {
    /// The Fileset's name.
    pub name: String,
    /// Its new status.
    pub status: FilesetStatus,
    /// Whether the catalog had no Fileset of this name before.
    new_entry: bool,
    /// The blob's digest, when this push stored it.
    new_blob: Option<String>,
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
        let namespace = target
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        crate::resolve::object_name(&namespace)
            .map_err(|e| CliError::argument(format!("--namespace: {e}")))?;
        let data = DataDir::from_env();
        data.create().map_err(|e| {
            CliError::new(
                "io_error",
                format!(
                    "cannot create the data directory {}: {e}",
                    data.root().display()
                ),
            )
        })?;
        let store_url = target
            .store
            .clone()
            .unwrap_or_else(|| data.default_store_url());
        Ok(Self {
            data,
            store_url,
            namespace,
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

    /// Pushes `dir` as the content of Fileset `name` (by default `workdir-<digest prefix>`) and
    /// returns what the push added. A push whose catalog entry cannot be written removes the
    /// blob it stored.
    pub async fn push_fileset(
        &self,
        name: Option<&str>,
        dir: &Path,
    ) -> Result<PushedFilesetEntry, CliError> {
        let store = self.store()?;
        let pushed = store
            .push_fileset(&self.namespace, dir)
            .await
            .map_err(store_error)?;
        for skipped in &pushed.skipped {
            eprintln!(
                "warning: {} left out of the Fileset: {}: {}",
                dir.display(),
                skipped.path,
                skipped.reason
            );
        }
        let name = name.map_or_else(
            || format!("workdir-{}", &pushed.digest[..12]),
            str::to_owned,
        );
        let status = FilesetStatus {
            digest: Some(format!("sha256:{}", pushed.digest)),
            size: Some(pushed.size),
            file_count: Some(pushed.file_count),
            pushed_at: Some(Time(jiff::Timestamp::now())),
        };
        let catalog = self.catalog();
        let entry = PushedFilesetEntry {
            new_entry: catalog.fileset(&self.namespace, &name).is_none(),
            new_blob: pushed.created.then_some(pushed.digest),
            name,
            status,
        };
        if let Err(e) = catalog.set_fileset(&self.namespace, &entry.name, &entry.status) {
            self.undo_push(&entry).await;
            return Err(CliError::new("io_error", e));
        }
        Ok(entry)
    }

    /// Takes back what a push of this command added (its catalog entry, its blob), for a command
    /// that fails after pushing; what was there before stays.
    pub async fn undo_push(&self, pushed: &PushedFilesetEntry) {
        if pushed.new_entry {
            self.catalog()
                .delete(&self.namespace, ObjectKind::Fileset, &pushed.name);
        }
        if let (Some(digest), Ok(store)) = (&pushed.new_blob, self.store()) {
            let _ = store.remove_pushed_fileset(&self.namespace, digest).await;
        }
    }

    /// The record of the execution named `name` (or the only one starting with it), as it stands
    /// (a run whose supervisor is gone has failed).
    pub fn find(&self, name: &str) -> Result<ExecutionRecord, CliError> {
        let records = self.records();
        let name = records
            .resolve_name(&self.namespace, name)
            .map_err(record_error)?;
        records
            .read_current(&self.namespace, &name)
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
        RecordError::AlreadyExists(..) => "already_exists",
        RecordError::Io { .. } => "io_error",
    };
    CliError::new(code, error.to_string())
}

impl Target {
    /// Whether commands run against the local backend rather than a cluster.
    pub fn is_local(&self) -> bool {
        if self.local {
            return true;
        }
        match std::env::var("ERRAND_BACKEND").as_deref() {
            Ok("local") => return true,
            Ok("cluster") => return false,
            _ => {}
        }
        let kubeconfig = std::env::var_os("KUBECONFIG").is_some()
            || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
            || std::env::var_os("HOME")
                .is_some_and(|home| std::path::Path::new(&home).join(".kube/config").exists());
        !kubeconfig
    }
}
