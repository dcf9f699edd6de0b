//! Pushing a directory as a fileset: a content-addressed `tar.gz` blob and its path index beside it, refusing what staging would refuse; the blob streams to a temporary key and moves to its address once its digest is known.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::{Store, StoreError, keys, upload_token};
use crate::archive::{self, PackOptions, PathIndex};

/// The largest path index read back (compressed, a few hundred bytes per thousand paths).
const MAX_INDEX_BYTES: u64 = 64 * 1024 * 1024;

/// A fileset blob in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushedFileset {
    /// `filesets/<ns>/<digest>.tar.gz`
    pub key: String,
    /// sha256 of the compressed blob, which is also its address.
    pub digest: String,
    /// Size of the compressed blob in bytes.
    pub size: u64,
    /// Regular files in the tree.
    pub file_count: u64,
    /// Whether this push stored the blob (false when the same content was there already), so
    /// that a command failing afterwards knows whether the blob is its own to remove.
    pub created: bool,
}

impl Store {
    /// Packs `dir` and stores it at `filesets/<namespace>/<sha256>.tar.gz`.
    ///
    /// The digest is only known once the last byte is packed, so the blob streams to a
    /// temporary key first and is moved into place after its path index is written; pushing an
    /// unchanged tree again yields the same key, because packing is deterministic. An entry
    /// staging would refuse (an absolute link, a link leading out) or packing would leave out (a
    /// fifo, an unreadable file) fails the push, naming the file, and nothing is left in the
    /// store.
    pub async fn push_fileset(
        &self,
        namespace: &str,
        dir: &Path,
    ) -> Result<PushedFileset, StoreError> {
        let upload_key = fileset_upload_key(namespace)?;
        let options = PackOptions {
            stageable: true,
            index: true,
            ..PackOptions::default()
        };
        let packing = archive::pack_dir(dir, options)?;
        let uploaded = self.put_new(&upload_key, packing.stream).await;
        // A packing failure surfaces in the upload as a broken body; report the cause.
        let packed = packing.done.wait().await;
        let (stats, info) = match (packed, uploaded) {
            (Ok(stats), Ok(info)) => (stats, info),
            (packed, uploaded) => {
                if uploaded.is_ok() {
                    self.delete(&upload_key).await?;
                }
                packed?;
                return Err(uploaded.expect_err("one of the two failed"));
            }
        };

        let (key, created) = self
            .place_fileset_upload(
                namespace,
                &upload_key,
                &info.sha256,
                PathIndex::new(stats.paths),
            )
            .await?;
        Ok(PushedFileset {
            key,
            digest: info.sha256,
            size: info.size,
            file_count: stats.files,
            created,
        })
    }

    /// Moves the complete blob at `upload_key` (from [`fileset_upload_key`]) to its content
    /// address `filesets/<namespace>/<sha256>.tar.gz` after writing its path `index` beside it,
    /// and returns that key and whether the blob is new there. A blob already there has the
    /// same bytes, so the upload is dropped instead. On failure nothing of the upload is left.
    pub async fn place_fileset_upload(
        &self,
        namespace: &str,
        upload_key: &str,
        sha256: &str,
        index: PathIndex,
    ) -> Result<(String, bool), StoreError> {
        let key = keys::fileset(namespace, sha256)?;
        let placed = async {
            let started = Instant::now();
            self.put_paths(namespace, sha256, index).await?;
            let indexed = started.elapsed();
            let moving = Instant::now();
            let created = !self.exists(&key).await?;
            if created {
                // On a cloud store a copy of the whole object and a delete.
                self.rename(upload_key, &key).await?;
            } else {
                self.delete(upload_key).await?;
            }
            tracing::debug!(
                key,
                created,
                ?indexed,
                moved = ?moving.elapsed(),
                "placed a fileset upload at its content address"
            );
            Ok(created)
        }
        .await;
        match placed {
            Ok(created) => Ok((key, created)),
            Err(e) => {
                if let Err(cleanup) = self.delete(upload_key).await {
                    tracing::warn!(key = upload_key, error = %cleanup, "removing a failed push");
                }
                Err(e)
            }
        }
    }

    /// Removes the blob `digest` of a namespace and its path index, for a command that fails
    /// after a push that created them.
    pub async fn remove_pushed_fileset(
        &self,
        namespace: &str,
        digest: &str,
    ) -> Result<(), StoreError> {
        self.delete(&keys::fileset(namespace, digest)?).await?;
        self.delete(&keys::fileset_paths(namespace, digest)?).await
    }

    /// Writes the path index of the blob `digest` beside it, unless one is there already
    /// (the same blob always has the same paths).
    async fn put_paths(
        &self,
        namespace: &str,
        digest: &str,
        index: PathIndex,
    ) -> Result<(), StoreError> {
        let key = keys::fileset_paths(namespace, digest)?;
        if self.exists(&key).await? {
            return Ok(());
        }
        let json = serde_json::to_vec(&index).expect("a path index always serializes");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&json).expect("writing to memory");
        let body = Bytes::from(gz.finish().expect("writing to memory"));
        match self
            .put_new(&key, futures::stream::once(async { Ok(body) }).boxed())
            .await
        {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The path indexes of the Fileset contents `digests` (`sha256:<hex>`) in `namespace`, as
    /// `(namespace, digest, index)`. A content pushed without an index, or whose index cannot
    /// be read (logged), is left out: its subpath is then checked at staging.
    pub async fn fileset_path_indexes(
        &self,
        namespace: &str,
        digests: impl IntoIterator<Item = String>,
    ) -> Vec<(String, String, Arc<PathIndex>)> {
        let mut indexes = Vec::new();
        for digest in digests {
            let hex = digest.strip_prefix("sha256:").unwrap_or(&digest);
            match self.fileset_paths(namespace, hex).await {
                Ok(Some(index)) => indexes.push((namespace.to_owned(), digest, Arc::new(index))),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(namespace, digest, error = %e, "reading a Fileset's path index")
                }
            }
        }
        indexes
    }

    /// The path index pushed beside the blob `digest` of a namespace; `None` for a blob pushed
    /// before errand wrote indexes.
    pub async fn fileset_paths(
        &self,
        namespace: &str,
        digest: &str,
    ) -> Result<Option<PathIndex>, StoreError> {
        let key = keys::fileset_paths(namespace, digest)?;
        let body = match self.get(&key).await {
            Ok(body) => body,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut compressed = Vec::new();
        let mut stream = body.into_stream();
        while let Some(bytes) = stream.next().await {
            let bytes = bytes.map_err(|source| StoreError::Body {
                key: key.clone(),
                source,
            })?;
            compressed.extend_from_slice(&bytes);
            if compressed.len() as u64 > MAX_INDEX_BYTES {
                return Err(corrupt_index(&key, "it is larger than 64 MiB"));
            }
        }
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(compressed.as_slice())
            .take(16 * MAX_INDEX_BYTES)
            .read_to_end(&mut json)
            .map_err(|e| corrupt_index(&key, &e.to_string()))?;
        serde_json::from_slice(&json)
            .map(Some)
            .map_err(|e| corrupt_index(&key, &e.to_string()))
    }
}

/// A new key to stream a fileset blob of `namespace` to before its digest is known, which no
/// concurrent push in this or another process shares.
pub fn fileset_upload_key(namespace: &str) -> Result<String, StoreError> {
    Ok(keys::fileset_upload(namespace, &upload_token())?)
}

fn corrupt_index(key: &str, why: &str) -> StoreError {
    StoreError::Body {
        key: key.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned()),
    }
}
