//! Staging: the base fileset and then each artifact mount extracted into the working
//! directory, which is then saved as `input_workdir`.

use std::io::{self, Read};
use std::path::Path;

use bytes::{Buf, Bytes};
use futures::StreamExt;

use super::{BlobRef, RunnerError, StagePlan, result_entry};
use crate::api::ResultEntry;
use crate::archive::ByteStream;
use crate::archive::{self, Selection, Unpacker};
use crate::store::keys::ResultName;
use crate::store::{BlobBody, BlobSource, ResultBody, ResultSink};

/// Extracts `plan` into `workdir` (created if missing) and saves the result as `input_workdir`.
pub async fn stage<S: BlobSource, K: ResultSink>(
    plan: &StagePlan,
    workdir: &Path,
    source: &S,
    sink: &K,
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

    let mut unpacker = Unpacker::new(workdir)?;
    for (blob, selection) in selections {
        let reader = open(source, blob).await?;
        let key = blob.key.clone();
        unpacker = tokio::task::spawn_blocking(move || {
            unpacker
                .unpack_tar_gz(reader, &selection, &key)
                .map(|()| unpacker)
        })
        .await??;
    }
    let staged = tokio::task::spawn_blocking(move || unpacker.finish()).await??;
    tracing::info!(
        workdir = %workdir.display(),
        files = staged.files,
        bytes = staged.bytes,
        "staged the working directory"
    );

    let items = archive::list_dir(workdir)?;
    let stored = sink
        .put(ResultName::InputWorkdir, ResultBody::packed(items))
        .await
        .map_err(|source| RunnerError::Save {
            result: ResultName::InputWorkdir,
            source,
        })?;
    Ok(result_entry(ResultName::InputWorkdir, stored))
}

/// A blocking reader over the blob, for the extraction thread.
async fn open<S: BlobSource>(
    source: &S,
    blob: &BlobRef,
) -> Result<Box<dyn Read + Send>, RunnerError> {
    let body = source
        .open(&blob.key)
        .await
        .map_err(|source| RunnerError::Fetch {
            key: blob.key.clone(),
            source,
        })?;
    Ok(match body {
        BlobBody::File(file) => Box::new(file),
        BlobBody::Stream(stream) => Box::new(StreamReader::spawn(stream)),
    })
}

/// Bridges an async byte stream to a blocking reader: a task pulls the stream a few items
/// ahead into a channel that the reader drains.
struct StreamReader {
    items: tokio::sync::mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl StreamReader {
    fn spawn(mut stream: ByteStream) -> StreamReader {
        let (tx, items) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            while let Some(item) = stream.next().await {
                if tx.send(item).await.is_err() {
                    return;
                }
            }
        });
        StreamReader {
            items,
            current: Bytes::new(),
        }
    }
}

impl Read for StreamReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.items.blocking_recv() {
                Some(item) => self.current = item?,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}
