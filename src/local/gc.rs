//! `errand gc` on the local backend: measures every execution, lets [`crate::retention::gc`] pick the finished ones to collect, and removes them (or only reports them); the automatic gc's limits, saved once in the data directory.

use std::path::Path;

use jiff::Timestamp;
use serde::Serialize;

use super::paths::DataDir;
use super::record::{ExecutionRecord, RecordError, Records};
use super::remove::{RemoveError, remove_execution, results_of};
use crate::api::Phase;
use crate::retention::gc::{GcPolicy, GcReason, StoredExecution, select};
use crate::store::StoreError;
use crate::store::keys;

/// Why a gc could not run.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// An execution could not be read or removed.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Results could not be measured or deleted.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The automatic gc's limits could not be read or written.
    #[error("automatic gc settings {path}: {message}")]
    Settings {
        /// The settings file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
}

impl From<RemoveError> for GcError {
    fn from(error: RemoveError) -> Self {
        match error {
            RemoveError::Store(e) => GcError::Store(e),
            RemoveError::Record(e) => GcError::Record(e),
        }
    }
}

/// One execution a gc removed (or would remove).
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Collected {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// How it ended.
    pub phase: Phase,
    /// When it ended.
    pub finished_at: Timestamp,
    /// Bytes it took: its directory and its results.
    pub bytes: u64,
    /// The limit it broke.
    pub reason: GcReason,
}

/// What a gc did.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct GcReport {
    /// Whether it only reported (nothing was removed).
    pub dry_run: bool,
    /// The limits it applied.
    pub policy: GcPolicy,
    /// The executions removed (or that would be), oldest finished first.
    pub removed: Vec<Collected>,
    /// Bytes those took.
    pub removed_bytes: u64,
    /// Executions kept.
    pub kept: usize,
    /// Bytes the kept executions take.
    pub kept_bytes: u64,
}

/// Collects the finished executions of `namespace` (all namespaces when `None`) that break
/// `policy` at `now`; with `dry_run`, only reports them.
pub async fn collect(
    data: &DataDir,
    namespace: Option<&str>,
    policy: &GcPolicy,
    dry_run: bool,
    now: Timestamp,
) -> Result<GcReport, GcError> {
    let records = Records::new(data.clone());
    let namespaces = match namespace {
        Some(namespace) => vec![namespace.to_owned()],
        None => records.namespaces(),
    };
    let mut all: Vec<ExecutionRecord> = Vec::new();
    for namespace in &namespaces {
        for name in records.names(namespace) {
            all.push(records.read(namespace, &name)?);
        }
    }
    let mut measured = Vec::with_capacity(all.len());
    for record in &all {
        let finished_at = record.phase.is_terminal().then(|| finished_at(record));
        let bytes = disk_bytes(&records.dir(&record.namespace, &record.name))
            + results_bytes(record).await?;
        measured.push(StoredExecution { finished_at, bytes });
    }
    let chosen = select(&measured, policy, now);
    let mut removed = Vec::with_capacity(chosen.len());
    for &(index, reason) in &chosen {
        let record = &all[index];
        if !dry_run {
            remove_execution(&records, record).await?;
        }
        removed.push(Collected {
            namespace: record.namespace.clone(),
            name: record.name.clone(),
            phase: record.phase,
            finished_at: measured[index].finished_at.unwrap_or(now),
            bytes: measured[index].bytes,
            reason,
        });
    }
    let total: u64 = measured.iter().map(|e| e.bytes).sum();
    let removed_bytes = removed.iter().map(|c| c.bytes).sum();
    Ok(GcReport {
        dry_run,
        policy: policy.clone(),
        kept: all.len() - removed.len(),
        kept_bytes: total - removed_bytes,
        removed,
        removed_bytes,
    })
}

/// When a finished execution ended (its creation, if it never recorded an end).
fn finished_at(record: &ExecutionRecord) -> Timestamp {
    record.completed_at.unwrap_or(record.created_at)
}

/// Bytes of the results `record` has in its store.
async fn results_bytes(record: &ExecutionRecord) -> Result<u64, StoreError> {
    let (store, execution) = results_of(record)?;
    let listed = store.list(&keys::results_prefix(&execution)?).await?;
    Ok(listed.iter().map(|o| o.size).sum())
}

/// Bytes of the files under `dir`, links not followed; what cannot be read counts as nothing.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let meta = entry.path().symlink_metadata().ok()?;
            Some(if meta.is_dir() {
                disk_bytes(&entry.path())
            } else {
                meta.len()
            })
        })
        .sum()
}

/// The automatic gc's limits, when they are set.
pub fn automatic_policy(data: &DataDir) -> Result<Option<GcPolicy>, GcError> {
    let path = data.automatic_gc();
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(GcError::Settings {
                path,
                message: e.to_string(),
            });
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| GcError::Settings {
            path,
            message: e.to_string(),
        })
}

/// Saves `policy` as the automatic gc's limits (`None` turns the automatic gc off).
pub fn set_automatic_policy(data: &DataDir, policy: Option<&GcPolicy>) -> Result<(), GcError> {
    let path = data.automatic_gc();
    let result = match policy {
        Some(policy) => {
            let bytes = serde_json::to_vec_pretty(policy).expect("a policy always serializes");
            super::files::write_private(&path, &bytes)
        }
        None => match std::fs::remove_file(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        },
    };
    result.map_err(|e| GcError::Settings {
        path,
        message: e.to_string(),
    })
}
