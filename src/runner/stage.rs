//! Staging: the base fileset and then each artifact mount extracted into the working
//! directory, which is then saved as `input_workdir`.

use std::io::Read;
use std::path::Path;

use futures::StreamExt;

use super::{BlobRef, RunnerError, StagePlan, result_entry};
use crate::api::ResultEntry;
use crate::archive::{self, Selection, Unpacker};
use crate::archive::{ByteStream, ChunkReader};
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
        BlobBody::Stream(stream) => Box::new(stream_reader(stream)),
    })
}

/// Bridges an async byte stream to a blocking reader: a task pulls the stream a few items
/// ahead into a channel that the reader drains.
fn stream_reader(mut stream: ByteStream) -> ChunkReader {
    let (tx, items) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            if tx.send(item).await.is_err() {
                return;
            }
        }
    });
    ChunkReader::new(items)
}
