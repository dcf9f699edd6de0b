//! One request, start to finish: who asks (the front proxy's word), what is asked (the route), whether they may (a SubjectAccessReview), and the answer: a listing, a download streamed from the store, or an upload vetted on its way in.

use std::io;
use std::sync::Arc;

use futures::TryStreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Body, Bytes, Frame};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tracing::{debug, info};

pub mod upload;

use super::authn::{self, UserInfo};
use super::authz;
use super::discovery;
use super::frontproxy::FrontProxy;
use super::link::{self, Delivery};
use super::objects::{Authorizer, Objects};
use super::ranges::{self, Asked, Plan};
use super::results;
use super::route::{self, Action, ObjectRequest, Route};
use super::status::{Refusal, Subject};
use crate::api::data::{
    AgentExecutionResults, CONTENT_KIND, DATA_API_VERSION, DownloadLink, EXECUTIONS_RESOURCE,
    FILESETS_RESOURCE, FilesetContent, LINK_CONTENT_TYPE, TAR_GZ_CONTENT_TYPE,
};
use crate::api::{AgentExecution, Fileset};
use crate::cluster::ApiError;
use crate::cluster::scope::Namespaces;
use crate::store::grants::{Access, UrlSigner};
use crate::store::keys::{self, ExecutionId};
use crate::store::{Store, StoreError};
use upload::UploadLimits;

/// The body of every response.
pub type ResponseBody = UnsyncBoxBody<Bytes, io::Error>;

/// Everything a request needs.
pub struct DataApi {
    /// Executions and Filesets.
    pub objects: Box<dyn Objects>,
    /// The cluster's authorizer.
    pub authorizer: Box<dyn Authorizer>,
    /// Where results and Fileset content are.
    pub store: Store,
    /// Who the front proxy is.
    pub front_proxy: Arc<FrontProxy>,
    /// What an upload may be.
    pub limits: UploadLimits,
    /// The namespaces served (those errand reconciles).
    pub namespaces: Namespaces,
    /// Orders the status writes of concurrent pushes to one Fileset.
    pub(super) commits: upload::CommitLocks,
    /// The signer of presigned URLs meant for clients, when downloads that ask may get a link
    /// to the store ([`link`]); `None`: every download streams.
    links: Option<Arc<dyn UrlSigner>>,
}

impl DataApi {
    /// The server over these parts.
    pub fn new(
        objects: Box<dyn Objects>,
        authorizer: Box<dyn Authorizer>,
        store: Store,
        front_proxy: Arc<FrontProxy>,
        limits: UploadLimits,
        namespaces: Namespaces,
    ) -> Self {
        DataApi {
            objects,
            authorizer,
            store,
            front_proxy,
            limits,
            namespaces,
            commits: upload::CommitLocks::default(),
            links: None,
        }
    }

    /// The same server, answering downloads that ask with `link=true` with a link: a URL
    /// `store` presigns, when its URLs are meant for clients (s3://, gs://, az://); a `file://`
    /// store's URLs point inside the cluster, so its downloads keep streaming.
    pub fn linking_to(self, store: &Store) -> Self {
        DataApi {
            links: store
                .presigned_signer()
                .map(|signer| Arc::new(signer) as Arc<dyn UrlSigner>),
            ..self
        }
    }

    /// Answers one request that came with a TLS client certificate the front-proxy CA
    /// verified, whose common name is `common_name` (`None`: no such certificate).
    pub async fn handle<B>(
        &self,
        request: Request<B>,
        common_name: Option<&str>,
    ) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let method = request.method().as_str().to_owned();
        let path = request.uri().path().to_owned();
        let answer = self.answer(request, common_name).await;
        let response = answer.unwrap_or_else(|refusal| {
            if refusal.code >= 500 {
                info!(%method, %path, code = refusal.code, message = refusal.status.message.as_deref().unwrap_or_default(), "data API request failed");
            }
            refusal_response(&refusal)
        });
        debug!(%method, %path, code = response.status().as_u16(), "data API request");
        response
    }

    async fn answer<B>(
        &self,
        request: Request<B>,
        common_name: Option<&str>,
    ) -> Result<Response<ResponseBody>, Refusal>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let config = self.front_proxy.config().ok_or_else(|| {
            Refusal::unavailable("errand has not read the front proxy's CA yet; try again shortly")
        })?;
        let user = authn::authenticate(&config, common_name, request.headers())
            .map_err(|e| Refusal::unauthorized(format!("Unauthorized: {e}")))?;
        let route = route::route(request.method().as_str(), request.uri().path())?;
        let object = match route {
            Route::Discovery(which) => {
                return Ok(bytes_response(
                    StatusCode::OK,
                    "application/json",
                    discovery::document(which),
                ));
            }
            Route::Object(object) => object,
        };
        self.authorize(&user, &object).await?;
        if !self.namespaces.serves(&object.namespace) {
            return Err(Refusal::not_found(
                subject(&object),
                format!(
                    "errand serves namespaces {} only, not {:?}",
                    self.namespaces, object.namespace
                ),
            ));
        }
        match &object.action {
            Action::ListResults { .. } => {
                let (_, listing) = self.listing(&object).await?;
                Ok(json_response(StatusCode::OK, &listing))
            }
            Action::GetResult(result) => {
                let asked = link::asked(request.uri().query())?;
                self.get_result(&object, result, asked, request.headers())
                    .await
            }
            Action::DescribeContent => {
                let fileset = self.fileset(&object).await?;
                Ok(json_response(StatusCode::OK, &content_of(&fileset)))
            }
            Action::GetContent => {
                let asked = link::asked(request.uri().query())?;
                let fileset = self.fileset(&object).await?;
                self.get_content(&object, &fileset, asked, request.headers())
                    .await
            }
            Action::PutContent => {
                let fileset = self.fileset(&object).await?;
                let content = upload::put_content(self, &object, &fileset, request).await?;
                Ok(json_response(StatusCode::OK, &content))
            }
        }
    }

    async fn authorize(&self, user: &UserInfo, object: &ObjectRequest) -> Result<(), Refusal> {
        let attributes = object.attributes();
        let verdict = self
            .authorizer
            .review(authz::access_review(user, &attributes))
            .await
            .map_err(|e| Refusal::internal(format!("checking authorization: {e}")))?;
        authz::decide(user, &attributes, &verdict).inspect_err(|_| {
            info!(
                user = %user.username,
                verb = attributes.verb,
                resource = %attributes.resource_path(),
                namespace = %attributes.namespace,
                name = %attributes.name,
                "data API request forbidden"
            );
        })
    }

    async fn execution(&self, object: &ObjectRequest) -> Result<AgentExecution, Refusal> {
        let read = self
            .objects
            .execution(&object.namespace, &object.name)
            .await;
        found(read, object, || {
            format!(
                "AgentExecution {:?} not found in namespace {:?}",
                object.name, object.namespace
            )
        })
    }

    pub(super) async fn fileset(&self, object: &ObjectRequest) -> Result<Fileset, Refusal> {
        let read = self.objects.fileset(&object.namespace, &object.name).await;
        found(read, object, || {
            format!(
                "Fileset {:?} not found in namespace {:?}; create it first \
                 (`errand filesets push` does)",
                object.name, object.namespace
            )
        })
    }

    /// The execution and its results: recorded ones once it has ended, else what the store
    /// holds so far.
    async fn listing(
        &self,
        object: &ObjectRequest,
    ) -> Result<(AgentExecution, AgentExecutionResults), Refusal> {
        let execution = self.execution(object).await?;
        let stored = if results::is_complete(&execution) {
            Vec::new()
        } else {
            let id = execution_id(&execution, object);
            let prefix = keys::results_prefix(&id).map_err(|e| Refusal::internal(e.to_string()))?;
            self.store
                .list(&prefix)
                .await
                .map_err(|e| Refusal::internal(format!("listing the results: {e}")))?
        };
        let listing = results::listing(&execution, &stored);
        Ok((execution, listing))
    }

    async fn get_result(
        &self,
        object: &ObjectRequest,
        result: &str,
        link: bool,
        headers: &HeaderMap,
    ) -> Result<Response<ResponseBody>, Refusal> {
        let (execution, listing) = self.listing(object).await?;
        let (item, name) = results::find(&listing, result)?;
        let key = keys::result(&execution_id(&execution, object), name)
            .map_err(|e| Refusal::internal(e.to_string()))?;
        let download = Download {
            key: &key,
            size: item.size,
            tag: item.sha256.as_deref().map(ranges::etag),
            content_type: &item.content_type,
            file_name: name.file_name(),
            head: object.head,
            link,
        };
        self.send(download, headers).await
    }

    async fn get_content(
        &self,
        object: &ObjectRequest,
        fileset: &Fileset,
        link: bool,
        headers: &HeaderMap,
    ) -> Result<Response<ResponseBody>, Refusal> {
        let status = fileset.status.clone().unwrap_or_default();
        let (Some(digest), Some(size)) = (status.digest.as_deref(), status.size) else {
            return Err(Refusal::not_found(
                subject(object),
                format!(
                    "Fileset {:?} has no content yet; push some with `errand filesets push {} DIR`",
                    object.name, object.name
                ),
            ));
        };
        let sha256 = digest.strip_prefix("sha256:").unwrap_or(digest);
        let key = keys::fileset(&object.namespace, sha256)
            .map_err(|e| Refusal::internal(e.to_string()))?;
        let download = Download {
            key: &key,
            size,
            tag: Some(ranges::etag(sha256)),
            content_type: TAR_GZ_CONTENT_TYPE,
            file_name: format!("{}.tar.gz", object.name),
            head: object.head,
            link,
        };
        self.send(download, headers).await
    }

    /// Streams the object (or the asked-for range of it) from the store.
    async fn send(
        &self,
        download: Download<'_>,
        headers: &HeaderMap,
    ) -> Result<Response<ResponseBody>, Refusal> {
        let header = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
        let asked = Asked {
            if_none_match: header(header::IF_NONE_MATCH),
            range: header(header::RANGE),
            if_range: header(header::IF_RANGE),
        };
        let size = download.size;
        let (status, range) = match ranges::plan(size, download.tag.as_deref(), asked) {
            Plan::NotModified => (StatusCode::NOT_MODIFIED, None),
            Plan::Full => (StatusCode::OK, Some(0..size)),
            Plan::Partial { start, end } => (StatusCode::PARTIAL_CONTENT, Some(start..end + 1)),
            Plan::Unsatisfiable => {
                let mut response = refusal_response(&Refusal::range_not_satisfiable(size));
                if let Some(value) = header_value(&format!("bytes */{size}")) {
                    response.headers_mut().insert(header::CONTENT_RANGE, value);
                }
                return Ok(response);
            }
        };
        let mut builder = Response::builder()
            .status(status)
            .header(header::ACCEPT_RANGES, "bytes");
        if let Some(tag) = download.tag.as_deref().and_then(header_value) {
            builder = builder.header(header::ETAG, tag);
        }
        let Some(range) = range.filter(|_| status != StatusCode::NOT_MODIFIED) else {
            return Ok(builder.body(empty()).expect("a response from valid parts"));
        };
        if let (Delivery::Link, Some(signer)) = (
            link::delivery(download.link, download.head, self.links.is_some()),
            &self.links,
        ) {
            // The link is to the whole object: a client sends its Range to the store itself.
            let link = presigned_get(signer.as_ref(), download.key, size).await?;
            let body = serde_json::to_vec(&link).expect("a link serializes");
            return Ok(builder
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, LINK_CONTENT_TYPE)
                // The URL is a bearer credential: no cache keeps it.
                .header(header::CACHE_CONTROL, "no-store")
                .header(header::CONTENT_LENGTH, body.len())
                .body(full(body))
                .expect("a response from valid parts"));
        }
        builder = builder
            .header(header::CONTENT_TYPE, download.content_type)
            .header(header::CONTENT_LENGTH, range.end - range.start)
            .header(header::CONTENT_DISPOSITION, attachment(&download.file_name));
        if status == StatusCode::PARTIAL_CONTENT {
            let value = format!("bytes {}-{}/{size}", range.start, range.end - 1);
            builder = builder.header(header::CONTENT_RANGE, value);
        }
        if download.head || range.is_empty() {
            return Ok(builder.body(empty()).expect("a response from valid parts"));
        }
        let whole = range.start == 0 && range.end == size;
        let stream = self
            .store
            .get_range(download.key, (!whole).then_some(range))
            .await
            .map_err(|e| match e {
                StoreError::NotFound { key } => {
                    Refusal::internal(format!("{key} is recorded but missing from the store"))
                }
                e => Refusal::internal(format!("reading from the store: {e}")),
            })?;
        let body = StreamBody::new(stream.map_ok(Frame::data));
        Ok(builder
            .body(UnsyncBoxBody::new(body))
            .expect("a response from valid parts"))
    }
}

/// One object to send.
struct Download<'a> {
    key: &'a str,
    size: u64,
    tag: Option<String>,
    content_type: &'a str,
    file_name: String,
    head: bool,
    /// The client asked for a link to the store.
    link: bool,
}

/// A link to `key` (`size` bytes): its presigned GET URL, lasting [`link::lifetime_seconds`].
/// Never logged: the URL is a bearer credential for the object.
async fn presigned_get(
    signer: &dyn UrlSigner,
    key: &str,
    size: u64,
) -> Result<DownloadLink, Refusal> {
    let lifetime = link::lifetime_seconds(signer.max_lifetime_seconds());
    let expires_at = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(lifetime);
    let url = signer
        .sign(Access::Get, key, expires_at)
        .await
        .map_err(|e| Refusal::internal(format!("presigning the link: {e}")))?;
    Ok(DownloadLink {
        url,
        expires_at,
        size,
    })
}

/// The object `read` found, a 404 about `object` saying `missing` when there is none, or a 500
/// when the read failed.
pub(super) fn found<T>(
    read: Result<Option<T>, ApiError>,
    object: &ObjectRequest,
    missing: impl FnOnce() -> String,
) -> Result<T, Refusal> {
    read.map_err(|e| Refusal::internal(e.to_string()))?
        .ok_or_else(|| Refusal::not_found(subject(object), missing()))
}

/// What a refusal about `object` names.
pub(super) fn subject(object: &ObjectRequest) -> Subject<'_> {
    let resource = match object.action {
        Action::ListResults { .. } | Action::GetResult(_) => EXECUTIONS_RESOURCE,
        Action::DescribeContent | Action::GetContent | Action::PutContent => FILESETS_RESOURCE,
    };
    Subject {
        resource,
        name: &object.name,
    }
}

fn execution_id(execution: &AgentExecution, object: &ObjectRequest) -> ExecutionId {
    ExecutionId {
        namespace: object.namespace.clone(),
        name: object.name.clone(),
        uid: execution.metadata.uid.clone().unwrap_or_default(),
    }
}

/// The content record of a Fileset.
pub(super) fn content_of(fileset: &Fileset) -> FilesetContent {
    FilesetContent {
        api_version: DATA_API_VERSION.to_owned(),
        kind: CONTENT_KIND.to_owned(),
        metadata: ObjectMeta {
            name: fileset.metadata.name.clone(),
            namespace: fileset.metadata.namespace.clone(),
            uid: fileset.metadata.uid.clone(),
            creation_timestamp: fileset.metadata.creation_timestamp.clone(),
            ..ObjectMeta::default()
        },
        content: fileset.status.clone().unwrap_or_default(),
    }
}

/// `text` as a header value; `None` when it cannot be one (a control character in a digest
/// or file name a run's status carries, which a pod wrote): the header is left out, the
/// connection goes on.
fn header_value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

/// A `Content-Disposition` for `file_name`, its quotes, backslashes and control characters
/// replaced, so that any name gives a valid header.
fn attachment(file_name: &str) -> HeaderValue {
    let safe: String = file_name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    header_value(&format!("attachment; filename=\"{safe}\""))
        .unwrap_or_else(|| HeaderValue::from_static("attachment"))
}

fn empty() -> ResponseBody {
    UnsyncBoxBody::new(Empty::new().map_err(|never| match never {}))
}

fn full(body: Vec<u8>) -> ResponseBody {
    UnsyncBoxBody::new(Full::new(Bytes::from(body)).map_err(|never| match never {}))
}

fn bytes_response(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<ResponseBody> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(full(body))
        .expect("a response from valid parts")
}

fn json_response(status: StatusCode, value: &impl serde::Serialize) -> Response<ResponseBody> {
    let body = serde_json::to_vec(value).expect("the data API's objects serialize");
    bytes_response(status, "application/json", body)
}

/// The refusal as a response with its `Status` body.
pub fn refusal_response(refusal: &Refusal) -> Response<ResponseBody> {
    let status = StatusCode::from_u16(refusal.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    bytes_response(status, "application/json", refusal.body())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forged_digest_or_file_name_gives_no_header_and_no_panic() {
        assert_eq!(header_value("\"abc\nX-Injected: 1\""), None);
        assert_eq!(
            header_value("\"abc\""),
            Some(HeaderValue::from_static("\"abc\""))
        );
        assert_eq!(
            attachment("run\r\n\"x\\y.tar.gz"),
            HeaderValue::from_static("attachment; filename=\"run___x_y.tar.gz\"")
        );
        assert_eq!(
            attachment("ünïcode"),
            HeaderValue::from_static("attachment; filename=\"_n_code\"")
        );
    }
}
