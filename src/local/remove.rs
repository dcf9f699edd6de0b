//! Removing a local execution for good: its results from the store, then its directory (record, snapshot, workspace, logs).

use super::record::{ExecutionRecord, RecordError, Records};
use crate::store::keys::{self, ExecutionId};
use crate::store::{Store, StoreError};

/// Why an execution could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// Its results could not be deleted from the store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Its directory could not be removed.
    #[error(transparent)]
    Record(#[from] RecordError),
}

/// Where the results of `record` are kept.
pub fn results_of(record: &ExecutionRecord) -> Result<(Store, ExecutionId), StoreError> {
    let store = Store::open(&record.store)?;
    let execution = ExecutionId {
        namespace: record.namespace.clone(),
        name: record.name.clone(),
        uid: record.uid.clone(),
    };
    Ok((store, execution))
}

/// Deletes `record`'s results, then its directory; returns how many result objects were
/// deleted. The results go first, so a failure leaves the record that still finds them.
pub async fn remove_execution(
    records: &Records,
    record: &ExecutionRecord,
) -> Result<usize, RemoveError> {
    let (store, execution) = results_of(record)?;
    let prefix = keys::results_prefix(&execution).map_err(StoreError::from)?;
    let removed = store.delete_prefix(&prefix).await?;
    records.remove(&record.namespace, &record.name)?;
    Ok(removed)
}
