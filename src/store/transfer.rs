//! Where a run's input blobs come from and where its results go: the store itself, or (in pods) the execution's signed URLs.

use std::future::Future;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::StreamExt;

use super::keys::{self, ExecutionId, ResultName};
use super::{BlobBody, Store, StoreError, StoredObject};
use crate::archive::{self, ByteStream, PackItem, PackOptions, PackStats, Packing};

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
        body: ResultBody,
    ) -> impl Future<Output = Result<StoredObject, StoreError>> + Send;
}

/// A result's bytes, from the first one each time they are opened: an upload cut off after
/// part of its body was sent starts over with the body opened again, so nothing has to be
/// kept aside for a retry.
pub struct ResultBody(Box<dyn Fn() -> ByteStream + Send + Sync>);

impl ResultBody {
    /// Bytes held in memory (a JSON record).
    pub fn bytes(bytes: impl Into<Bytes>) -> ResultBody {
        let bytes = bytes.into();
        ResultBody(Box::new(move || {
            futures::stream::once(std::future::ready(Ok(bytes.clone()))).boxed()
        }))
    }

    /// `items` packed as a `tar.gz` with `options`, packed again at each opening. Packing is
    /// deterministic, so every opening gives the same bytes while the files stay as they are.
    /// The stream ends with an error if packing fails, also when its threads stop early or
    /// `options.cancel` fires. The [`PackReport`] tells what the last packing that ran to its
    /// end packed (the entries it left out).
    pub fn packed(items: Vec<PackItem>, options: PackOptions) -> (ResultBody, PackReport) {
        let report = PackReport::default();
        let last = report.clone();
        let body = ResultBody(Box::new(move || {
            let Packing { stream, done } = archive::pack_items(items.clone(), options.clone());
            let last = last.clone();
            let end = futures::stream::once(done.wait()).filter_map(move |packed| {
                std::future::ready(match packed {
                    Ok(stats) => {
                        last.set(stats);
                        None
                    }
                    Err(e) => Some(Err(io::Error::other(e))),
                })
            });
            stream.chain(end).boxed()
        }));
        (body, report)
    }

    /// The bytes, from the first.
    pub fn open(&self) -> ByteStream {
        (self.0)()
    }
}

/// What the last packing of a [`ResultBody::packed`] that ran to its end packed.
#[derive(Debug, Clone, Default)]
pub struct PackReport(Arc<Mutex<Option<PackStats>>>);

impl PackReport {
    fn set(&self, stats: PackStats) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(stats);
    }

    /// The stats of the last packing that ran to its end, if one did.
    pub fn take(&self) -> Option<PackStats> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
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

impl StoreResults {
    /// The bytes of result `name` as saved.
    pub async fn get(&self, name: ResultName) -> Result<BlobBody, StoreError> {
        self.store.get(&keys::result(&self.execution, name)?).await
    }

    /// Saves `body` as the extension result `name` (one its AgentExtension declared).
    pub async fn put_extension_result(
        &self,
        name: &str,
        body: ResultBody,
    ) -> Result<StoredObject, StoreError> {
        let key = keys::extension_result(&self.execution, name)?;
        self.store.put_new(&key, body.open()).await
    }
}

impl ResultSink for StoreResults {
    async fn put(&self, name: ResultName, body: ResultBody) -> Result<StoredObject, StoreError> {
        let key = keys::result(&self.execution, name)?;
        self.store.put_new(&key, body.open()).await
    }
}
