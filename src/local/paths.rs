//! Where the local backend keeps its files.

use std::path::{Path, PathBuf};

/// The local data directory: `$ERRAND_HOME`, else `$XDG_DATA_HOME/errand`, else `~/.local/share/errand`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// The data directory at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The data directory chosen by the environment.
    pub fn from_env() -> Self {
        if let Some(home) = std::env::var_os("ERRAND_HOME") {
            return Self::new(home);
        }
        let data = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        Self::new(data.join("errand"))
    }

    /// Creates the directory, readable by its owner only, when it does not exist yet (one that
    /// exists is left as it is).
    pub fn create(&self) -> std::io::Result<()> {
        super::files::create_private_dir_all(&self.root)
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The default store: `file://<root>/store`.
    pub fn default_store_url(&self) -> String {
        format!("file://{}", self.root.join("store").display())
    }

    /// The namespaces' applied objects.
    pub fn all_catalogs(&self) -> PathBuf {
        self.root.join("catalog")
    }

    /// Applied objects of `kind` in `namespace`.
    pub fn catalog(&self, namespace: &str, kind: &str) -> PathBuf {
        self.all_catalogs().join(namespace).join(kind)
    }

    /// The namespaces' execution directories.
    pub fn all_executions(&self) -> PathBuf {
        self.root.join("executions")
    }

    /// All execution directories of `namespace`.
    pub fn executions(&self, namespace: &str) -> PathBuf {
        self.all_executions().join(namespace)
    }

    /// The automatic gc's limits, when they are set (`errand gc --automatic`).
    pub fn automatic_gc(&self) -> PathBuf {
        self.root.join("gc.json")
    }

    /// The directory of one execution: record, snapshot, workspace and scratch files.
    pub fn execution(&self, namespace: &str, name: &str) -> PathBuf {
        self.executions(namespace).join(name)
    }
}
