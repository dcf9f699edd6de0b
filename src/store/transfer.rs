//! Where a run's input blobs come from and where its results go: the store itself, or (in pods) the execution's signed URLs.

use std::future::Future;

use super::keys::{self, ExecutionId, ResultName};
use super::{BlobBody, Store, StoreError, StoredObject};
use crate::archive::ByteStream;

/// Where input blobs come from: the store directly, or (in pods) signed URLs.
pub trait BlobSource: Sync {
    /// The bytes of the blob at `key`.
    fn open(&self, key: &str) -> impl Future<Output = Result<BlobBody, StoreError>> + Send;
}

/// Where results go: the store directly, or (in pods) signed URLs. Each result is written once.
pub trait ResultSink: Sync {
    /// Saves `body` as result `name` and returns its size and sha256.
    fn put(
        &self,
        name: ResultName,
        body: ByteStream,
    ) -> impl Future<Output = Result<StoredObject, StoreError>> + Send;
}

impl BlobSource for Store {
    async fn open(&self, key: &str) -> Result<BlobBody, StoreError> {
        self.get(key).await
    }
}

/// Results of one execution, saved under its `results/<ns>/<execution>/<uid>/` prefix.
#[derive(Debug, Clone)]
pub struct StoreResults {
    store: Store,
    execution: ExecutionId,
}

impl StoreResults {
    /// The results of `execution` in `store`; fails if the execution's ids cannot form a key.
    pub fn new(store: Store, execution: ExecutionId) -> Result<StoreResults, StoreError> {
        keys::results_prefix(&execution)?;
        Ok(StoreResults { store, execution })
    }
}

impl ResultSink for StoreResults {
    async fn put(&self, name: ResultName, body: ByteStream) -> Result<StoredObject, StoreError> {
        let key = keys::result(&self.execution, name)?;
        self.store.put_new(&key, body).await
    }
}
