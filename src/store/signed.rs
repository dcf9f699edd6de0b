//! Input blobs and results through an execution's signed URLs: how errand's containers in a pod reach the store without holding its credentials.
//!
//! GETs stream the blob, and ask for the rest when a connection breaks mid-way. PUTs stream a chunked body to the controller's blob endpoint, or,
//! for presigned object-store URLs that need a `Content-Length`, spool the result to a file
//! first. Either way memory does not grow with the size of a result. A request that fails on
//! the way (the controller restarting, a connection cut at any byte, a server error) is sent
//! again, whole, until it succeeds or the URLs expire ([`Backoff`]): a chunked body is opened
//! again from its first byte ([`ResultBody`]), a spooled one is read again. The store accepts
//! the same bytes again under a key it already holds, so a retry after an answer was lost
//! succeeds too.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use jiff::{SignedDuration, Timestamp};
use reqwest::StatusCode;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::grants::{Grants, UploadMode};
use super::keys::{self, ResultName};
use super::{
    BlobBody, BlobSource, ExtensionResults, ResultBody, ResultSink, StoreError, StoredObject,
};
use crate::archive::ByteStream;

/// The first wait before a retry; the waits double up to [`LONGEST_RETRY_WAIT`].
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(500);
/// The longest wait between two attempts, so a controller that is back is found soon.
const LONGEST_RETRY_WAIT: Duration = Duration::from_secs(5);
/// How long a connection may take to open, and how long a transfer may stall.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// The most of an error response's body kept for the message.
const ERROR_BODY_LIMIT: usize = 512;

/// The waits between attempts of one request: doubling from [`FIRST_RETRY_WAIT`] to
/// [`LONGEST_RETRY_WAIT`], and none once the next attempt would come after `until` (the
/// grants' expiry, after which no URL of theirs works).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    next_wait: Duration,
    until: Timestamp,
}

impl Backoff {
    /// Waits for attempts up to `until`.
    pub fn until(until: Timestamp) -> Backoff {
        Backoff {
            next_wait: FIRST_RETRY_WAIT,
            until,
        }
    }

    /// How long to wait before the next attempt, at `now`; `None` when it would come too late.
    pub fn next(&mut self, now: Timestamp) -> Option<Duration> {
        let wait = self.next_wait;
        let at = now.checked_add(SignedDuration::try_from(wait).ok()?).ok()?;
        if at >= self.until {
            return None;
        }
        self.next_wait = (wait * 2).min(LONGEST_RETRY_WAIT);
        Some(wait)
    }
}

/// Sends `attempt` until it is done, fails for good, or `until` (the grants' expiry) comes.
async fn retrying<T, F, Fut>(
    until: Timestamp,
    operation: &'static str,
    name: &str,
    mut attempt: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt<T>>,
{
    let mut backoff = Backoff::until(until);
    for number in 1u32.. {
        let error = match attempt().await {
            Attempt::Done(value) => return Ok(value),
            Attempt::Fail(error) => return Err(error),
            Attempt::Retry(error) => error,
        };
        let Some(wait) = backoff.next(Timestamp::now()) else {
            return Err(error);
        };
        tracing::warn!(
            name,
            attempt = number,
            retry_in_ms = wait.as_millis() as u64,
            %error,
            "{operation} failed; retrying"
        );
        tokio::time::sleep(wait).await;
    }
    unreachable!("the attempts end")
}

/// What one attempt of a request came to.
enum Attempt<T> {
    /// It succeeded.
    Done(T),
    /// It failed in a way worth another attempt; the error if none is left.
    Retry(StoreError),
    /// It failed for good.
    Fail(StoreError),
}

/// The store as an execution's grants allow it: GET its input blobs, PUT its results once.
pub struct SignedUrls {
    client: reqwest::Client,
    grants: Grants,
    spool_dir: PathBuf,
}

impl SignedUrls {
    /// A client for `grants`; sized uploads are spooled in `spool_dir`. HTTPS URLs are checked
    /// against the system's CA roots and those in the PEM bundle `ca_bundle`, if given: the
    /// agent's image may have no roots of its own.
    pub fn new(
        grants: Grants,
        spool_dir: impl Into<PathBuf>,
        ca_bundle: Option<&Path>,
    ) -> Result<SignedUrls, StoreError> {
        let setup_error = |what: &str, reason: String| StoreError::Signed {
            operation: "setup",
            name: what.to_owned(),
            reason,
        };
        // errand's own endpoint, reached directly: never through the agent's egress proxy,
        // whose variables the runner's container holds.
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(STALL_TIMEOUT);
        if let Some(path) = ca_bundle {
            let what = format!("the CA bundle {}", path.display());
            let pem = std::fs::read(path).map_err(|e| setup_error(&what, e.to_string()))?;
            let roots = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| setup_error(&what, e.to_string()))?;
            if roots.is_empty() {
                return Err(setup_error(&what, "it holds no certificate".into()));
            }
            for root in roots {
                builder = builder.add_root_certificate(root);
            }
        }
        let client = builder
            .build()
            .map_err(|e| setup_error("the HTTP client", e.to_string()))?;
        Ok(SignedUrls {
            client,
            grants,
            spool_dir: spool_dir.into(),
        })
    }

    /// Saves `body` as result `name` at `key` through its granted PUT URL.
    async fn put_granted(
        &self,
        name: &str,
        key: String,
        body: ResultBody,
    ) -> Result<StoredObject, StoreError> {
        let url = self
            .grants
            .results
            .get(name)
            .ok_or_else(|| StoreError::NotGranted(name.to_owned()))?;
        let (size, sha256) = match self.grants.uploads {
            UploadMode::Chunked => self.put_chunked(name, url, &body).await?,
            UploadMode::Sized => self.put_sized(name, url, &body).await?,
        };
        Ok(StoredObject { key, size, sha256 })
    }

    /// A PUT to `url` with the headers the grants ask for (a write-once condition, say).
    fn put_request(&self, url: &str) -> reqwest::RequestBuilder {
        self.grants
            .put_headers
            .iter()
            .fold(self.client.put(url), |request, (name, value)| {
                request.header(name, value)
            })
    }

    /// A chunked PUT of `body`, opened again from its first byte for each attempt.
    async fn put_chunked(
        &self,
        name: &str,
        url: &str,
        body: &ResultBody,
    ) -> Result<(u64, String), StoreError> {
        retrying(self.grants.expires_at, "PUT", name, || async {
            let tally = Arc::new(Mutex::new(Tally::new(body.open())));
            let sent = self
                .put_request(url)
                .body(reqwest::Body::wrap_stream(SharedBody(Arc::clone(&tally))))
                .send()
                .await
                // Its URL carries the signature, which must not reach any log.
                .map_err(reqwest::Error::without_url);
            let (body_error, digest) = {
                let mut tally = tally.lock().unwrap_or_else(PoisonError::into_inner);
                (tally.error.take(), tally.finish())
            };
            if let Some(source) = body_error {
                // The bytes could not be produced: sending them again would not help.
                return Attempt::Fail(StoreError::Body {
                    key: name.to_string(),
                    source,
                });
            }
            match put_outcome("PUT", name, sent).await {
                Attempt::Done(()) => Attempt::Done(digest),
                Attempt::Retry(e) => Attempt::Retry(e),
                Attempt::Fail(e) => Attempt::Fail(e),
            }
        })
        .await
    }

    /// A PUT with a `Content-Length`: `body` is spooled to a file once and sent from it.
    async fn put_sized(
        &self,
        name: &str,
        url: &str,
        body: &ResultBody,
    ) -> Result<(u64, String), StoreError> {
        let path = self.spool_dir.join(format!(".upload-{name}"));
        let spooled = spool(name, &path, body.open()).await;
        let result = match spooled {
            Ok((size, sha256)) => {
                let mut sent_before = false;
                retrying(self.grants.expires_at, "PUT", name, || {
                    let earlier = std::mem::replace(&mut sent_before, true);
                    let path = &path;
                    async move {
                        let file = match tokio::fs::File::open(path).await {
                            Ok(file) => file,
                            Err(source) => {
                                return Attempt::Fail(StoreError::Spool {
                                    name: name.to_string(),
                                    path: path.clone(),
                                    source,
                                });
                            }
                        };
                        let sent = self
                            .put_request(url)
                            .header(reqwest::header::CONTENT_LENGTH, size)
                            .body(reqwest::Body::from(file))
                            .send()
                            .await
                            .map_err(reqwest::Error::without_url);
                        match put_outcome("PUT", name, sent).await {
                            // A presigned PUT is all or nothing, and only this pod holds its
                            // URL: an object already there is an earlier attempt's, whose
                            // answer was lost, with these very bytes.
                            Attempt::Fail(StoreError::AlreadyExists { .. }) if earlier => {
                                Attempt::Done(())
                            }
                            outcome => outcome,
                        }
                    }
                })
                .await
                .map(|()| (size, sha256))
            }
            Err(e) => Err(e),
        };
        if let Err(e) = tokio::fs::remove_file(&path).await
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "removing a spooled upload");
        }
        result
    }
}

impl BlobSource for SignedUrls {
    async fn open(&self, key: &str) -> Result<BlobBody, StoreError> {
        let url = self
            .grants
            .inputs
            .get(key)
            .ok_or_else(|| StoreError::NotGranted(key.to_owned()))?;
        let download = Download {
            client: self.client.clone(),
            key: key.to_owned(),
            url: url.clone(),
            until: self.grants.expires_at,
            received: 0,
        };
        let response = download.get().await?;
        Ok(BlobBody::Stream(download.resuming(response)))
    }
}

/// A GET through a signed URL that, when its connection breaks after some bytes, asks for
/// the rest (`Range: bytes=N-`) until it has every byte or the grants expire.
struct Download {
    client: reqwest::Client,
    key: String,
    url: String,
    until: Timestamp,
    /// Bytes passed on so far.
    received: u64,
}

impl Download {
    /// The blob from the first byte not received yet.
    async fn get(&self) -> Result<reqwest::Response, StoreError> {
        let key = self.key.as_str();
        let from = self.received;
        retrying(self.until, "GET", key, || async move {
            let mut request = self.client.get(&self.url);
            if from > 0 {
                request = request.header(reqwest::header::RANGE, format!("bytes={from}-"));
            }
            let sent = request.send().await.map_err(reqwest::Error::without_url);
            match sent {
                Ok(response) if from == 0 && response.status() == StatusCode::OK => {
                    Attempt::Done(response)
                }
                Ok(response)
                    if from > 0
                        && response.status() == StatusCode::PARTIAL_CONTENT
                        && range_start(&response) == Some(from) =>
                {
                    Attempt::Done(response)
                }
                Ok(response) if response.status() == StatusCode::NOT_FOUND => {
                    Attempt::Fail(StoreError::NotFound {
                        key: key.to_owned(),
                    })
                }
                Ok(response) if response.status().is_success() => {
                    Attempt::Fail(StoreError::Signed {
                        operation: "GET",
                        name: key.to_owned(),
                        reason: format!(
                            "asked for the rest from byte {from}, the server answered {}",
                            response.status()
                        ),
                    })
                }
                Ok(response) => refused_attempt("GET", key, response).await,
                Err(e) => transport_attempt("GET", key, &e),
            }
        })
        .await
    }

    /// The bytes of `response`, and of the requests for the rest when it breaks.
    fn resuming(self, response: reqwest::Response) -> ByteStream {
        let body = response.bytes_stream().boxed();
        futures::stream::try_unfold((self, body), |(mut download, mut body)| async move {
            loop {
                match body.next().await {
                    None => return Ok(None),
                    Some(Ok(bytes)) => {
                        download.received += bytes.len() as u64;
                        return Ok(Some((bytes, (download, body))));
                    }
                    Some(Err(e)) if retryable(&e) => {
                        tracing::warn!(
                            key = download.key,
                            received = download.received,
                            error = error_chain(&e.without_url()),
                            "the download broke; asking for the rest"
                        );
                        body = download
                            .get()
                            .await
                            .map_err(io::Error::other)?
                            .bytes_stream()
                            .boxed();
                    }
                    Some(Err(e)) => return Err(io::Error::other(e.without_url())),
                }
            }
        })
        .boxed()
    }
}

/// The first byte of a partial response, from its `Content-Range: bytes N-M/SIZE`.
fn range_start(response: &reqwest::Response) -> Option<u64> {
    let range = response
        .headers()
        .get(reqwest::header::CONTENT_RANGE)?
        .to_str()
        .ok()?;
    range
        .strip_prefix("bytes ")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

impl ExtensionResults for SignedUrls {
    async fn read(&self, name: ResultName) -> Result<BlobBody, StoreError> {
        self.open(&keys::result(&self.grants.execution, name)?)
            .await
    }

    async fn put_extension_result(
        &self,
        name: &str,
        body: ResultBody,
    ) -> Result<StoredObject, StoreError> {
        let key = keys::extension_result(&self.grants.execution, name)?;
        self.put_granted(name, key, body).await
    }
}

impl ResultSink for SignedUrls {
    async fn put(&self, name: ResultName, body: ResultBody) -> Result<StoredObject, StoreError> {
        let key = keys::result(&self.grants.execution, name)?;
        self.put_granted(name.as_str(), key, body).await
    }
}

/// Errors worth another attempt: the server could not be reached (yet), did not answer in
/// time, or the connection broke before the answer came, at whatever byte. A refused
/// certificate or a bad URL fails at once.
fn retryable(error: &reqwest::Error) -> bool {
    use std::error::Error as _;
    if error.is_timeout() {
        return true;
    }
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return matches!(
                io.kind(),
                io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::NotConnected
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
            );
        }
        if let Some(http) = cause.downcast_ref::<hyper::Error>()
            && (http.is_incomplete_message()
                || http.is_closed()
                || http.is_canceled()
                || http.is_body_write_aborted()
                || http.is_timeout())
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Answers worth another attempt: the server failed, or asked to be called again.
fn retryable_status(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}

/// A request that got no answer.
fn transport_attempt<T>(operation: &'static str, name: &str, error: &reqwest::Error) -> Attempt<T> {
    let failure = StoreError::Signed {
        operation,
        name: name.to_owned(),
        reason: error_chain(error),
    };
    if retryable(error) {
        Attempt::Retry(failure)
    } else {
        Attempt::Fail(failure)
    }
}

/// A request the server answered with an error.
async fn refused_attempt<T>(
    operation: &'static str,
    name: &str,
    response: reqwest::Response,
) -> Attempt<T> {
    let retry = retryable_status(response.status());
    let failure = refused(operation, name, response).await;
    if retry {
        Attempt::Retry(failure)
    } else {
        Attempt::Fail(failure)
    }
}

/// What a PUT's answer (or its absence) means.
async fn put_outcome(
    operation: &'static str,
    name: &str,
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Attempt<()> {
    match sent {
        Ok(response) if response.status().is_success() => Attempt::Done(()),
        // Results are write-once; the blob endpoint says so with 409, presigned stores with 412.
        Ok(response)
            if matches!(
                response.status(),
                StatusCode::CONFLICT | StatusCode::PRECONDITION_FAILED
            ) =>
        {
            Attempt::Fail(StoreError::AlreadyExists {
                key: name.to_string(),
            })
        }
        Ok(response) => refused_attempt(operation, name, response).await,
        Err(e) => transport_attempt(operation, name, &e),
    }
}

/// The error and its sources, which hold the useful part (connection refused, ...).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A refused request, with the start of the server's explanation.
async fn refused(operation: &'static str, name: &str, response: reqwest::Response) -> StoreError {
    let (status, text) = failure_text(response).await;
    StoreError::Signed {
        operation,
        name: name.to_owned(),
        reason: format!("{status}: {text}"),
    }
}

/// The status of a failed response and the start of its body, for a message.
pub(crate) async fn failure_text(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body = response.bytes().await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_LIMIT)]);
    (status, text.trim().to_owned())
}

/// Writes `body` to `path`, hashing it on the way; returns its size and sha256.
async fn spool(name: &str, path: &Path, mut body: ByteStream) -> Result<(u64, String), StoreError> {
    let spool_error = |source| StoreError::Spool {
        name: name.to_string(),
        path: path.to_owned(),
        source,
    };
    let mut file = tokio::fs::File::create(path).await.map_err(spool_error)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(bytes) = body.next().await {
        let bytes = bytes.map_err(|source| StoreError::Body {
            key: name.to_string(),
            source,
        })?;
        hasher.update(&bytes);
        size += bytes.len() as u64;
        file.write_all(&bytes).await.map_err(spool_error)?;
    }
    file.flush().await.map_err(spool_error)?;
    file.sync_all().await.map_err(spool_error)?;
    Ok((size, hex::encode(hasher.finalize())))
}

/// An upload's body as it is sent: hashed and counted on the way, with the first error the
/// producer reported kept aside so that it, not the aborted request, is what gets reported.
struct Tally {
    stream: ByteStream,
    hasher: Sha256,
    size: u64,
    error: Option<io::Error>,
}

impl Tally {
    fn new(stream: ByteStream) -> Tally {
        Tally {
            stream,
            hasher: Sha256::new(),
            size: 0,
            error: None,
        }
    }

    /// The size and sha256 of what was sent; the body is dropped, so a packer behind it stops
    /// before the next attempt starts another.
    fn finish(&mut self) -> (u64, String) {
        self.stream = futures::stream::empty().boxed();
        let hasher = std::mem::take(&mut self.hasher);
        (self.size, hex::encode(hasher.finalize()))
    }
}

/// The request body over a shared [`Tally`], which the sender reads back once the request
/// ended.
struct SharedBody(Arc<Mutex<Tally>>);

impl Stream for SharedBody {
    type Item = io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut tally = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match tally.stream.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(bytes))) => {
                tally.hasher.update(&bytes);
                tally.size += bytes.len() as u64;
                Poll::Ready(Some(Ok(bytes)))
            }
            Poll::Ready(Some(Err(e))) => {
                let reported = io::Error::new(e.kind(), e.to_string());
                tally.error = Some(e);
                Poll::Ready(Some(Err(reported)))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_longer_each_time_up_to_a_limit_and_stop_when_the_urls_expire() {
        let start = Timestamp::from_second(1_800_000_000).unwrap();
        let mut backoff = Backoff::until(start + SignedDuration::from_secs(30));
        let mut now = start;
        let mut waits = Vec::new();
        while let Some(wait) = backoff.next(now) {
            waits.push(wait.as_millis());
            now += SignedDuration::try_from(wait).unwrap();
        }
        assert_eq!(
            waits,
            [500, 1000, 2000, 4000, 5000, 5000, 5000, 5000],
            "the next 5 s wait would end after the expiry"
        );
        assert_eq!(Backoff::until(start).next(start), None);
    }
}
