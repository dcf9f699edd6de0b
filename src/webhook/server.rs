//! The webhook's HTTPS endpoint: reads an AdmissionReview, resolves a create against the live objects, answers with the verdict.

use crate::cluster::listener::{self, RequestBody, ServerLimits};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use kube::Client;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::info;

use super::metrics::AdmissionMetrics;
use super::review::{self, Step, Verdict};
use crate::api::AgentExecutionSpec;
use crate::cluster::ApiError;
use crate::cluster::catalog::{self, ClusterCatalog};
use crate::cluster::serving::caller as serving_caller;
use crate::resolve::{InvalidSpec, RunLimits, Snapshot};

/// The path the ValidatingWebhookConfiguration's AgentExecution webhook points at.
pub const VALIDATE_PATH: &str = "/validate-agentexecution";
/// The path its AgentDeployment webhook points at (the same review: the request names its kind).
pub const VALIDATE_DEPLOYMENT_PATH: &str = "/validate-agentdeployment";
/// The path its AgentSchedule webhook points at (the review tells the kinds apart).
pub const VALIDATE_SCHEDULE_PATH: &str = "/validate-agentschedule";
/// The path its AgentExtension webhook points at (the review tells the kinds apart).
pub const VALIDATE_EXTENSION_PATH: &str = "/validate-agentextension";

/// Largest request body read: an AdmissionReview holds the object twice at most, and an
/// object is at most 1.5 MiB in etcd.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How long the lookups of one review may take. Below the configuration's `timeoutSeconds`
/// (5 by default), so the user sees this webhook's own message rather than a timeout.
const LOOKUP_BUDGET: Duration = Duration::from_secs(3);

/// Resolves an execution's spec against the objects it names.
pub trait Resolver: Send + Sync {
    /// The spec's snapshot or its problems; `Err` when the lookups themselves failed.
    fn resolve<'a>(
        &'a self,
        namespace: &'a str,
        spec: &'a AgentExecutionSpec,
    ) -> BoxFuture<'a, Result<Result<Snapshot, InvalidSpec>, ApiError>>;
}

/// Resolution against the controller's caches and the API server.
pub struct ClusterResolver {
    /// The API client (Secrets and cache misses are read with it).
    pub client: Client,
    /// The controller's caches.
    pub catalog: ClusterCatalog,
}

impl Resolver for ClusterResolver {
    fn resolve<'a>(
        &'a self,
        namespace: &'a str,
        spec: &'a AgentExecutionSpec,
    ) -> BoxFuture<'a, Result<Result<Snapshot, InvalidSpec>, ApiError>> {
        Box::pin(catalog::resolve(
            &self.client,
            &self.catalog,
            namespace,
            spec,
        ))
    }
}

/// Everything a review needs.
pub struct Admission {
    /// Resolves creates.
    pub resolver: Box<dyn Resolver>,
    /// Counts and times reviews.
    pub metrics: Arc<AdmissionMetrics>,
    /// What the cluster allows a run: a run its store's signed URLs cannot serve is refused.
    pub limits: RunLimits,
    /// The token the API server's paths end with (`None`: the plain paths are answered).
    pub path_token: Option<String>,
}

impl Admission {
    /// Reviews one AdmissionReview body and returns the AdmissionReview to answer with.
    pub async fn review(&self, body: &[u8]) -> Vec<u8> {
        let started = Instant::now();
        let (answer, label) = match review::parse(body) {
            Err(error) => (review::unreadable(&error), "unreadable"),
            Ok(request) => {
                let verdict = match review::step(&request) {
                    Step::Decided(verdict) => verdict,
                    Step::Resolve {
                        kind,
                        namespace,
                        spec,
                    } => {
                        let resolution = tokio::time::timeout(
                            LOOKUP_BUDGET,
                            self.resolver.resolve(&namespace, &spec),
                        )
                        .await;
                        match resolution {
                            Ok(Ok(resolution)) => {
                                review::verdict(kind, &spec, resolution, &self.limits)
                            }
                            Ok(Err(error)) => Verdict::Unavailable(error.to_string()),
                            Err(_) => Verdict::Unavailable(format!(
                                "the lookups took longer than {}s",
                                LOOKUP_BUDGET.as_secs()
                            )),
                        }
                    }
                };
                let label = verdict_label(&verdict);
                if !matches!(verdict, Verdict::Allow) {
                    info!(
                        namespace = request.namespace.as_deref().unwrap_or_default(),
                        name = %request.name,
                        operation = ?request.operation,
                        verdict = label,
                        kind = %request.kind.kind,
                        "refused an object"
                    );
                }
                (review::respond(&request, verdict), label)
            }
        };
        self.metrics
            .reviewed(label, started.elapsed().as_secs_f64());
        serde_json::to_vec(&answer).expect("an AdmissionReview serializes")
    }
}

fn verdict_label(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Allow => "allowed",
        Verdict::Invalid(_) => "invalid",
        Verdict::Malformed(_) => "malformed",
        Verdict::Unavailable(_) => "unavailable",
    }
}

type Body = Full<Bytes>;

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from_static(text.as_bytes())))
        .expect("a static response is valid")
}

/// Who a request is for, from its path alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Caller {
    /// The API server: a review path with the token, or a plain one when there is no token.
    ApiServer,
    /// A review path without the right token: no review is made, so nothing about any object
    /// can be learned from the answer.
    Unauthenticated,
    /// Not a path the webhook serves.
    Unknown,
}

/// Tells the API server from other callers by `path` ([`crate::cluster::serving::caller`]).
pub fn caller(path: &str, token: Option<&str>) -> Caller {
    let paths = [
        VALIDATE_PATH,
        VALIDATE_DEPLOYMENT_PATH,
        VALIDATE_SCHEDULE_PATH,
        VALIDATE_EXTENSION_PATH,
    ];
    let Some(base) = paths.into_iter().find(|base| {
        path == *base
            || path
                .strip_prefix(*base)
                .is_some_and(|rest| rest.starts_with('/'))
    }) else {
        return Caller::Unknown;
    };
    match token {
        None if path == base => Caller::ApiServer,
        Some(token) if serving_caller::is_authenticated(path, base, token) => Caller::ApiServer,
        _ => Caller::Unauthenticated,
    }
}

/// Answers one HTTP request.
async fn route(admission: &Admission, request: Request<RequestBody>) -> Response<Body> {
    match caller(request.uri().path(), admission.path_token.as_deref()) {
        Caller::ApiServer => {}
        Caller::Unauthenticated => {
            return plain(
                StatusCode::FORBIDDEN,
                "admission reviews are answered for the API server only, on the path of the \
                 webhook configuration\n",
            );
        }
        Caller::Unknown => return plain(StatusCode::NOT_FOUND, "not found\n"),
    }
    if request.method() != Method::POST {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "POST an AdmissionReview\n");
    }
    let body = match listener::read_body(request.into_body(), MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(_) => return plain(StatusCode::PAYLOAD_TOO_LARGE, "body too large or cut off\n"),
    };
    Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(admission.review(&body).await)))
        .expect("a JSON response is valid")
}

/// Serves the webhook over TLS on `listener` within `limits` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    limits: ServerLimits,
    admission: Arc<Admission>,
) {
    listener::serve(listener, Some(acceptor), limits, "webhook", move |_| {
        let admission = Arc::clone(&admission);
        service_fn(move |request: Request<RequestBody>| {
            let admission = Arc::clone(&admission);
            async move { Ok::<_, Infallible>(route(&admission, request).await) }
        })
    })
    .await;
}
