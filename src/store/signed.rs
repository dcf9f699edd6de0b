//! Input blobs and results through an execution's signed URLs: how errand's containers in a pod reach the store without holding its credentials.
//!
//! GETs stream the blob. PUTs stream a chunked body to the controller's blob endpoint, or,
//! for presigned object-store URLs that need a `Content-Length`, spool the result to a file
//! first. Either way memory does not grow with the size of a result. Requests that fail before
//! any byte of the body was sent (the controller restarting, a refused connection) are retried.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use reqwest::StatusCode;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::grants::{Grants, UploadMode};
use super::keys::{self, ResultName};
use super::{BlobBody, BlobSource, ResultSink, StoreError, StoredObject};
use crate::archive::ByteStream;

/// Attempts per request; the waits between them double from [`FIRST_RETRY_WAIT`], so the
/// last attempt comes about a minute after the first, long enough for a controller restart.
const ATTEMPTS: u32 = 7;
const FIRST_RETRY_WAIT: Duration = Duration::from_secs(1);
/// How long a connection may take to open, and how long a transfer may stall.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// The most of an error response's body kept for the message.
const ERROR_BODY_LIMIT: usize = 512;

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
        let mut builder = reqwest::Client::builder()
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

    /// A PUT to `url` with the headers the grants ask for (a write-once condition, say).
    fn put_request(&self, url: &str) -> reqwest::RequestBuilder {
        self.grants
            .put_headers
            .iter()
            .fold(self.client.put(url), |request, (name, value)| {
                request.header(name, value)
            })
    }

    async fn put_chunked(
        &self,
        name: ResultName,
        url: &str,
        body: ByteStream,
    ) -> Result<(u64, String), StoreError> {
        let shared = Arc::new(Mutex::new(Tally::new(body)));
        let mut wait = FIRST_RETRY_WAIT;
        for attempt in 1..=ATTEMPTS {
            let sent = self
                .put_request(url)
                .body(reqwest::Body::wrap_stream(SharedBody(Arc::clone(&shared))))
                .send()
                .await
                // Its URL carries the signature, which must not reach any log.
                .map_err(reqwest::Error::without_url);
            let (body_error, polled, digest) = {
                let mut tally = shared.lock().unwrap_or_else(PoisonError::into_inner);
                (tally.error.take(), tally.polled, tally.finish())
            };
            if let Some(source) = body_error {
                return Err(StoreError::Body {
                    key: name.to_string(),
                    source,
                });
            }
            match sent {
                // The body was never polled, so the whole upload can start again.
                Err(e) if !polled && attempt < ATTEMPTS && retryable(&e) => {
                    tracing::warn!(result = %name, attempt, error = error_chain(&e), "upload failed before sending; retrying");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                Err(e) => return Err(transport("PUT", name.as_str(), &e)),
                Ok(response) => {
                    check_put(name, response).await?;
                    return Ok(digest);
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    async fn put_sized(
        &self,
        name: ResultName,
        url: &str,
        body: ByteStream,
    ) -> Result<(u64, String), StoreError> {
        let path = self.spool_dir.join(format!(".upload-{name}"));
        let spooled = spool(name, &path, body).await;
        let result = match spooled {
            Ok((size, sha256)) => self
                .send_with_retries("PUT", name.as_str(), || async {
                    let file =
                        tokio::fs::File::open(&path)
                            .await
                            .map_err(|source| StoreError::Spool {
                                name: name.to_string(),
                                path: path.clone(),
                                source,
                            })?;
                    Ok(self
                        .put_request(url)
                        .header(reqwest::header::CONTENT_LENGTH, size)
                        .body(reqwest::Body::from(file)))
                })
                .await
                .map(|response| (response, size, sha256)),
            Err(e) => Err(e),
        };
        if let Err(e) = tokio::fs::remove_file(&path).await
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "removing a spooled upload");
        }
        let (response, size, sha256) = result?;
        check_put(name, response).await?;
        Ok((size, sha256))
    }

    /// Sends the request `build` makes, again after transport failures and server errors.
    async fn send_with_retries<F, Fut>(
        &self,
        operation: &'static str,
        name: &str,
        build: F,
    ) -> Result<reqwest::Response, StoreError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<reqwest::RequestBuilder, StoreError>>,
    {
        let mut wait = FIRST_RETRY_WAIT;
        for attempt in 1..=ATTEMPTS {
            let last = attempt == ATTEMPTS;
            let sent = build()
                .await?
                .send()
                .await
                .map_err(reqwest::Error::without_url);
            match sent {
                Ok(response) if response.status().is_server_error() && !last => {
                    tracing::warn!(name, attempt, status = %response.status(), "{operation} failed; retrying");
                }
                Ok(response) => return Ok(response),
                Err(e) if retryable(&e) && !last => {
                    tracing::warn!(name, attempt, error = %e, "{operation} failed; retrying");
                }
                Err(e) => return Err(transport(operation, name, &e)),
            }
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
        unreachable!("the last attempt returns")
    }
}

impl BlobSource for SignedUrls {
    async fn open(&self, key: &str) -> Result<BlobBody, StoreError> {
        let url = self
            .grants
            .inputs
            .get(key)
            .ok_or_else(|| StoreError::NotGranted(key.to_owned()))?;
        let response = self
            .send_with_retries("GET", key, || async { Ok(self.client.get(url)) })
            .await?;
        match response.status() {
            StatusCode::OK => Ok(BlobBody::Stream(
                response
                    .bytes_stream()
                    .map_err(|e| io::Error::other(e.without_url()))
                    .boxed(),
            )),
            StatusCode::NOT_FOUND => Err(StoreError::NotFound {
                key: key.to_owned(),
            }),
            _ => Err(refused("GET", key, response).await),
        }
    }
}

impl ResultSink for SignedUrls {
    async fn put(&self, name: ResultName, body: ByteStream) -> Result<StoredObject, StoreError> {
        let url = self
            .grants
            .results
            .get(name.as_str())
            .ok_or_else(|| StoreError::NotGranted(name.to_string()))?;
        let (size, sha256) = match self.grants.uploads {
            UploadMode::Chunked => self.put_chunked(name, url, body).await?,
            UploadMode::Sized => self.put_sized(name, url, body).await?,
        };
        Ok(StoredObject {
            key: keys::result(&self.grants.execution, name)?,
            size,
            sha256,
        })
    }
}

/// Errors worth another attempt: the server could not be reached (yet) or did not answer in
/// time. A refused certificate or a bad URL fails at once.
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
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
            );
        }
        source = cause.source();
    }
    false
}

fn transport(operation: &'static str, name: &str, error: &reqwest::Error) -> StoreError {
    StoreError::Signed {
        operation,
        name: name.to_owned(),
        reason: error_chain(error),
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
    let status = response.status();
    let body = response.bytes().await.unwrap_or_default();
    let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_LIMIT)]);
    StoreError::Signed {
        operation,
        name: name.to_owned(),
        reason: format!("{status}: {}", text.trim()),
    }
}

async fn check_put(name: ResultName, response: reqwest::Response) -> Result<(), StoreError> {
    match response.status() {
        status if status.is_success() => Ok(()),
        // Results are write-once; the blob endpoint says so with 409, presigned stores with 412.
        StatusCode::CONFLICT | StatusCode::PRECONDITION_FAILED => Err(StoreError::AlreadyExists {
            key: name.to_string(),
        }),
        _ => Err(refused("PUT", name.as_str(), response).await),
    }
}

/// Writes `body` to `path`, hashing it on the way; returns its size and sha256.
async fn spool(
    name: ResultName,
    path: &Path,
    mut body: ByteStream,
) -> Result<(u64, String), StoreError> {
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
    polled: bool,
    error: Option<io::Error>,
}

impl Tally {
    fn new(stream: ByteStream) -> Tally {
        Tally {
            stream,
            hasher: Sha256::new(),
            size: 0,
            polled: false,
            error: None,
        }
    }

    /// The size and sha256 of what was sent so far (the hash starts over).
    fn finish(&mut self) -> (u64, String) {
        let hasher = std::mem::take(&mut self.hasher);
        (self.size, hex::encode(hasher.finalize()))
    }
}

/// The request body over a shared [`Tally`]: a request that fails before polling it leaves the
/// stream untouched for the next attempt.
struct SharedBody(Arc<Mutex<Tally>>);

impl Stream for SharedBody {
    type Item = io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut tally = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        tally.polled = true;
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
