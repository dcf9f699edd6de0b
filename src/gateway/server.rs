//! The gateway's HTTP(S) endpoint: authorizes each request, picks a ready pod of the deployment it names and passes the request on, streaming the answer back; chat turns go through the session store.

use crate::cluster::listener::{self, RequestBody, ServerLimits, bearer_token};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures::TryStreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use kube::ResourceExt;
use kube::runtime::reflector::Store as Cache;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::auth::Authorizer;
use super::pick;
use super::refusal::Refusal;
use super::requests;
use super::route::{self, Action, NoRoute, Route, Target};
use super::sessions::{SessionScope, Sessions, Turn, messages};
use crate::api::AgentDeployment;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The largest request body read: chat histories are sent whole by OpenAI clients.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// The largest `/chat` answer read from an agent server (it is read whole, to keep the turn).
pub const MAX_CHAT_ANSWER_BYTES: usize = 4 * 1024 * 1024;

type Body = BoxBody<Bytes, std::io::Error>;

/// Where the gateway finds deployments and the agent servers ready to answer for them: the
/// cluster's cached objects, or the local backend's records.
pub trait Directory: Send + Sync {
    /// The deployments of `namespace`.
    fn deployments(&self, namespace: &str) -> Vec<Arc<AgentDeployment>>;
    /// The addresses of the agent servers of `deployment` that are ready now.
    fn ready_endpoints(&self, namespace: &str, deployment: &AgentDeployment) -> Vec<SocketAddr>;
}

/// The cluster's directory: AgentDeployments and the EndpointSlices of their Services, cached.
pub struct ClusterDirectory {
    /// The AgentDeployments, cached.
    pub deployments: Cache<AgentDeployment>,
    /// The EndpointSlices of errand's Services, cached.
    pub slices: Cache<EndpointSlice>,
}

impl Directory for ClusterDirectory {
    fn deployments(&self, namespace: &str) -> Vec<Arc<AgentDeployment>> {
        self.deployments
            .state()
            .into_iter()
            .filter(|d| d.namespace().as_deref() == Some(namespace))
            .collect()
    }

    fn ready_endpoints(&self, namespace: &str, deployment: &AgentDeployment) -> Vec<SocketAddr> {
        let service = crate::api::contract::deployment_service_name(&deployment.name_any());
        let slices: Vec<Arc<EndpointSlice>> = self
            .slices
            .state()
            .into_iter()
            .filter(|s| s.namespace().as_deref() == Some(namespace))
            .collect();
        pick::ready_endpoints(&service, &slices)
    }
}

/// Everything a request needs.
pub struct Gateway {
    /// Decides who may invoke what.
    pub authorizer: Box<dyn Authorizer>,
    /// Where deployments and their ready agent servers are found.
    pub directory: Box<dyn Directory>,
    /// Where chat sessions are kept.
    pub sessions: Sessions,
    /// The client requests go on with (pooled connections to the pods).
    pub client: reqwest::Client,
    /// Spreads requests over a deployment's ready pods.
    pub next: AtomicUsize,
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn json_response(status: u16, value: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(serde_json::to_vec(value).expect("JSON serializes")))
        .expect("a JSON response is valid")
}

fn refused(refusal: &Refusal) -> Response<Body> {
    Response::builder()
        .status(refusal.status)
        .header("content-type", "application/json")
        .body(full(refusal.body()))
        .expect("a refusal is a valid response")
}

impl Gateway {
    /// Answers one request.
    pub async fn answer(&self, request: Request<RequestBody>) -> Response<Body> {
        match self.serve(request).await {
            Ok(response) => response,
            Err(refusal) => refused(&refusal),
        }
    }

    async fn serve(&self, request: Request<RequestBody>) -> Result<Response<Body>, Refusal> {
        let route = route::route(request.method(), request.uri().path()).map_err(|e| match e {
            NoRoute::NotFound => Refusal::new(
                404,
                "NotFound",
                format!("no such path: {}", request.uri().path()),
            ),
            NoRoute::Method(allowed) => {
                Refusal::new(405, "MethodNotAllowed", format!("use {allowed}"))
            }
        })?;
        let token = bearer_token(request.headers());
        let name = match &route.target {
            Target::Deployment(name) => Some(name.as_str()),
            Target::Agent(_) => None,
        };
        let caller = self
            .authorizer
            .authorize(token.as_deref(), &route.namespace, name)
            .await?;
        let deployment = self.deployment(&route)?;
        let deployment_name = deployment.name_any();
        // The caller's own sessions with this deployment (this one, not an earlier one of the
        // same name).
        let scope = SessionScope::new(
            &route.namespace,
            deployment
                .metadata
                .uid
                .as_deref()
                .unwrap_or(&deployment_name),
            &caller,
        );
        match &route.action {
            Action::Sessions => {
                let sessions = self.sessions.list(&scope).await?;
                return Ok(json_response(
                    200,
                    &json!({"deployment": deployment_name, "sessions": sessions}),
                ));
            }
            Action::Session(session) => {
                requests::session_name(session)?;
                let turns = self.sessions.history(&scope, session).await?;
                // Another caller's session is one this caller does not have: the same 404 as
                // a name never used, so its existence does not show.
                if turns.is_empty() {
                    return Err(Refusal::new(
                        404,
                        "NotFound",
                        format!("no session {session:?} of AgentDeployment {deployment_name:?}"),
                    ));
                }
                return Ok(json_response(
                    200,
                    &json!({"deployment": deployment_name, "session": session, "turns": turns}),
                ));
            }
            Action::Models => {
                let model = model_of(&route, &deployment);
                return Ok(json_response(
                    200,
                    &json!({"object": "list", "data": [model]}),
                ));
            }
            Action::Model(id) => {
                let model = model_of(&route, &deployment);
                if model["id"] != id.as_str() {
                    return Err(Refusal::new(
                        404,
                        "ModelNotFound",
                        format!(
                            "the model {id:?} does not exist here: this endpoint serves {}",
                            model["id"]
                        ),
                    ));
                }
                return Ok(json_response(200, &model));
            }
            _ => {}
        }
        let body = listener::read_body(request.into_body(), MAX_BODY_BYTES)
            .await
            .map_err(|e| {
                Refusal::new(
                    413,
                    "TooLarge",
                    format!("the body is over {MAX_BODY_BYTES} bytes or was cut off: {e}"),
                )
            })?;
        let pod = self.pod(&route.namespace, &deployment)?;
        match route.action {
            Action::Invoke => {
                requests::invoke(&body)?;
                self.pass(pod, "/invoke", body).await
            }
            Action::ChatCompletions => {
                requests::chat_completions(&body)?;
                self.pass(pod, "/v1/chat/completions", body).await
            }
            Action::Chat => self.chat(&scope, &deployment_name, pod, &body).await,
            Action::Sessions | Action::Session(_) | Action::Models | Action::Model(_) => {
                unreachable!("answered above")
            }
        }
    }

    fn deployment(&self, route: &Route) -> Result<Arc<AgentDeployment>, Refusal> {
        let in_namespace = self.directory.deployments(&route.namespace);
        let picked = pick::deployment(&route.namespace, &route.target, &in_namespace)?;
        Ok(in_namespace
            .iter()
            .find(|d| d.name_any() == picked.name_any())
            .cloned()
            .expect("picked from the list"))
    }

    fn pod(&self, namespace: &str, deployment: &AgentDeployment) -> Result<SocketAddr, Refusal> {
        let ready = self.directory.ready_endpoints(namespace, deployment);
        if ready.is_empty() {
            return Err(Refusal::new(
                503,
                "NotReady",
                format!(
                    "AgentDeployment {:?} has no ready pod right now",
                    deployment.name_any()
                ),
            ));
        }
        Ok(ready[self.next.fetch_add(1, Ordering::Relaxed) % ready.len()])
    }

    /// POSTs the JSON `body` to `path` of the pod; 502 when it does not answer or answers a
    /// redirect (never followed, and its body and `Location` never passed on).
    async fn send(
        &self,
        pod: SocketAddr,
        path: &str,
        body: Bytes,
    ) -> Result<reqwest::Response, Refusal> {
        self.client
            .post(format!("http://{pod}{path}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| {
                tracing::warn!(%pod, path, error = %e, "agent server did not answer");
                Refusal::new(
                    502,
                    "BadGateway",
                    format!("the agent server did not answer: {}", upstream_failure(&e)),
                )
            })
            .and_then(refuse_redirect)
    }

    /// Sends `body` to `path` of the pod and streams its answer back as it comes (server-sent
    /// events included).
    async fn pass(
        &self,
        pod: SocketAddr,
        path: &str,
        body: Bytes,
    ) -> Result<Response<Body>, Refusal> {
        let upstream = self.send(pod, path, body).await?;
        let mut response = Response::builder().status(upstream.status().as_u16());
        if let Some(content_type) = upstream.headers().get("content-type") {
            response = response.header("content-type", content_type);
        }
        let stream = upstream
            .bytes_stream()
            .map_ok(Frame::data)
            .map_err(std::io::Error::other);
        Ok(response
            .body(BodyExt::boxed(StreamBody::new(stream)))
            .expect("a proxied response is valid"))
    }

    /// One turn of a named session: the history from the store, the agent's answer, the turn
    /// stored.
    async fn chat(
        &self,
        scope: &SessionScope,
        deployment: &str,
        pod: SocketAddr,
        body: &[u8],
    ) -> Result<Response<Body>, Refusal> {
        let turn = requests::chat_turn(body)?;
        let history = self.sessions.history(scope, &turn.session).await?;
        // A full session is refused before the agent spends anything on the turn.
        self.sessions
            .limits()
            .room_for_a_turn(&turn.session, history.len())?;
        let request = json!({"messages": messages(&history, &turn.message)});
        let upstream = self
            .send(pod, "/chat", Bytes::from(request.to_string()))
            .await?;
        let status = upstream.status();
        let bad = |e: String| {
            Refusal::new(
                502,
                "BadGateway",
                format!("the agent server's /chat answer is not JSON: {e}"),
            )
        };
        let bytes = read_bounded(upstream, MAX_CHAT_ANSWER_BYTES).await?;
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if !status.is_success() {
            return Ok(json_response(status.as_u16(), &answer));
        }
        let Some(content) = answer.pointer("/message/content").and_then(Value::as_str) else {
            return Err(Refusal::new(
                502,
                "BadGateway",
                "the agent server's /chat answer has no message.content",
            ));
        };
        let stored = Turn {
            user: turn.message,
            assistant: content.to_owned(),
            at: jiff::Timestamp::now().to_string(),
        };
        self.sessions
            .record(scope, &turn.session, history.len(), &stored)
            .await?;
        Ok(json_response(
            StatusCode::OK.as_u16(),
            &json!({
                "deployment": deployment,
                "session": turn.session,
                "turn": history.len() + 1,
                "message": {"role": "assistant", "content": content},
            }),
        ))
    }
}

/// The one model an OpenAI client finds at the route's base URL, in OpenAI's shape: named as
/// the path names it (the deployment, or the agent whose active deployment answers), created
/// when the deployment was, owned by its namespace.
fn model_of(route: &Route, deployment: &AgentDeployment) -> Value {
    let id = match &route.target {
        Target::Deployment(name) | Target::Agent(name) => name,
    };
    let created = deployment
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    json!({"id": id, "object": "model", "created": created, "owned_by": route.namespace})
}

/// What went wrong with an agent server, as the caller sees it: the class only. The error's
/// own text names the pod's address and the URL, which the caller is not told (the gateway's
/// log has them).
fn upstream_failure(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "it timed out"
    } else if error.is_connect() {
        "no connection could be made to it"
    } else if error.is_body() || error.is_decode() {
        "its answer broke off"
    } else {
        "the connection to it failed"
    }
}

/// An agent server's answer, unless it is a redirect: that is a 502 that names the status only.
fn refuse_redirect(upstream: reqwest::Response) -> Result<reqwest::Response, Refusal> {
    let status = upstream.status();
    if status.is_redirection() {
        return Err(Refusal::new(
            502,
            "BadGateway",
            format!(
                "the agent server answered a redirect (HTTP {}); the gateway does not follow \
                 redirects: the agent server must answer the request itself",
                status.as_u16()
            ),
        ));
    }
    Ok(upstream)
}

/// The whole body of `upstream`, or a 502 once it passes `max` bytes.
async fn read_bounded(upstream: reqwest::Response, max: usize) -> Result<Vec<u8>, Refusal> {
    let mut stream = upstream.bytes_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.try_next().await.map_err(|e| {
        Refusal::new(
            502,
            "BadGateway",
            format!(
                "reading the agent server's /chat answer: {}",
                upstream_failure(&e)
            ),
        )
    })? {
        if bytes.len() + chunk.len() > max {
            return Err(Refusal::new(
                502,
                "BadGateway",
                format!("the agent server's /chat answer is over {max} bytes"),
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Serves the gateway on `listener` (with TLS when `acceptor` is given) within `limits` until
/// the task is dropped.
pub async fn serve(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    limits: ServerLimits,
    gateway: Arc<Gateway>,
) {
    listener::serve(listener, acceptor, limits, "gateway", move |_| {
        let gateway = Arc::clone(&gateway);
        service_fn(move |request: Request<RequestBody>| {
            let gateway = Arc::clone(&gateway);
            async move { Ok::<_, Infallible>(gateway.answer(request).await) }
        })
    })
    .await;
}
