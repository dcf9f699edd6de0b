//! Streaming one stored result into a local file, as `download` does from the local store and from an operator's `--store`.

use std::io::Write;
use std::path::Path;

use futures::StreamExt;

use super::{Error, ErrorCode};
use crate::store::keys::{AnyResult, ExecutionId};
use crate::store::{Store, StoreError};

/// Streams one stored result of `execution` into `file`; returns its size. The local backend
/// reads its own store; against a cluster only an operator's `--store` leads here.
pub async fn download_from_store(
    store: &Store,
    execution: &ExecutionId,
    result: &AnyResult,
    file: &Path,
) -> Result<u64, Error> {
    let key = result
        .key(execution)
        .map_err(|e| Error::from(StoreError::from(e)))?;
    let mut body = store.get(&key).await.map_err(Error::from)?.into_stream();
    let io_error =
        |e: std::io::Error| Error::new(ErrorCode::IoError, format!("{}: {e}", file.display()));
    let mut out = crate::ops::private::create_user_file(file).map_err(io_error)?;
    let mut size = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk =
            chunk.map_err(|e| Error::new(ErrorCode::StoreError, format!("reading {key}: {e}")))?;
        out.write_all(&chunk).map_err(io_error)?;
        size += chunk.len() as u64;
    }
    out.sync_all().map_err(io_error)?;
    Ok(size)
}
