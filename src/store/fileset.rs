//! Pushing a directory as a fileset: a content-addressed `tar.gz` blob.

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
        let upload_key = keys::fileset_upload(namespace, &upload_token())?;
        let packing = archive::pack_dir(dir)?;
        let uploaded = self.put_new(&upload_key, packing.stream).await;
        // A packing failure surfaces in the upload as a broken body; report the cause.
        let stats = packing.done.wait().await?;
        let info = uploaded?;

        let key = keys::fileset(namespace, &info.sha256)?;
        if self.exists(&key).await? {
            self.delete(&upload_key).await?;
        } else {
            self.rename(&upload_key, &key).await?;
        }
        Ok(PushedFileset {
            key,
            digest: info.sha256,
            size: info.size,
            file_count: stats.files,
        })
    }
}
