//! Pushing a directory as a fileset: a content-addressed `tar.gz` blob, streamed to a temporary key and moved to its address once its digest is known.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Store, StoreError, keys, upload_token};
use crate::archive;

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
    /// temporary key first and is moved into place after; pushing an unchanged tree again
    /// yields the same key, because packing is deterministic.
    pub async fn push_fileset(
        &self,
        namespace: &str,
        dir: &Path,
    ) -> Result<PushedFileset, StoreError> {
        let upload_key = fileset_upload_key(namespace)?;
        let packing = archive::pack_dir(dir)?;
        let uploaded = self.put_new(&upload_key, packing.stream).await;
        // A packing failure surfaces in the upload as a broken body; report the cause.
        let stats = packing.done.wait().await?;
        let info = uploaded?;
        let (key, created) = self
            .place_fileset_upload(namespace, &upload_key, &info.sha256)
            .await?;
        Ok(PushedFileset {
            key,
            digest: info.sha256,
            size: info.size,
            file_count: stats.files,
            created,
        })
    }
}

/// A new key to stream a fileset blob of `namespace` to before its digest is known, which no
/// concurrent push in this or another process shares.
pub fn fileset_upload_key(namespace: &str) -> Result<String, StoreError> {
    Ok(keys::fileset_upload(namespace, &upload_token())?)
}

impl Store {
    /// Moves the complete blob at `upload_key` (from [`fileset_upload_key`]) to its content
    /// address `filesets/<namespace>/<sha256>.tar.gz` and returns that key, and whether the blob
    /// is new there. A blob already there has the same bytes, so the upload is dropped instead.
    pub async fn place_fileset_upload(
        &self,
        namespace: &str,
        upload_key: &str,
        sha256: &str,
    ) -> Result<(String, bool), StoreError> {
        let key = keys::fileset(namespace, sha256)?;
        let created = !self.exists(&key).await?;
        if created {
            self.rename(upload_key, &key).await?;
        } else {
            self.delete(upload_key).await?;
        }
        Ok((key, created))
    }
}
