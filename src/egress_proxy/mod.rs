//! errand's egress proxy: the one way an agent pod whose egress is denied reaches host names. It serves HTTP CONNECT and plain `http://` forwarding, knows the caller by its source address from a cache of errand's pods, allows only the host names that run lists, and connects only to addresses the outbound policy allows. Every decision is logged and counted.
//!
//! The pure decisions are in [`decide`]. The proxy answers only pods of runs: the chart's
//! NetworkPolicy admits only errand's agent pods to its port, and any other caller is refused
//! here too, since no running errand pod has its address.

pub mod decide;
pub mod loopback;
pub mod model_route;

use model_route::ModelRoute;

pub use crate::outbound::resolver::{NameserverResolver, Resolver, SystemResolver};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::runtime::reflector::Store;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, info};

use crate::cluster::listener::{self, RequestBody, ServerLimits};
use crate::cluster::metrics::MetricsRegistry;
use crate::outbound::OutboundPolicy;
use crate::outbound::client::judge;
use decide::{Caller, Refusal, Target};

/// How long connecting to a target may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The answer's body: a refusal's line or the target's answer.
pub(crate) type ProxyBody = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Label of the decisions counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `allowed`, or the refusal's [`Refusal::label`].
    pub decision: String,
}

/// The proxy's metrics.
#[derive(Default)]
pub struct ProxyMetrics {
    decisions: Family<DecisionLabels, Counter>,
}

impl ProxyMetrics {
    /// Puts them on `registry`.
    pub fn register(&self, registry: &mut MetricsRegistry) {
        registry.register(
            "egress_proxy_decisions",
            "Requests errand's egress proxy allowed or refused, by decision",
            self.decisions.clone(),
        );
    }

    fn decided(&self, decision: &str) {
        self.decisions
            .get_or_create(&DecisionLabels {
                decision: decision.to_owned(),
            })
            .inc();
    }
}

/// Keeps of a pod only what the proxy reads: identity, annotations, phase and addresses.
pub fn trim_pod(pod: &mut Pod) {
    pod.spec = None;
    pod.metadata.managed_fields = None;
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        pod_ip: status.pod_ip,
        pod_ips: status.pod_ips,
        ..PodStatus::default()
    });
}

/// The proxy: errand's running pods, the policy every address is held to, the metrics.
pub struct EgressProxy {
    /// errand's pods (the managed ones), trimmed by [`trim_pod`].
    pods: Store<Pod>,
    /// The outbound policy.
    policy: Arc<OutboundPolicy>,
    /// Its metrics.
    metrics: Arc<ProxyMetrics>,
    /// Where host names are resolved.
    resolver: Arc<dyn Resolver>,
    /// Tunnels open at once, at most (an upgraded connection leaves the listener's count).
    tunnels: Arc<Semaphore>,
    /// The model route (`None`: no signing key, so no run has proxied models).
    models: Option<ModelRoute>,
}

impl EgressProxy {
    /// A proxy over these pods, policy and metrics, with at most `limits.max_connections`
    /// tunnels at once.
    pub fn new(
        pods: Store<Pod>,
        policy: Arc<OutboundPolicy>,
        metrics: Arc<ProxyMetrics>,
        limits: ServerLimits,
    ) -> Self {
        Self {
            pods,
            policy,
            metrics,
            resolver: Arc::new(SystemResolver),
            tunnels: Arc::new(Semaphore::new(limits.max_connections)),
            models: None,
        }
    }

    /// The same proxy carrying runs' model calls on `route`.
    pub fn with_model_route(self, route: ModelRoute) -> Self {
        Self {
            models: Some(route),
            ..self
        }
    }

    /// The same proxy resolving names with `resolver` (a nameserver of its own, or a test's
    /// fixed names).
    pub fn with_resolver(self, resolver: Arc<dyn Resolver>) -> Self {
        Self { resolver, ..self }
    }
    /// Decides `request` from `peer`, logs and counts the decision, and carries it out.
    async fn answer(&self, peer: SocketAddr, request: Request<RequestBody>) -> Response<ProxyBody> {
        let caller = decide::caller(self.pods.state().iter().map(|p| &**p), peer.ip());
        if decide::is_model_request(request.method(), request.uri()) {
            return self.answer_model(peer, caller, request).await;
        }
        let target = decide::target(request.method(), request.uri());
        let outcome = match (&caller, &target) {
            (Err(refusal), _) | (_, Err(refusal)) => Err(refusal.clone()),
            (Ok(caller), Ok(target)) => match decide::decide(caller, target) {
                Ok(()) => self.connect(target).await,
                Err(refusal) => Err(refusal),
            },
        };
        let who = caller.as_ref().map_or("-", |c| c.pod.as_str());
        let target = target.ok();
        let (host, port) = target
            .as_ref()
            .map_or(("-", 0), |t| (t.host.as_str(), t.port));
        let decision = outcome.as_ref().err().map_or("allowed", Refusal::label);
        info!(%peer, caller = who, host, port, method = %request.method(), decision, "egress proxy");
        self.metrics.decided(decision);
        match outcome {
            Ok(stream) => self.carry(request, stream).await,
            Err(refusal) => refused(&refusal, target.as_ref()),
        }
    }

    /// Decides a call on the model route, logs and counts the decision, and carries it out.
    async fn answer_model(
        &self,
        peer: SocketAddr,
        caller: Result<Caller, Refusal>,
        request: Request<RequestBody>,
    ) -> Response<ProxyBody> {
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok());
        let call = match (&caller, &self.models) {
            (Err(refusal), _) => Err(refusal.clone()),
            (Ok(_), None) => Err(Refusal::UnknownModel),
            (Ok(caller), Some(route)) => {
                decide::model_call(caller, &path, authorization, &route.tokens)
                    .map(|call| (call, route, &caller.namespace))
            }
        };
        let outcome = match &call {
            Ok((call, route, namespace)) => route.carry(namespace, call, request).await,
            Err(refusal) => Err(refusal.clone()),
        };
        let who = caller.as_ref().map_or("-", |c| c.pod.as_str());
        let model = call
            .as_ref()
            .map_or("-", |(c, _, _)| c.model.alias.as_str());
        let decision = outcome
            .as_ref()
            .err()
            .map_or("model_allowed", Refusal::label);
        info!(%peer, caller = who, model, decision, "egress proxy model route");
        self.metrics.decided(decision);
        outcome.unwrap_or_else(|refusal| refused(&refusal, None))
    }

    /// A connection to one of `target`'s addresses the policy allows.
    async fn connect(&self, target: &Target) -> Result<TcpStream, Refusal> {
        let resolved = match self.resolver.resolve(&target.host, target.port).await {
            Ok(addresses) => addresses,
            Err(e) => {
                debug!(host = %target.host, "resolving: {e}");
                return Err(Refusal::Unreachable);
            }
        };
        let (allowed, denied) = judge(&self.policy, &resolved);
        if allowed.is_empty() {
            debug!(host = %target.host, ?denied, "every address is denied");
            return Err(Refusal::DeniedAddress);
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&allowed[..])).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                Ok(stream)
            }
            Ok(Err(e)) => {
                debug!(host = %target.host, "connecting: {e}");
                Err(Refusal::Unreachable)
            }
            Err(_) => Err(Refusal::Unreachable),
        }
    }

    /// Carries an allowed request over `stream`: a CONNECT becomes a tunnel once the client
    /// has the 200; a plain request is forwarded in origin form and its answer returned.
    async fn carry(&self, request: Request<RequestBody>, stream: TcpStream) -> Response<ProxyBody> {
        if request.method() == Method::CONNECT {
            let Ok(permit) = Arc::clone(&self.tunnels).try_acquire_owned() else {
                return answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the egress proxy has as many tunnels open as it may; try again",
                );
            };
            tokio::spawn(async move {
                let upgraded = match hyper::upgrade::on(request).await {
                    Ok(upgraded) => upgraded,
                    Err(e) => {
                        debug!("upgrading a CONNECT: {e}");
                        return;
                    }
                };
                let mut client = TokioIo::new(upgraded);
                let mut stream = stream;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut stream).await;
                drop(permit);
            });
            return Response::new(empty());
        }
        match forward(request, stream).await {
            Ok(response) => response.map(|body| body.map_err(Into::into).boxed()),
            Err(e) => {
                debug!("forwarding: {e}");
                refused(&Refusal::Unreachable, None)
            }
        }
    }
}

/// Serves the proxy on `listener` until the task set is dropped.
pub fn start(
    proxy: EgressProxy,
    listener: TcpListener,
    limits: ServerLimits,
    tasks: &mut tokio::task::JoinSet<()>,
) {
    let proxy = Arc::new(proxy);
    tasks.spawn(listener::serve(
        listener,
        None,
        limits,
        "egress proxy",
        move |peer: listener::Peer| {
            let proxy = Arc::clone(&proxy);
            hyper::service::service_fn(move |request| {
                let proxy = Arc::clone(&proxy);
                async move { Ok::<_, Infallible>(proxy.answer(peer.address, request).await) }
            })
        },
    ));
}

/// Sends `request` over `stream` in origin form, without the proxy's own headers.
async fn forward(
    mut request: Request<RequestBody>,
    stream: TcpStream,
) -> Result<Response<Incoming>, hyper::Error> {
    let origin = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .expect("a path and query is a URI");
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    *request.uri_mut() = origin;
    let headers = request.headers_mut();
    for name in ["proxy-authorization", "proxy-connection", "keep-alive"] {
        headers.remove(name);
    }
    if let Some(authority) = authority.and_then(|a| HeaderValue::from_str(&a).ok()) {
        headers.insert(header::HOST, authority);
    }
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            debug!("a forwarded connection: {e}");
        }
    });
    sender.send_request(request).await
}

fn empty() -> ProxyBody {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed()
}

fn answer(status: StatusCode, line: &str) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(format!("{line}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The answer to a refused request, closing the connection: after a refused CONNECT the
/// client's next bytes were meant for the tunnel.
fn refused(refusal: &Refusal, target: Option<&Target>) -> Response<ProxyBody> {
    let mut response = answer(refusal.status(), &refusal.message(target));
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests;
