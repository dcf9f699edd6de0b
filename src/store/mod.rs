//! The object store that holds fileset blobs and execution results, over the `object_store` crate.
//!
//! One URL picks the backend: `file://` (the embedded default), `s3://`, `gs://` or `az://`,
//! with each cloud backend configured from its usual environment variables (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`). Uploads are streamed and hashed on the way through; result objects
//! are write-once.
//!
//! Pods never hold the store's credentials: [`grants`] and [`presign`] sign URLs for exactly
//! an execution's blobs and results, [`grant_request`] is how a pod asks the controller for
//! them when it starts, and [`signed`] is the client errand's containers use them with. A run reads through a [`BlobSource`] and writes through a [`ResultSink`]: the
//! store itself locally, the signed URLs in a pod.

pub mod grant_request;
pub mod grants;
pub mod keys;
pub mod presign;
pub mod signed;

mod fileset;
mod staged;
mod transfer;

use std::io::{self, Read as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use object_store::{
    GetOptions, GetRange, GetResultPayload, ObjectStore, ObjectStoreExt, ObjectStoreScheme,
    PutMode, PutOptions, PutPayload, WriteMultipart,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use url::Url;

pub use fileset::{PushedFileset, fileset_upload_key};
pub use presign::PresignedSigner;
pub use transfer::{
    BlobSource, ExtensionResults, PackReport, ResultBody, ResultSink, StoreResults,
};

use crate::archive::{ArchiveError, ByteStream};

/// Objects up to this size are written with one atomic conditional put; larger ones go up in
/// parts of this size (S3's minimum part size), so memory stays bounded whatever the size.
const PART_SIZE: usize = 5 * 1024 * 1024;
/// Parts uploaded concurrently; with [`PART_SIZE`] this caps upload buffers at about 15 MiB.
const PARTS_IN_FLIGHT: usize = 2;

/// What went wrong talking to the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store URL cannot be used.
    #[error("invalid store URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was rejected.
        reason: String,
    },
    /// Neither `XDG_DATA_HOME` nor `HOME` is set, so there is no default store location.
    #[error("cannot pick a default store location: neither XDG_DATA_HOME nor HOME is set")]
    NoDefaultLocation,
    /// The local store directory could not be created.
    #[error("creating the local store directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A key segment does not fit the layout.
    #[error(transparent)]
    Key(#[from] keys::KeyError),
    /// A key is not a valid object path.
    #[error("invalid store key {key:?}: {source}")]
    InvalidKey {
        /// The key.
        key: String,
        /// Why object_store refused it.
        #[source]
        source: object_store::path::Error,
    },
    /// A write-once object already exists.
    #[error("store object {key} already exists and is write-once")]
    AlreadyExists {
        /// The key.
        key: String,
    },
    /// The object does not exist.
    #[error("store object {key} not found")]
    NotFound {
        /// The key.
        key: String,
    },
    /// The backend refused or failed an operation.
    #[error("store {operation} of {key}: {source}")]
    Backend {
        /// What was being done (put, get, list, delete, rename).
        operation: &'static str,
        /// The key or prefix.
        key: String,
        /// The backend's error.
        #[source]
        source: object_store::Error,
    },
    /// The bytes being uploaded could not be produced (e.g. packing a directory failed).
    #[error("reading the data for {key}: {source}")]
    Body {
        /// The key being written.
        key: String,
        /// The producer's error.
        #[source]
        source: io::Error,
    },
    /// Packing a directory for upload failed.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// The grants hold no signed URL for the object.
    #[error("no signed URL was granted for {0}")]
    NotGranted(String),
    /// A request through a signed URL failed (the URL itself is never shown: it is a credential).
    #[error("{operation} of {name} through its signed URL: {reason}")]
    Signed {
        /// GET or PUT.
        operation: &'static str,
        /// The store key or result name.
        name: String,
        /// The HTTP status and the server's words, or the transport error.
        reason: String,
    },
    /// A result could not be spooled to a local file before a sized upload.
    #[error("spooling {name} to {path}: {source}")]
    Spool {
        /// The result.
        name: String,
        /// The spool file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// How a complete write of a new object ended.
#[derive(Debug)]
enum Written {
    /// The object is new and holds the bytes written.
    Created(StoredObject),
    /// Another write of the key completed first; these are the bytes this one had.
    Existed(StoredObject),
}

/// A stored object with the size and sha256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredObject {
    /// The object's key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// Lowercase hex sha256 of the bytes.
    pub sha256: String,
}

/// One object found by [`Store::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The object's key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// When the object was last written.
    pub last_modified: jiff::Timestamp,
}

/// The body of a stored object.
pub enum BlobBody {
    /// A local file, read directly so that large local blobs never pass through async tasks.
    File(std::fs::File),
    /// A remote object's bytes.
    Stream(ByteStream),
}

impl BlobBody {
    /// The body as a stream of bytes, whichever kind it is.
    pub fn into_stream(self) -> ByteStream {
        match self {
            BlobBody::Stream(s) => s,
            BlobBody::File(file) => file_stream(file),
        }
    }
}

/// Reads a file (or a part of one) in large blocks on the blocking pool.
fn file_stream(file: impl io::Read + Send + 'static) -> ByteStream {
    const BLOCK: usize = 1024 * 1024;
    futures::stream::try_unfold(Some(file), |file| async move {
        let Some(mut file) = file else {
            return Ok(None);
        };
        let (file, block) = tokio::task::spawn_blocking(move || {
            let mut block = Vec::with_capacity(BLOCK);
            (&mut file)
                .take(BLOCK as u64)
                .read_to_end(&mut block)
                .map(|_| (file, block))
        })
        .await
        .map_err(io::Error::other)??;
        if block.is_empty() {
            Ok(None)
        } else {
            Ok(Some((Bytes::from(block), Some(file))))
        }
    })
    .boxed()
}

/// Handle to one object store; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    /// The same store as `inner` when it is a local directory, whose writes are staged here
    /// ([`staged`]) rather than by `object_store`, which leaves a killed write's bytes
    /// behind where no listing or deletion finds them.
    local: Option<Arc<LocalFileSystem>>,
    url: String,
    presigner: Option<PresignedSigner>,
}

impl Store {
    /// Opens the store at `url`: `file:///abs/dir` (or a bare absolute path), `s3://bucket[/prefix]`,
    /// `gs://bucket[/prefix]`, `az://container[/prefix]`. Cloud credentials and endpoints come from
    /// the backend's environment variables, as `object_store`'s `from_env` builders read them.
    pub fn open(url: &str) -> Result<Store, StoreError> {
        Store::open_with_options(url, &[])
    }

    /// [`Store::open`], with `options` (object_store configuration keys such as `aws_endpoint`
    /// or `azure_storage_account_name`, and their values) taking precedence over the
    /// environment. Options are for cloud stores; a `file://` store takes none.
    pub fn open_with_options(url: &str, options: &[(&str, &str)]) -> Result<Store, StoreError> {
        let invalid = |reason: String| StoreError::InvalidUrl {
            url: url.to_owned(),
            reason,
        };
        if url.starts_with('/') {
            return Store::open_local(Path::new(url), url);
        }
        let parsed = Url::parse(url).map_err(|e| invalid(e.to_string()))?;
        let (scheme, prefix) =
            ObjectStoreScheme::parse(&parsed).map_err(|e| invalid(e.to_string()))?;
        let backend = |e: object_store::Error| invalid(e.to_string());
        let option = |key: &str| invalid(format!("unknown store option {key:?}"));
        // One client serves both the store and its signer.
        let (inner, signer): (Arc<dyn ObjectStore>, Arc<dyn object_store::signer::Signer>) =
            match scheme {
                ObjectStoreScheme::Local => {
                    let dir = parsed
                        .to_file_path()
                        .map_err(|()| invalid("not an absolute local path".into()))?;
                    return Store::open_local(&dir, url);
                }
                ObjectStoreScheme::AmazonS3 => {
                    let builder = config_keys::<AmazonS3ConfigKey>(options, option)?
                        .into_iter()
                        .fold(AmazonS3Builder::from_env().with_url(url), |b, (k, v)| {
                            b.with_config(k, v)
                        });
                    let s3 = Arc::new(builder.build().map_err(backend)?);
                    (s3.clone(), s3)
                }
                ObjectStoreScheme::GoogleCloudStorage => {
                    let builder = config_keys::<GoogleConfigKey>(options, option)?
                        .into_iter()
                        .fold(
                            GoogleCloudStorageBuilder::from_env().with_url(url),
                            |b, (k, v)| b.with_config(k, v),
                        );
                    let gcs = Arc::new(builder.build().map_err(backend)?);
                    (gcs.clone(), gcs)
                }
                ObjectStoreScheme::MicrosoftAzure => {
                    let builder = config_keys::<AzureConfigKey>(options, option)?
                        .into_iter()
                        .fold(
                            MicrosoftAzureBuilder::from_env().with_url(url),
                            |b, (k, v)| b.with_config(k, v),
                        );
                    let azure = Arc::new(builder.build().map_err(backend)?);
                    (azure.clone(), azure)
                }
                other => {
                    return Err(invalid(format!(
                        "{other:?} is not supported; use file://, s3://, gs:// or az://"
                    )));
                }
            };
        let presigner = PresignedSigner::new(signer, scheme, prefix.clone());
        // The builders address a bucket; a path after it scopes everything under a prefix.
        let inner = if prefix.as_ref().is_empty() {
            inner
        } else {
            Arc::new(PrefixStore::new(inner, prefix))
        };
        Ok(Store {
            inner,
            local: None,
            url: url.to_owned(),
            presigner: Some(presigner),
        })
    }

    /// The signer of this store's own presigned URLs; `None` for a `file://` store, whose
    /// URLs the controller signs and serves itself.
    pub fn presigned_signer(&self) -> Option<PresignedSigner> {
        self.presigner.clone()
    }

    fn open_local(dir: &Path, url: &str) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_owned(),
            source,
        })?;
        let fs = LocalFileSystem::new_with_prefix(dir)
            .map_err(|e| StoreError::InvalidUrl {
                url: url.to_owned(),
                reason: e.to_string(),
            })?
            // Deleting an execution's results should not leave empty directories behind.
            .with_automatic_cleanup(true);
        let fs = Arc::new(fs);
        Ok(Store {
            inner: fs.clone(),
            local: Some(fs),
            url: url.to_owned(),
            presigner: None,
        })
    }

    /// `file://$XDG_DATA_HOME/errand/store`, or `file://$HOME/.local/share/errand/store`.
    pub fn default_url() -> Result<String, StoreError> {
        let non_empty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        let data_home = match non_empty("XDG_DATA_HOME") {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(non_empty("HOME").ok_or(StoreError::NoDefaultLocation)?)
                .join(".local/share"),
        };
        let dir = data_home.join("errand/store");
        Url::from_file_path(&dir)
            .map(String::from)
            .map_err(|()| StoreError::InvalidUrl {
                url: dir.display().to_string(),
                reason: "not an absolute local path".into(),
            })
    }

    /// The URL this store was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Streams `body` into a new object at `key` and returns its size and sha256.
    ///
    /// Objects are write-once: when `key` already holds an object with other bytes this
    /// refuses with [`StoreError::AlreadyExists`]; the same bytes again are accepted without
    /// replacing the object, so the retry of a put whose answer was lost succeeds. A `file://`
    /// store writes the object where no reader sees it and links it into place once complete
    /// ([`staged`]); the link refuses a taken key, so nothing is looked up first. Elsewhere,
    /// a taken key is looked up first and then only digested; bodies that fit in one part are
    /// written with one conditional put, which the backend makes atomic; larger ones are
    /// uploaded in parts, with at most [`PARTS_IN_FLIGHT`] parts buffered (the backend shows
    /// none of them before the last).
    pub async fn put_new(&self, key: &str, body: ByteStream) -> Result<StoredObject, StoreError> {
        let written = match &self.local {
            Some(fs) => staged::put(fs, key, body).await?,
            None => {
                if self.exists(key).await? {
                    let sent = digest(key, body).await?;
                    return self.same_as_stored(sent).await;
                }
                self.put_new_remote(key, body).await?
            }
        };
        match written {
            Written::Created(stored) => Ok(stored),
            Written::Existed(sent) => self.same_as_stored(sent).await,
        }
    }

    /// `sent` if the object at its key holds exactly its bytes; else the key is taken.
    async fn same_as_stored(&self, sent: StoredObject) -> Result<StoredObject, StoreError> {
        let stored = digest(&sent.key, self.get(&sent.key).await?.into_stream()).await?;
        if stored == sent {
            Ok(sent)
        } else {
            Err(already_exists(&sent.key))
        }
    }

    async fn put_new_remote(&self, key: &str, mut body: ByteStream) -> Result<Written, StoreError> {
        let started = std::time::Instant::now();
        let path = object_path(key)?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut first_part = Vec::new();
        let mut first_len = 0usize;
        while first_len < PART_SIZE {
            match body.next().await {
                Some(Ok(bytes)) => {
                    hasher.update(&bytes);
                    first_len += bytes.len();
                    first_part.push(bytes);
                }
                Some(Err(source)) => return Err(body_error(key, source)),
                None => {
                    let opts = PutOptions {
                        mode: PutMode::Create,
                        ..PutOptions::default()
                    };
                    let payload: PutPayload = first_part.into_iter().collect();
                    let sent = info(key, first_len as u64, hasher);
                    return match self.inner.put_opts(&path, payload, opts).await {
                        Ok(_) => Ok(Written::Created(sent)),
                        Err(object_store::Error::AlreadyExists { .. }) => {
                            Ok(Written::Existed(sent))
                        }
                        Err(source) => Err(backend("put", key, source)),
                    };
                }
            }
        }
        size += first_len as u64;

        let upload = self
            .inner
            .put_multipart(&path)
            .await
            .map_err(|source| backend("put", key, source))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        for bytes in first_part {
            writer.put(bytes);
        }
        let streamed = async {
            while let Some(bytes) = body.next().await {
                let bytes = bytes.map_err(|source| body_error(key, source))?;
                hasher.update(&bytes);
                size += bytes.len() as u64;
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|source| backend("put", key, source))?;
                writer.put(bytes);
            }
            Ok(())
        }
        .await;
        if let Err(e) = streamed {
            // Abort so no parts linger; the original error is the one worth reporting.
            if let Err(abort) = writer.abort().await {
                tracing::warn!(key, error = %abort, "aborting a failed multipart upload");
            }
            return Err(e);
        }
        // The backend assembles the parts only now: on some servers a copy of the whole object.
        let streaming = started.elapsed();
        let completing = std::time::Instant::now();
        writer
            .finish()
            .await
            .map_err(|source| backend("put", key, source))?;
        tracing::debug!(
            key,
            size,
            ?streaming,
            completed = ?completing.elapsed(),
            "multipart upload complete"
        );
        Ok(Written::Created(info(key, size, hasher)))
    }

    /// The object at `key`.
    pub async fn get(&self, key: &str) -> Result<BlobBody, StoreError> {
        let path = object_path(key)?;
        let result = self.inner.get(&path).await.map_err(|e| match e {
            object_store::Error::NotFound { .. } => StoreError::NotFound {
                key: key.to_owned(),
            },
            source => backend("get", key, source),
        })?;
        Ok(match result.payload {
            GetResultPayload::File(file, _) => BlobBody::File(file),
            GetResultPayload::Stream(stream) => {
                BlobBody::Stream(stream.map_err(io::Error::other).boxed())
            }
        })
    }

    /// Bytes `range` of the object at `key` (all of it without a range). The range must lie
    /// inside the object.
    pub async fn get_range(
        &self,
        key: &str,
        range: Option<std::ops::Range<u64>>,
    ) -> Result<ByteStream, StoreError> {
        let path = object_path(key)?;
        let options = GetOptions {
            range: range.map(GetRange::Bounded),
            ..GetOptions::default()
        };
        let result = self
            .inner
            .get_opts(&path, options)
            .await
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => StoreError::NotFound {
                    key: key.to_owned(),
                },
                source => backend("get", key, source),
            })?;
        // A local file is read in large blocks, as `get` reads it, rather than in
        // object_store's small chunks.
        let range = result.range.clone();
        Ok(match result.payload {
            GetResultPayload::File(mut file, _) => {
                io::Seek::seek(&mut file, io::SeekFrom::Start(range.start))
                    .map_err(|source| body_error(key, source))?;
                file_stream(file.take(range.end - range.start))
            }
            GetResultPayload::Stream(stream) => stream.map_err(io::Error::other).boxed(),
        })
    }

    /// The bytes of the object at `key` from byte `offset` on, and the object's whole size;
    /// `None` when `offset` is at or past its end.
    pub async fn get_from(
        &self,
        key: &str,
        offset: u64,
    ) -> Result<Option<(ByteStream, u64)>, StoreError> {
        let path = object_path(key)?;
        let size = match self.inner.head(&path).await {
            Ok(meta) => meta.size,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(StoreError::NotFound {
                    key: key.to_owned(),
                });
            }
            Err(source) => return Err(backend("head", key, source)),
        };
        if offset >= size {
            return Ok(None);
        }
        let stream = self.get_range(key, Some(offset..size)).await?;
        Ok(Some((stream, size)))
    }

    /// Whether an object exists at `key`.
    pub async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        match self.inner.head(&object_path(key)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(backend("head", key, source)),
        }
    }

    /// Every object under `prefix` (a key prefix ending in `/`, as the [`keys`] functions return),
    /// sorted by key.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Listed>, StoreError> {
        let path = prefix_path(prefix)?;
        let mut listed: Vec<Listed> = self
            .inner
            .list(Some(&path))
            .map_ok(|meta| Listed {
                key: meta.location.to_string(),
                size: meta.size,
                last_modified: jiff::Timestamp::new(
                    meta.last_modified.timestamp(),
                    meta.last_modified.timestamp_subsec_nanos() as i32,
                )
                .unwrap_or_default(),
            })
            .try_collect()
            .await
            .map_err(|source| backend("list", prefix, source))?;
        listed.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(listed)
    }

    /// Deletes every object under `prefix` and returns how many were deleted. In a `file://`
    /// store the partial writes of objects under `prefix` go too (not counted): those of a
    /// process killed while writing stay until then.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        if self.local.is_some() {
            self.delete_objects(&keys::partials_prefix(prefix)).await?;
        }
        self.delete_objects(prefix).await
    }

    async fn delete_objects(&self, prefix: &str) -> Result<usize, StoreError> {
        let path = prefix_path(prefix)?;
        let locations = self
            .inner
            .list(Some(&path))
            .map_ok(|meta| meta.location)
            .boxed();
        self.inner
            .delete_stream(locations)
            .try_fold(0usize, |n, _| async move { Ok(n + 1) })
            .await
            .map_err(|source| backend("delete", prefix, source))
    }

    /// Deletes the object at `key`; a missing object is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self.inner.delete(&object_path(key)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(backend("delete", key, source)),
        }
    }

    /// Moves `from` to `to`, replacing `to` (used for content-addressed keys, where a replaced
    /// object has the same bytes).
    async fn rename(&self, from: &str, to: &str) -> Result<(), StoreError> {
        self.inner
            .rename(&object_path(from)?, &object_path(to)?)
            .await
            .map_err(|source| backend("rename", from, source))
    }
}

/// `options` with their keys parsed as a backend's configuration keys; only the unknown key
/// goes into the error, never a value (which may be a credential).
fn config_keys<'a, K: std::str::FromStr>(
    options: &[(&str, &'a str)],
    unknown: impl Fn(&str) -> StoreError,
) -> Result<Vec<(K, &'a str)>, StoreError> {
    options
        .iter()
        .map(|&(key, value)| Ok((key.parse().map_err(|_| unknown(key))?, value)))
        .collect()
}

fn object_path(key: &str) -> Result<object_store::path::Path, StoreError> {
    object_store::path::Path::parse(key).map_err(|source| StoreError::InvalidKey {
        key: key.to_owned(),
        source,
    })
}

fn prefix_path(prefix: &str) -> Result<object_store::path::Path, StoreError> {
    object_path(prefix.trim_end_matches('/'))
}

/// The size and sha256 of `body`, read to its end.
async fn digest(key: &str, mut body: ByteStream) -> Result<StoredObject, StoreError> {
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(bytes) = body.next().await {
        let bytes = bytes.map_err(|source| body_error(key, source))?;
        hasher.update(&bytes);
        size += bytes.len() as u64;
    }
    Ok(info(key, size, hasher))
}

/// A name for a temporary object that no concurrent write in this or another process shares.
fn upload_token() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

fn info(key: &str, size: u64, hasher: Sha256) -> StoredObject {
    StoredObject {
        key: key.to_owned(),
        size,
        sha256: hex::encode(hasher.finalize()),
    }
}

fn already_exists(key: &str) -> StoreError {
    StoreError::AlreadyExists {
        key: key.to_owned(),
    }
}

fn backend(operation: &'static str, key: &str, source: object_store::Error) -> StoreError {
    StoreError::Backend {
        operation,
        key: key.to_owned(),
        source,
    }
}

fn body_error(key: &str, source: io::Error) -> StoreError {
    StoreError::Body {
        key: key.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_name_the_problem() {
        for url in ["ftp://host/x", "not a url", "memory:///"] {
            let err = Store::open(url).unwrap_err();
            assert!(
                matches!(&err, StoreError::InvalidUrl { url: u, .. } if u == url),
                "{url}: {err}"
            );
        }
    }

    #[test]
    fn cloud_urls_open_without_network() {
        // Building a client only parses configuration; no request is made.
        let store = Store::open("s3://bucket/some/prefix").unwrap();
        assert_eq!(store.url(), "s3://bucket/some/prefix");
        Store::open("gs://bucket").unwrap();
    }

    #[test]
    fn cloud_stores_sign_their_own_urls_and_file_stores_do_not() {
        let s3 = Store::open_with_options("s3://bucket", &[("aws_region", "eu-west-1")]).unwrap();
        assert!(s3.presigned_signer().is_some());
        let dir = tempfile::tempdir().unwrap();
        let local = Store::open(&format!("file://{}", dir.path().display())).unwrap();
        assert!(local.presigned_signer().is_none());
        let err =
            Store::open_with_options("s3://bucket", &[("aws_no_such_option", "x")]).unwrap_err();
        assert!(err.to_string().contains("aws_no_such_option"), "{err}");
    }
}
