//! A Fileset's new content, vetted on its way in: the body streams into the store under a temporary key while a second reader checks it against the extraction rules staging applies; only a complete, accepted archive moves to its content address and becomes the Fileset's status.
//!
//! Nothing of a refused, oversized or interrupted upload stays in the store, and the Fileset
//! keeps the content it had. Of two pushes to one Fileset the one that completes last is the
//! one that stays: each records its digest, size and file count in a single status write, and
//! the writes of one replica are made in the order the uploads completed.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use http_body_util::BodyExt;
use hyper::Request;
use hyper::body::{Body, Bytes};
use hyper::header;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::{DataApi, content_of, found, subject};
use crate::api::data::FilesetContent;
use crate::api::{Fileset, FilesetStatus};
use crate::archive::{
    ArchiveError, ByteStream, CheckStats, ChunkReader, ExtractLimits, PathIndex, check_tar_gz,
};
use crate::dataapi::route::ObjectRequest;
use crate::dataapi::status::Refusal;
use crate::store::{StoreError, StoredObject, fileset_upload_key};

/// The largest upload accepted by default: 8 GiB.
pub const DEFAULT_MAX_UPLOAD_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// Chunks of the body queued for the check; beyond this the upload waits for it.
const CHECK_QUEUE: usize = 16;
/// Independent locks that order the status writes of pushes (by Fileset, hashed).
const COMMIT_STRIPES: usize = 64;

/// What an upload may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UploadLimits {
    /// The largest body, in bytes; a larger one is refused with 413.
    pub max_bytes: u64,
    /// What the archive may hold: the bounds staging extracts within.
    pub archive: ExtractLimits,
}

impl Default for UploadLimits {
    fn default() -> Self {
        UploadLimits {
            max_bytes: DEFAULT_MAX_UPLOAD_BYTES,
            archive: ExtractLimits::DEFAULT,
        }
    }
}

/// Locks that keep the status writes of one Fileset in the order the uploads completed.
pub(in crate::dataapi) struct CommitLocks(Vec<tokio::sync::Mutex<()>>);

impl Default for CommitLocks {
    fn default() -> Self {
        CommitLocks(
            (0..COMMIT_STRIPES)
                .map(|_| tokio::sync::Mutex::default())
                .collect(),
        )
    }
}

impl CommitLocks {
    async fn lock(&self, namespace: &str, name: &str) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (namespace, name).hash(&mut hasher);
        self.0[hasher.finish() as usize % self.0.len()].lock().await
    }
}

/// Why the body stopped before its end.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Abort {
    /// It passed the size limit.
    TooLarge,
    /// The client's connection broke.
    Interrupted(String),
    /// The check refused the archive and stopped reading.
    Refused,
}

/// Stores the request's body as the new content of `fileset` and records it; the refusal
/// otherwise, with nothing stored.
pub(in crate::dataapi) async fn put_content<B>(
    api: &DataApi,
    object: &ObjectRequest,
    fileset: &Fileset,
    request: Request<B>,
) -> Result<FilesetContent, Refusal>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let limits = api.limits;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limits.max_bytes) {
        return Err(refusal(
            object,
            fileset,
            Failure::TooLarge,
            limits.max_bytes,
        ));
    }
    let namespace = &object.namespace;
    let upload_key = fileset_upload_key(namespace).map_err(|e| Refusal::internal(e.to_string()))?;
    let (to_check, checked) = mpsc::channel(CHECK_QUEUE);
    let archive = format!("the upload to Fileset {namespace}/{}", object.name);
    let checker = tokio::task::spawn_blocking(move || {
        check_tar_gz(ChunkReader::new(checked), &archive, limits.archive)
    });
    let abort = Arc::new(Mutex::new(None));
    let body = tee(
        request.into_body(),
        to_check,
        limits.max_bytes,
        Arc::clone(&abort),
    );
    let started = Instant::now();
    let uploaded = api.store.put_new(&upload_key, body).await;
    let stored_in = started.elapsed();
    let verdict = checker
        .await
        .map_err(|e| Refusal::internal(format!("checking the upload: {e}")))?;
    let checked_in = started.elapsed();
    let abort = abort
        .lock()
        .expect("no panics while holding the lock")
        .take();
    let accepted = match judge(abort, uploaded, verdict) {
        Ok(accepted) => Ok(accepted),
        Err(failure) => Err(refusal(object, fileset, failure, limits.max_bytes)),
    };
    let (stored, stats) = match accepted {
        Ok(accepted) => accepted,
        Err(refusal) => {
            discard(api, &upload_key).await;
            return Err(refusal);
        }
    };
    let placing = Instant::now();
    if let Err(e) = api
        .store
        .place_fileset_upload(
            namespace,
            &upload_key,
            &stored.sha256,
            PathIndex::new(stats.paths),
        )
        .await
    {
        return Err(Refusal::internal(format!("storing the upload: {e}")));
    }
    let placed_in = placing.elapsed();
    let recording = Instant::now();
    let content = FilesetStatus {
        digest: Some(format!("sha256:{}", stored.sha256)),
        size: Some(stored.size),
        file_count: Some(stats.files),
        pushed_at: Some(Time(jiff::Timestamp::now())),
    };
    let _in_order = api.commits.lock(namespace, &object.name).await;
    let written = api
        .objects
        .set_content(namespace, &object.name, &content)
        .await;
    let updated = found(written, object, || {
        format!(
            "Fileset {:?} was deleted while its content was uploaded",
            object.name
        )
    })?;
    // Where an upload's time went: receiving and storing the body (the check runs alongside;
    // `checked` is when it had read it all), moving it to its address, recording it.
    debug!(
        namespace = %namespace,
        fileset = %object.name,
        stored = ?stored_in,
        checked = ?checked_in,
        placed = ?placed_in,
        recorded = ?recording.elapsed(),
        "timings of a Fileset upload"
    );
    info!(
        namespace = %namespace,
        fileset = %object.name,
        digest = content.digest.as_deref().unwrap_or_default(),
        size = stored.size,
        files = stats.files,
        "stored new Fileset content"
    );
    Ok(content_of(&updated))
}

/// Why an upload is not kept.
#[derive(Debug)]
enum Failure {
    TooLarge,
    Interrupted(String),
    Refused(ArchiveError),
    Store(StoreError),
    Check(ArchiveError),
}

/// The upload's outcome from why its body stopped (if it did), what the store said and what
/// the check said.
fn judge(
    abort: Option<Abort>,
    uploaded: Result<StoredObject, StoreError>,
    verdict: Result<CheckStats, ArchiveError>,
) -> Result<(StoredObject, CheckStats), Failure> {
    match (abort, uploaded, verdict) {
        (Some(Abort::TooLarge), _, _) => Err(Failure::TooLarge),
        (Some(Abort::Interrupted(why)), _, _) => Err(Failure::Interrupted(why)),
        (_, Err(e), _) if !matches!(e, StoreError::Body { .. }) => Err(Failure::Store(e)),
        (
            _,
            _,
            Err(
                e @ (ArchiveError::UnsafeEntry { .. }
                | ArchiveError::LimitExceeded { .. }
                | ArchiveError::ReadArchive { .. }),
            ),
        ) => Err(Failure::Refused(e)),
        (_, _, Err(e)) => Err(Failure::Check(e)),
        (_, Ok(stored), Ok(stats)) => Ok((stored, stats)),
        (_, Err(e), Ok(_)) => Err(Failure::Store(e)),
    }
}

fn refusal(object: &ObjectRequest, fileset: &Fileset, failure: Failure, max_bytes: u64) -> Refusal {
    let kept = match fileset.status.as_ref().and_then(|s| s.digest.as_deref()) {
        Some(digest) => format!("nothing was stored; the Fileset's content is still {digest}"),
        None => "nothing was stored; the Fileset still has no content".to_owned(),
    };
    let subject = subject(object);
    match failure {
        Failure::TooLarge => Refusal::too_large(
            subject,
            format!(
                "the upload is larger than the {max_bytes} bytes this server accepts (the \
                 controller's --max-upload-bytes); {kept}"
            ),
        ),
        Failure::Interrupted(why) => {
            Refusal::bad_request(format!("the upload was interrupted ({why}); {kept}"))
        }
        Failure::Refused(ArchiveError::UnsafeEntry { entry, reason, .. }) => Refusal::invalid(
            subject,
            format!(
                "Fileset {:?}: archive entry {entry:?} is refused: {reason}; {kept}",
                object.name
            ),
            Some(entry),
        ),
        Failure::Refused(ArchiveError::LimitExceeded { entry, limit, .. }) => Refusal::invalid(
            subject,
            format!(
                "Fileset {:?}: archive entry {entry:?} would pass the limit of {limit} that \
                 staging extracts within; {kept}",
                object.name
            ),
            Some(entry),
        ),
        Failure::Refused(e) => Refusal::invalid(
            subject,
            format!("the upload is not a readable tar.gz ({e}); {kept}"),
            None,
        ),
        Failure::Store(e) => Refusal::internal(format!("storing the upload: {e}; {kept}")),
        Failure::Check(e) => Refusal::internal(format!("checking the upload: {e}; {kept}")),
    }
}

async fn discard(api: &DataApi, upload_key: &str) {
    if let Err(e) = api.store.delete(upload_key).await {
        warn!(key = upload_key, error = %e, "removing a refused upload");
    }
}

/// The body as a stream into the store, each chunk also queued for the check; stops with an
/// error (and records why in `abort`) past `max_bytes`, when the connection breaks, or when
/// the check has refused the archive.
fn tee<B>(
    body: B,
    to_check: mpsc::Sender<io::Result<Bytes>>,
    max_bytes: u64,
    abort: Arc<Mutex<Option<Abort>>>,
) -> ByteStream
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    struct State<B> {
        body: std::pin::Pin<Box<B>>,
        to_check: Option<mpsc::Sender<io::Result<Bytes>>>,
        seen: u64,
    }
    let stop = move |why: Abort| {
        let message = format!("{why:?}");
        *abort.lock().expect("no panics while holding the lock") = Some(why);
        io::Error::other(message)
    };
    let state = State {
        body: Box::pin(body),
        to_check: Some(to_check),
        seen: 0,
    };
    futures::stream::try_unfold(state, move |mut state| {
        let stop = stop.clone();
        async move {
            loop {
                // At the end the state, and with it the check's queue, is dropped: the check
                // then reads to its own end.
                let Some(frame) = state.body.frame().await else {
                    return Ok(None);
                };
                let frame = frame.map_err(|e| stop(Abort::Interrupted(e.to_string())))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if data.is_empty() {
                    continue;
                }
                state.seen += data.len() as u64;
                if state.seen > max_bytes {
                    return Err(stop(Abort::TooLarge));
                }
                if let Some(check) = &state.to_check
                    && check.send(Ok(data.clone())).await.is_err()
                {
                    return Err(stop(Abort::Refused));
                }
                return Ok(Some((data, state)));
            }
        }
    })
    .boxed()
}
