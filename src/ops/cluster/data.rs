//! The client of errand's `data.errand.dev` API: results listed and downloaded, Fileset content pushed, all through the Kubernetes API server with the caller's own credentials.
//!
//! Downloads are checked against the sha256 the server sends as the `ETag`; they ask for a
//! link (the store's presigned URL) and use it without Kubernetes credentials. Uploads stream:
//! the kube client only sends bodies it holds in memory, so a push goes through a client
//! built from the same configuration and layers (base URI, authentication, impersonation).

use std::io::Write;
use std::path::Path;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Frame;
use kube::client::{Body, ConfigExt};
use kube::core::Status;
use sha2::{Digest, Sha256};

use super::api_error;
use crate::api::data::{
    AgentExecutionResults, CONTENT_SUBRESOURCE, DATA_API_VERSION, DownloadLink,
    EXECUTIONS_RESOURCE, FILESETS_RESOURCE, FilesetContent, LINK_CONTENT_TYPE, RESULTS_SUBRESOURCE,
    TAR_GZ_CONTENT_TYPE,
};
use crate::archive::ByteStream;
use crate::dataapi::link;
use crate::ops::{Error, ErrorCode};
use crate::store::keys::{AnyResult, ResultName};

/// The data API of one cluster, for one namespace.
pub struct DataApi {
    client: kube::Client,
    config: kube::Config,
    namespace: String,
}

impl DataApi {
    /// The data API reached with `client` (made from `config`) in `namespace`.
    pub fn new(client: kube::Client, config: kube::Config, namespace: String) -> Self {
        Self {
            client,
            config,
            namespace,
        }
    }

    fn path(&self, resource: &str, name: &str, rest: &[&str]) -> String {
        let mut path = format!(
            "/apis/{DATA_API_VERSION}/namespaces/{}/{resource}/{name}",
            self.namespace
        );
        for part in rest {
            path.push('/');
            path.push_str(part);
        }
        path
    }

    /// The results of execution `name` saved so far.
    pub async fn results(&self, name: &str) -> Result<AgentExecutionResults, Error> {
        let path = self.path(EXECUTIONS_RESOURCE, name, &[RESULTS_SUBRESOURCE]);
        let request = Request::get(path)
            .body(Vec::new())
            .expect("a valid request");
        self.client.request(request).await.map_err(api_error)
    }

    /// The bytes of a small result (a JSON record).
    pub async fn result_bytes(&self, name: &str, result: ResultName) -> Result<Vec<u8>, Error> {
        let path = self.path(
            EXECUTIONS_RESOURCE,
            name,
            &[RESULTS_SUBRESOURCE, result.as_str()],
        );
        let request = Request::get(path)
            .body(Vec::new())
            .expect("a valid request");
        let text = self.client.request_text(request).await.map_err(api_error)?;
        Ok(text.into_bytes())
    }

    /// Downloads result `result` of execution `name` into `file`, checking its bytes against
    /// the sha256 the server names in the `ETag`; returns the size. Asks for a link: when errand
    /// answers with one, the bytes come straight from the object store's presigned URL through
    /// a plain HTTP client (no Kubernetes credentials go there), and when that URL cannot be
    /// reached they stream through the API server; a store that gives no links streams them at once.
    pub async fn download(
        &self,
        name: &str,
        result: &AnyResult,
        file: &Path,
    ) -> Result<u64, Error> {
        let path = self.path(
            EXECUTIONS_RESOURCE,
            name,
            &[RESULTS_SUBRESOURCE, result.as_str()],
        );
        let what = format!("{} of execution {name}", result.as_str());
        let (parts, body) = self
            .get(&format!("{path}?{}=true", link::PARAMETER))
            .await?;
        let is_link = parts.status.is_success()
            && parts.headers.get(header::CONTENT_TYPE)
                == Some(&http::HeaderValue::from_static(LINK_CONTENT_TYPE));
        if !is_link {
            return save(&parts, body.into_data_stream(), &what, file).await;
        }
        let text = body.collect().await.map_err(|e| {
            Error::new(
                ErrorCode::ClusterError,
                format!("reading the link to {what}: {e}"),
            )
        })?;
        let link: DownloadLink = serde_json::from_slice(&text.to_bytes()).map_err(|e| {
            Error::new(
                ErrorCode::ClusterError,
                format!("errand's link to {what} is not a link: {e}"),
            )
        })?;
        match from_store(&link.url).await {
            Ok(response) if !response.status().is_success() => Err(Error::new(
                ErrorCode::StoreError,
                format!(
                    "the store answered {} to the signed URL errand gave for {what}",
                    response.status()
                ),
            )),
            // The sha256 is errand's, from the link's answer: the store's own ETag is not a digest.
            Ok(response) => save(&parts, response.bytes_stream(), &what, file).await,
            Err(e) if e.is_connect() => {
                eprintln!(
                    "errand: the store's signed URL for {what} cannot be reached ({}); \
                     downloading through the Kubernetes API server instead",
                    e.without_url()
                );
                let (parts, body) = self.get(&path).await?;
                save(&parts, body.into_data_stream(), &what, file).await
            }
            Err(e) => Err(Error::new(
                ErrorCode::StoreUnreachable,
                format!("downloading {what} from the store: {}", e.without_url()),
            )),
        }
    }

    /// The answer to a GET of `path` through the API server, its body still to be read.
    async fn get(&self, path: &str) -> Result<(http::response::Parts, Body), Error> {
        let request = Request::get(path)
            .body(Body::empty())
            .expect("a valid request");
        let response = self.client.send(request).await.map_err(api_error)?;
        Ok(response.into_parts())
    }

    /// Streams `body` (a `tar.gz`) as Fileset `name`'s new content and returns what the
    /// Fileset's status now records.
    pub async fn push(&self, name: &str, body: ByteStream) -> Result<FilesetContent, Error> {
        let path = self.path(FILESETS_RESOURCE, name, &[CONTENT_SUBRESOURCE]);
        let unreachable = |e: String| {
            Error::new(
                ErrorCode::ClusterUnreachable,
                format!("pushing Fileset {name:?}: {e}"),
            )
        };
        let request = Request::builder()
            .method(Method::PUT)
            .uri(path)
            .header(header::CONTENT_TYPE, TAR_GZ_CONTENT_TYPE)
            .body(
                http_body_util::StreamBody::new(body.map(|chunk| chunk.map(Frame::data)))
                    .boxed_unsync(),
            )
            .expect("a valid request");
        let (status, bytes) = send_streamed(&self.config, request)
            .await
            .map_err(unreachable)?;
        if !status.is_success() {
            return Err(refusal(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::new(
                ErrorCode::ClusterError,
                format!("the answer to pushing Fileset {name:?} is not a FilesetContent: {e}"),
            )
        })
    }
}

/// GETs a presigned store URL with a client of its own: no Kubernetes credentials, no
/// redirects (the URL names the object itself). The URL is never put into an error or log.
async fn from_store(url: &str) -> Result<reqwest::Response, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?
        .get(url)
        .send()
        .await
}

/// Writes `body` into `file`, checking its bytes against the sha256 errand's answer `parts`
/// names in the `ETag`; the size. A refusal in `parts` becomes the error it says.
async fn save<E: std::fmt::Display>(
    parts: &http::response::Parts,
    mut body: impl futures::Stream<Item = Result<Bytes, E>> + Unpin,
    what: &str,
    file: &Path,
) -> Result<u64, Error> {
    if !parts.status.is_success() {
        let mut bytes = Vec::new();
        while let Some(Ok(chunk)) = body.next().await {
            bytes.extend_from_slice(&chunk);
        }
        return Err(refusal(parts.status, &Bytes::from(bytes)));
    }
    let expected = parts
        .headers
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim_start_matches("W/").trim_matches('"').to_owned());
    let io_error =
        |e: std::io::Error| Error::new(ErrorCode::IoError, format!("{}: {e}", file.display()));
    let mut out = crate::ops::private::create_user_file(file).map_err(io_error)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk
            .map_err(|e| Error::new(ErrorCode::ClusterError, format!("reading {what}: {e}")))?;
        hasher.update(&chunk);
        out.write_all(&chunk).map_err(io_error)?;
        size += chunk.len() as u64;
    }
    out.sync_all().map_err(io_error)?;
    let actual = hex::encode(hasher.finalize());
    if let Some(expected) = expected.filter(|e| *e != actual) {
        return Err(Error::new(
            ErrorCode::CorruptDownload,
            format!(
                "{}: the {size} bytes received have sha256 {actual}, the server announced {expected}",
                file.display(),
            ),
        ));
    }
    Ok(size)
}

/// A request body streamed from a [`ByteStream`].
type UploadBody = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// The service that sends an upload: kube's connector and layers for `config` (base URI,
/// authentication, impersonation and other headers) around a client of streamed bodies.
type UploadService = tower::util::BoxService<
    Request<UploadBody>,
    http::Response<hyper::body::Incoming>,
    tower::BoxError,
>;

fn upload_service(config: &kube::Config) -> Result<UploadService, String> {
    let https = config.rustls_https_connector().map_err(|e| e.to_string())?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, UploadBody>(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(|e| e.to_string())?)
        .layer(config.extra_headers_layer().map_err(|e| e.to_string())?)
        .map_err(|e: hyper_util::client::legacy::Error| -> tower::BoxError { Box::new(e) })
        .service(client);
    Ok(tower::util::BoxService::new(service))
}

/// Sends `request` through [`upload_service`] and returns the answer's status and body.
async fn send_streamed(
    config: &kube::Config,
    request: Request<UploadBody>,
) -> Result<(StatusCode, Bytes), String> {
    use tower::ServiceExt;
    let service = upload_service(config)?;
    let response = service.oneshot(request).await.map_err(|e| e.to_string())?;
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((parts.status, bytes))
}

/// A refused request as a CLI error: the API server's (or errand's) `Status`, else the body.
fn refusal(code: StatusCode, body: &Bytes) -> Error {
    let status = serde_json::from_slice::<Status>(body).unwrap_or_else(|_| {
        let text = String::from_utf8_lossy(body).trim().to_owned();
        Status::failure(&text, "").with_code(code.as_u16())
    });
    api_error(kube::Error::Api(status.boxed()))
}

#[cfg(test)]
mod tests {
    //! The download against an API server answered in memory and a real HTTP store on loopback.

    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    const CONTENT: &[u8] = b"the bytes of output_workdir";

    /// A store on loopback answering every GET with [`CONTENT`]; what each request's head was.
    async fn store() -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/bucket/key?X-Amz-Signature=s",
            listener.local_addr().unwrap()
        );
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&heads);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.ends_with(b"\r\n\r\n") {
                    let n = socket.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    CONTENT.len()
                );
                socket.write_all(answer.as_bytes()).await.unwrap();
                socket.write_all(CONTENT).await.unwrap();
            }
        });
        (url, heads)
    }

    /// The data API client of an API server that answers a download asked with `link=true`
    /// with a link to `url` when there is one, any other with the bytes as `content_type`; the
    /// URIs it was asked.
    fn api(url: Option<String>, content_type: &'static str) -> (DataApi, Arc<Mutex<Vec<String>>>) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&asked);
        let etag = format!("\"{}\"", hex::encode(Sha256::digest(CONTENT)));
        let service = tower::service_fn(move |request: Request<Body>| {
            let uri = request.uri().to_string();
            seen.lock().unwrap().push(uri.clone());
            let response = http::Response::builder()
                .status(200)
                .header(header::ETAG, etag.as_str());
            let response = match &url {
                Some(url) if uri.ends_with("?link=true") => {
                    let link = DownloadLink {
                        url: url.clone(),
                        expires_at: jiff::Timestamp::now(),
                        size: CONTENT.len() as u64,
                    };
                    response
                        .header(header::CONTENT_TYPE, LINK_CONTENT_TYPE)
                        .body(Body::from(serde_json::to_vec(&link).unwrap()))
                }
                _ => response
                    .header(header::CONTENT_TYPE, content_type)
                    .body(Body::from(CONTENT.to_vec())),
            };
            async move { Ok::<_, std::convert::Infallible>(response.unwrap()) }
        });
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::new(service, "team-a");
        (DataApi::new(client, config, "team-a".to_owned()), asked)
    }

    const PATH: &str = "/apis/data.errand.dev/v1alpha1/namespaces/team-a/agentexecutions/calc/results/output_workdir";

    async fn download(api: &DataApi, file: &Path) -> Result<u64, Error> {
        let result = AnyResult::parse("output_workdir").unwrap();
        api.download("calc", &result, file).await
    }

    #[tokio::test]
    async fn a_link_is_read_from_the_store_without_kubernetes_credentials() {
        let (url, heads) = store().await;
        let (api, asked) = api(Some(url), TAR_GZ_CONTENT_TYPE);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out");
        assert_eq!(download(&api, &file).await.unwrap(), CONTENT.len() as u64);
        assert_eq!(std::fs::read(&file).unwrap(), CONTENT);
        assert_eq!(*asked.lock().unwrap(), [format!("{PATH}?link=true")]);
        let heads = heads.lock().unwrap();
        assert_eq!(heads.len(), 1);
        assert!(
            heads[0].starts_with("GET /bucket/key?X-Amz-Signature=s "),
            "{}",
            heads[0]
        );
        assert!(!heads[0].to_ascii_lowercase().contains("authorization"));
    }

    #[tokio::test]
    async fn an_unreachable_link_falls_back_to_streaming() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/bucket/key", closed.local_addr().unwrap());
        drop(closed);
        let (api, asked) = api(Some(url), TAR_GZ_CONTENT_TYPE);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out");
        assert_eq!(download(&api, &file).await.unwrap(), CONTENT.len() as u64);
        assert_eq!(std::fs::read(&file).unwrap(), CONTENT);
        assert_eq!(
            *asked.lock().unwrap(),
            [format!("{PATH}?link=true"), PATH.to_owned()]
        );
    }

    #[tokio::test]
    async fn a_store_without_links_streams_in_one_request_even_json() {
        let (api, asked) = api(None, crate::api::data::JSON_CONTENT_TYPE);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out");
        assert_eq!(download(&api, &file).await.unwrap(), CONTENT.len() as u64);
        assert_eq!(std::fs::read(&file).unwrap(), CONTENT);
        assert_eq!(*asked.lock().unwrap(), [format!("{PATH}?link=true")]);
    }
}
