//! The blob endpoint behind HMAC-signed URLs, for `file://` stores: pods GET their input blobs and PUT their results through it, never holding store credentials.
//!
//! A GET with `Range: bytes=N-` gets the rest of the blob from byte N, so a download cut off
//! by a restart goes on where it stopped.

use std::io;

use futures::{StreamExt, TryStreamExt};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use hyper::body::{Body, Bytes, Frame};
use hyper::header::{CONTENT_RANGE, HeaderValue, RANGE};
use hyper::{Method, Request, Response, StatusCode};
use jiff::Timestamp;

use crate::store::grants::{Access, HmacSigner};
use crate::store::{Store, StoreError};

/// Path prefix of the endpoint.
pub const BLOBS_PATH: &str = "/blobs/";

/// The body of every response of the controller's HTTP server.
pub type ResponseBody = UnsyncBoxBody<Bytes, io::Error>;

/// Serves signed GETs of Fileset blobs and signed write-once PUTs of results. A PUT is
/// written to a partial file first and becomes the result only once its body is complete
/// ([`Store::put_new`]), so an upload cut off at any byte can be sent again; a PUT of the
/// bytes a result already holds is accepted (the retry of an upload whose answer was lost).
pub struct BlobEndpoint {
    store: Store,
    signer: std::sync::Arc<HmacSigner>,
    max_put_bytes: u64,
}

/// The largest result a pod may PUT through the endpoint unless the controller sets another
/// (`--max-result-bytes`): 16 GiB.
pub const DEFAULT_MAX_PUT_BYTES: u64 = 16 << 30;

/// A small response with a text body.
pub fn text(status: StatusCode, body: impl Into<String>) -> Response<ResponseBody> {
    let body = Full::new(Bytes::from(body.into())).map_err(|never| match never {});
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .body(UnsyncBoxBody::new(body))
        .expect("a response from valid parts")
}

/// A response streaming a blob's bytes.
fn blob_response(status: StatusCode, bytes: crate::archive::ByteStream) -> Response<ResponseBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/octet-stream")
        .body(UnsyncBoxBody::new(StreamBody::new(
            bytes.map_ok(Frame::data),
        )))
        .expect("a response from valid parts")
}

/// The offset of a `Range: bytes=N-` header, the one form a resumed download sends.
fn open_range(value: &HeaderValue) -> Option<u64> {
    value
        .to_str()
        .ok()?
        .strip_prefix("bytes=")?
        .strip_suffix('-')?
        .parse()
        .ok()
}

/// The `expires` and `signature` query parameters.
fn signed_query(query: &str) -> Option<(i64, &str)> {
    let mut expires = None;
    let mut signature = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("expires", value)) => expires = value.parse().ok(),
            Some(("signature", value)) => signature = Some(value),
            _ => {}
        }
    }
    Some((expires?, signature?))
}

impl BlobEndpoint {
    /// The endpoint over `store`, accepting URLs signed by `signer`.
    pub fn new(store: Store, signer: std::sync::Arc<HmacSigner>) -> Self {
        Self {
            store,
            signer,
            max_put_bytes: DEFAULT_MAX_PUT_BYTES,
        }
    }

    /// This endpoint refusing PUTs of more than `max` bytes with 413.
    pub fn with_max_put_bytes(mut self, max: u64) -> Self {
        self.max_put_bytes = max;
        self
    }

    /// Answers one request to `/blobs/<key>?expires=..&signature=..`.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let Some(key) = request.uri().path().strip_prefix(BLOBS_PATH) else {
            return text(StatusCode::NOT_FOUND, "not found\n");
        };
        let key = key.to_owned();
        // GET: Fileset content to stage, and a run's results for its extension's step.
        let (access, allowed_prefixes): (_, &[&str]) = match *request.method() {
            Method::GET => (Access::Get, &["filesets/", "results/"]),
            Method::PUT => (Access::Put, &["results/"]),
            _ => return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and PUT\n"),
        };
        let Some((expires, signature)) = request.uri().query().and_then(signed_query) else {
            return text(StatusCode::FORBIDDEN, "the URL is not signed\n");
        };
        if let Err(e) = self
            .signer
            .verify(access, &key, expires, signature, Timestamp::now())
        {
            return text(StatusCode::FORBIDDEN, format!("{e}\n"));
        }
        // The signature already binds method and key; the prefixes are a second fence.
        if !allowed_prefixes
            .iter()
            .any(|prefix| key.starts_with(prefix))
        {
            return text(StatusCode::FORBIDDEN, "not a key this method may use\n");
        }
        match access {
            Access::Get => match request.headers().get(RANGE).map(open_range) {
                None => self.get(&key).await,
                Some(Some(offset)) => self.get_from(&key, offset).await,
                Some(None) => text(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "only a range of the form bytes=N- is served\n",
                ),
            },
            Access::Put => {
                let declared = request
                    .headers()
                    .get(hyper::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if declared.is_some_and(|n| n > self.max_put_bytes) {
                    return self.too_large();
                }
                self.put(&key, request.into_body()).await
            }
        }
    }

    fn too_large(&self) -> Response<ResponseBody> {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "a result may be at most {} bytes (the controller's --max-result-bytes)\n",
                self.max_put_bytes
            ),
        )
    }

    async fn get(&self, key: &str) -> Response<ResponseBody> {
        match self.store.get(key).await {
            Ok(blob) => blob_response(StatusCode::OK, blob.into_stream()),
            Err(StoreError::NotFound { .. }) => text(StatusCode::NOT_FOUND, "no such blob\n"),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        }
    }

    /// The rest of a blob from byte `offset`: what a download cut off mid-way asks for.
    async fn get_from(&self, key: &str, offset: u64) -> Response<ResponseBody> {
        match self.store.get_from(key, offset).await {
            Ok(Some((bytes, size))) => {
                let mut response = blob_response(StatusCode::PARTIAL_CONTENT, bytes);
                let range = format!("bytes {offset}-{}/{size}", size - 1);
                response.headers_mut().insert(
                    CONTENT_RANGE,
                    HeaderValue::from_str(&range).expect("digits are a valid header"),
                );
                response
            }
            Ok(None) => text(StatusCode::RANGE_NOT_SATISFIABLE, "past the end\n"),
            Err(StoreError::NotFound { .. }) => text(StatusCode::NOT_FOUND, "no such blob\n"),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        }
    }

    async fn put<B>(&self, key: &str, body: B) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let max = self.max_put_bytes;
        let over = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = std::sync::Arc::clone(&over);
        // The client's body broke off (a connection error, or it stopped sending).
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cut_seen = std::sync::Arc::clone(&cut);
        let mut read = 0u64;
        let bytes = BodyStream::new(body)
            .try_filter_map(|frame| std::future::ready(Ok(frame.into_data().ok())))
            .map_err(move |e| {
                cut_seen.store(true, std::sync::atomic::Ordering::SeqCst);
                io::Error::other(e)
            })
            .and_then(move |chunk: Bytes| {
                read = read.saturating_add(chunk.len() as u64);
                let result = if read > max {
                    seen.store(true, std::sync::atomic::Ordering::SeqCst);
                    Err(io::Error::other(format!("the body is over {max} bytes")))
                } else {
                    Ok(chunk)
                };
                std::future::ready(result)
            })
            .boxed();
        match self.store.put_new(key, bytes).await {
            Ok(info) => {
                let json = serde_json::to_string(&info).expect("object info serializes");
                let mut response = text(StatusCode::CREATED, json);
                response.headers_mut().insert(
                    "content-type",
                    hyper::header::HeaderValue::from_static("application/json"),
                );
                response
            }
            Err(StoreError::AlreadyExists { .. }) => {
                text(StatusCode::CONFLICT, "results are write-once\n")
            }
            Err(_) if over.load(std::sync::atomic::Ordering::SeqCst) => self.too_large(),
            Err(_) if cut.load(std::sync::atomic::Ordering::SeqCst) => text(
                StatusCode::BAD_REQUEST,
                "the upload stopped or was cut off before its end; nothing is kept\n",
            ),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use jiff::{SignedDuration, Timestamp};

    use super::*;
    use crate::store::grants::UrlSigner;

    fn endpoint(dir: &std::path::Path) -> (BlobEndpoint, Arc<HmacSigner>) {
        let signer = Arc::new(HmacSigner::new("http://errand", b"blob-test-key"));
        let store = Store::open(&format!("file://{}", dir.display())).unwrap();
        (BlobEndpoint::new(store, Arc::clone(&signer)), signer)
    }

    fn request(method: Method, url: &str, body: &'static [u8]) -> Request<Full<Bytes>> {
        let path = url.strip_prefix("http://errand").unwrap();
        Request::builder()
            .method(method)
            .uri(path)
            .body(Full::new(Bytes::from_static(body)))
            .unwrap()
    }

    async fn body(response: Response<ResponseBody>) -> Vec<u8> {
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec()
    }

    fn soon() -> Timestamp {
        Timestamp::now() + SignedDuration::from_mins(5)
    }

    #[tokio::test]
    async fn a_put_over_the_limit_is_413_declared_or_not_and_nothing_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (endpoint, signer) = endpoint(dir.path());
        let endpoint = endpoint.with_max_put_bytes(8);
        let key = "results/team-a/calc/uid-1/output_artifacts";
        let put = signer.sign(Access::Put, key, soon()).await.unwrap();
        // Full sends no Content-Length header here: the stream is counted.
        let response = endpoint
            .handle(request(Method::PUT, &put, b"nine bytes"))
            .await;
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let message = String::from_utf8(body(response).await).unwrap();
        assert!(message.contains("at most 8 bytes"), "{message}");
        let mut declared = request(Method::PUT, &put, b"");
        declared.headers_mut().insert(
            hyper::header::CONTENT_LENGTH,
            HeaderValue::from_static("9000000000"),
        );
        assert_eq!(
            endpoint.handle(declared).await.status(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        let fits = endpoint
            .handle(request(Method::PUT, &put, b"8 bytes!"))
            .await;
        assert_eq!(
            fits.status(),
            StatusCode::CREATED,
            "nothing was kept before"
        );
    }

    #[tokio::test]
    async fn a_signed_put_saves_a_result_once_and_a_signed_get_reads_a_blob() {
        let dir = tempfile::tempdir().unwrap();
        let (endpoint, signer) = endpoint(dir.path());
        let key = "results/team-a/calc/uid-1/run_result";
        let put = signer.sign(Access::Put, key, soon()).await.unwrap();
        let response = endpoint
            .handle(request(Method::PUT, &put, b"{\"answer\":96}"))
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        let info: serde_json::Value = serde_json::from_slice(&body(response).await).unwrap();
        assert_eq!(info["size"], 13);
        let again = endpoint.handle(request(Method::PUT, &put, b"other")).await;
        assert_eq!(again.status(), StatusCode::CONFLICT, "write-once");
        let retried = endpoint
            .handle(request(Method::PUT, &put, b"{\"answer\":96}"))
            .await;
        assert_eq!(
            retried.status(),
            StatusCode::CREATED,
            "the same bytes again"
        );

        let blob = format!("filesets/team-a/{}.tar.gz", "a".repeat(64));
        let store = Store::open(&format!("file://{}", dir.path().display())).unwrap();
        let content = futures::stream::iter([Ok(Bytes::from_static(b"tarball"))]).boxed();
        store.put_new(&blob, content).await.unwrap();
        let get = signer.sign(Access::Get, &blob, soon()).await.unwrap();
        let response = endpoint.handle(request(Method::GET, &get, b"")).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(body(response).await, b"tarball");

        let ranged = |range: &'static str| {
            let mut request = request(Method::GET, &get, b"");
            request
                .headers_mut()
                .insert(RANGE, HeaderValue::from_static(range));
            endpoint.handle(request)
        };
        let rest = ranged("bytes=3-").await;
        assert_eq!(rest.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(rest.headers()[CONTENT_RANGE], "bytes 3-6/7");
        assert_eq!(body(rest).await, b"ball");
        assert_eq!(
            ranged("bytes=7-").await.status(),
            StatusCode::RANGE_NOT_SATISFIABLE
        );
        assert_eq!(
            ranged("bytes=0-2").await.status(),
            StatusCode::RANGE_NOT_SATISFIABLE
        );
    }

    #[tokio::test]
    async fn unsigned_expired_or_misused_urls_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (endpoint, signer) = endpoint(dir.path());
        let key = "results/team-a/calc/uid-1/run_result";
        let refused = |url: String, method: Method| {
            let endpoint = &endpoint;
            async move { endpoint.handle(request(method, &url, b"x")).await.status() }
        };
        let unsigned = format!("http://errand/blobs/{key}");
        assert_eq!(refused(unsigned, Method::PUT).await, StatusCode::FORBIDDEN);
        let expired = signer
            .sign(
                Access::Put,
                key,
                Timestamp::now() - SignedDuration::from_secs(1),
            )
            .await
            .unwrap();
        assert_eq!(refused(expired, Method::PUT).await, StatusCode::FORBIDDEN);
        let get_url = signer.sign(Access::Get, key, soon()).await.unwrap();
        assert_eq!(
            refused(get_url.clone(), Method::PUT).await,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            refused(get_url, Method::GET).await,
            StatusCode::NOT_FOUND,
            "an extension's step reads a run's results: a signed GET of one is served"
        );
        let elsewhere = signer.sign(Access::Get, "other/x", soon()).await.unwrap();
        assert_eq!(
            refused(elsewhere, Method::GET).await,
            StatusCode::FORBIDDEN,
            "GET is only for fileset blobs and results"
        );
        let other = signer
            .sign(Access::Put, "results/team-a/other/uid-2/run_result", soon())
            .await
            .unwrap()
            .replace("other/uid-2", "calc/uid-1");
        assert_eq!(refused(other, Method::PUT).await, StatusCode::FORBIDDEN);
    }
}
