//! Staging: the base fileset and then each artifact mount extracted into the working
//! directory, which is then saved as `input_workdir`.
//!
//! Staging stops within a chunk when its token fires (a cancel, a stop signal) or its budget
//! runs out: the download, the extraction thread and the upload of `input_workdir` all watch
//! the same token, and staging returns only once they have stopped, so nothing writes on.
//! Each blob is checked against its pinned sha256 as it streams.

use std::io::{self, Read};
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::collect::put_archive;
use super::{BlobRef, RunnerError, StagePlan, result_entry};
use crate::api::ResultEntry;
use crate::archive::{
    self, ArchiveError, ByteStream, ChunkReader, ExtractLimits, Selection, Unpacker,
};
use crate::store::keys::ResultName;
use crate::store::{BlobBody, BlobSource, ResultSink};

/// How long staging may take when nothing else is said: download, extraction and the upload of
/// `input_workdir` together. The controller's `--staging-budget-seconds` has the same default.
pub const DEFAULT_STAGING_BUDGET: Duration = Duration::from_secs(900);

/// The bounds of one staging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageSettings {
    /// What extraction may write.
    pub limits: ExtractLimits,
    /// How long staging may take.
    pub budget: Duration,
}

impl Default for StageSettings {
    fn default() -> Self {
        StageSettings {
            limits: ExtractLimits::DEFAULT,
            budget: DEFAULT_STAGING_BUDGET,
        }
    }
}

/// Extracts `plan` into `workdir` (created if missing) and saves the result as `input_workdir`,
/// within `settings`; stops with [`RunnerError::Cancelled`] soon after `cancel` fires.
pub async fn stage<S: BlobSource, K: ResultSink>(
    plan: &StagePlan,
    workdir: &Path,
    source: &S,
    sink: &K,
    settings: &StageSettings,
    cancel: &CancellationToken,
) -> Result<ResultEntry, RunnerError> {
    // One token for everything staging runs, fired by a cancel or by the budget.
    let stop = cancel.child_token();
    let budget = tokio::spawn({
        let stop = stop.clone();
        let budget = settings.budget;
        async move {
            tokio::select! {
                () = tokio::time::sleep(budget) => stop.cancel(),
                () = stop.cancelled() => {}
            }
        }
    });
    let staged = stage_until(plan, workdir, source, sink, settings.limits, &stop).await;
    // Whatever failed after the token fired failed because it fired.
    let stopped = stop.is_cancelled();
    stop.cancel();
    let _ = budget.await;
    match staged {
        Err(_) if stopped && cancel.is_cancelled() => Err(RunnerError::Cancelled),
        Err(e) if stopped => Err(RunnerError::StagingBudget {
            seconds: settings.budget.as_secs(),
            detail: e.to_string(),
        }),
        other => other,
    }
}

async fn stage_until<S: BlobSource, K: ResultSink>(
    plan: &StagePlan,
    workdir: &Path,
    source: &S,
    sink: &K,
    limits: ExtractLimits,
    stop: &CancellationToken,
) -> Result<ResultEntry, RunnerError> {
    let layers = plan.base.iter().map(|base| (base, None)).chain(
        plan.mounts
            .iter()
            .map(|m| (&m.blob, Some(m.mount_path.as_str()))),
    );
    let mut selections = Vec::new();
    for (blob, dest) in layers {
        selections.push((blob, Selection::new(blob.subpath.as_deref(), dest)?));
    }

    let mut unpacker = Unpacker::new(workdir)?
        .with_limits(limits)
        .with_cancel(stop.clone());
    for (blob, selection) in selections {
        let reader = tokio::select! {
            reader = open(source, blob, stop) => reader?,
            () = stop.cancelled() => return Err(RunnerError::Stopped),
        };
        let label = blob.label();
        let (back, unpacked) = tokio::task::spawn_blocking(move || {
            let unpacked = unpacker.unpack_tar_gz(reader, &selection, &label);
            (unpacker, unpacked)
        })
        .await?;
        unpacker = back;
        unpacked.map_err(|e| blob_error(blob, e))?;
    }
    let staged = tokio::task::spawn_blocking(move || unpacker.finish()).await??;
    tracing::info!(
        workdir = %workdir.display(),
        files = staged.files,
        bytes = staged.bytes,
        "staged the working directory"
    );

    let items = archive::list_dir(workdir)?;
    let (stored, packed) = put_archive(sink, ResultName::InputWorkdir, items, stop).await?;
    for skipped in &packed.skipped_entries {
        tracing::warn!(
            path = skipped.path,
            "input_workdir left out an entry: {}",
            skipped.reason
        );
    }
    Ok(result_entry(ResultName::InputWorkdir, stored))
}

/// An extraction error, or the digest mismatch that caused it.
fn blob_error(blob: &BlobRef, error: ArchiveError) -> RunnerError {
    if let ArchiveError::ReadArchive { source, .. } = &error
        && let Some(mismatch) = source
            .get_ref()
            .and_then(|e| e.downcast_ref::<DigestMismatch>())
    {
        return RunnerError::DigestMismatch {
            fileset: blob.fileset.clone(),
            expected: blob.sha256.clone(),
            actual: mismatch.actual.clone(),
        };
    }
    RunnerError::Archive(error)
}

/// A blocking reader over the blob that checks its sha256 as it streams, for the extraction
/// thread.
async fn open<S: BlobSource>(
    source: &S,
    blob: &BlobRef,
    stop: &CancellationToken,
) -> Result<Box<dyn Read + Send>, RunnerError> {
    let body = source
        .open(&blob.key)
        .await
        .map_err(|source| RunnerError::Fetch {
            fileset: blob.fileset.clone(),
            key: blob.key.clone(),
            source,
        })?;
    let reader: Box<dyn Read + Send> = match body {
        BlobBody::File(file) => Box::new(file),
        BlobBody::Stream(stream) => Box::new(stream_reader(stream, stop.clone())),
    };
    Ok(Box::new(DigestReader {
        inner: reader,
        hasher: Sha256::new(),
        expected: blob.sha256.clone(),
    }))
}

/// The blob's bytes did not hash to the digest they were pinned at.
#[derive(Debug, thiserror::Error)]
#[error("sha256 {actual} does not match the pinned digest")]
struct DigestMismatch {
    actual: String,
}

/// Hashes what it reads; at the end, a mismatch with `expected` is a read error.
struct DigestReader {
    inner: Box<dyn Read + Send>,
    hasher: Sha256,
    expected: String,
}

impl Read for DigestReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.hasher.update(&buf[..n]);
            return Ok(n);
        }
        let actual = hex::encode(std::mem::take(&mut self.hasher).finalize());
        if actual != self.expected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                DigestMismatch { actual },
            ));
        }
        Ok(0)
    }
}

/// Bridges an async byte stream to a blocking reader: a task pulls the stream a few items
/// ahead into a channel that the reader drains, and stops (ending the reader) on `stop`.
fn stream_reader(mut stream: ByteStream, stop: CancellationToken) -> ChunkReader {
    let (tx, items) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        loop {
            let item = tokio::select! {
                item = stream.next() => item,
                () = stop.cancelled() => {
                    let _ = tx.send(Err(io::Error::other("staging was stopped"))).await;
                    return;
                }
            };
            let Some(item) = item else { return };
            if tx.send(item).await.is_err() {
                return;
            }
        }
    });
    ChunkReader::new(items)
}
