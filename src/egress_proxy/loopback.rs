//! The egress proxy on loopback, for its tests and its benchmark: one running caller pod at a given address with the annotations its run would carry, names resolved to fixed addresses, and an outbound policy that allows loopback back.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Pod, PodIP, PodStatus};
use kube::runtime::{reflector, watcher};
use tokio::net::TcpListener;

use super::model_route::ModelRoute;
use super::{EgressProxy, ProxyMetrics, Resolver, start};
use crate::cluster::listener::ServerLimits;
use crate::outbound::OutboundPolicy;

/// Resolves each listed name to its address, and any other to nothing.
pub struct FixedNames(pub Vec<(String, IpAddr)>);

impl Resolver for FixedNames {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        let found: Vec<SocketAddr> = self
            .0
            .iter()
            .filter(|(name, _)| name == host)
            .map(|(_, ip)| SocketAddr::new(*ip, port))
            .collect();
        Box::pin(async move { Ok(found) })
    }
}

/// A running pod `namespace/name` at `ip` with `labels` and `annotations`.
pub fn running_pod(
    namespace: &str,
    name: &str,
    ip: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, String)],
) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.to_owned());
    pod.metadata.namespace = Some(namespace.to_owned());
    pod.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    pod.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    );
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some(ip.to_owned()),
        pod_ips: Some(vec![PodIP { ip: ip.to_owned() }]),
        ..PodStatus::default()
    });
    pod
}

/// The loopback policy: the default denials, with 127.0.0.0/8 allowed back.
pub fn loopback_policy() -> Arc<OutboundPolicy> {
    Arc::new(OutboundPolicy::default().allow("127.0.0.0/8".parse().expect("a CIDR")))
}

/// Serves a proxy on a loopback port whose pods are `pods`, resolving with `names` under
/// [`loopback_policy`], with `model_route` when given; returns its address. It serves as long
/// as the runtime runs.
pub async fn serve(
    pods: Vec<Pod>,
    names: FixedNames,
    model_route: Option<ModelRoute>,
) -> SocketAddr {
    let (store, mut writer) = reflector::store();
    for pod in pods {
        writer.apply_watcher_event(&watcher::Event::Apply(pod));
    }
    let mut proxy = EgressProxy::new(
        store,
        loopback_policy(),
        Arc::new(ProxyMetrics::default()),
        ServerLimits::DEFAULT,
    )
    .with_resolver(Arc::new(names));
    if let Some(route) = model_route {
        proxy = proxy.with_model_route(route);
    }
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("a bound address");
    let mut tasks = tokio::task::JoinSet::new();
    start(proxy, listener, ServerLimits::DEFAULT, &mut tasks);
    tasks.detach_all();
    address
}

/// A stand-in OpenAI-compatible model server over TLS (a model provider is what these
/// machines cannot reach): its address, the CA its certificate is signed by, and the
/// `Authorization` header of every request it was sent.
pub struct StandInModel {
    /// Where it listens.
    pub address: SocketAddr,
    /// Its CA (PEM), for the model route to trust.
    pub ca_pem: String,
    /// The `Authorization` header of each request, in order.
    pub seen: Arc<std::sync::Mutex<Vec<String>>>,
}

/// The answer of a chat completion that does not stream, and the pieces of one that does.
pub const STAND_IN_ANSWER: &str = "96";

/// Serves a [`StandInModel`] at `bind` (port 0: any) with a certificate for `names` (an
/// address among them becomes an IP SAN). `POST …/chat/completions` answers
/// [`STAND_IN_ANSWER`], as server-sent events one character each when the body asks to
/// stream.
pub async fn stand_in_model(bind: SocketAddr, names: &[String]) -> StandInModel {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::Frame;

    let material =
        crate::cluster::serving::certs::generate(names, jiff::Timestamp::now()).expect("a cert");
    let certificate = Arc::new(crate::cluster::serving::tls::ServingCertificate::default());
    certificate
        .load_pem(&material.cert_pem, &material.key_pem)
        .expect("the generated certificate loads");
    let acceptor = crate::cluster::serving::tls::acceptor(certificate).expect("a TLS acceptor");
    let listener = TcpListener::bind(bind).await.expect("the stand-in's port");
    let address = listener.local_addr().expect("a bound address");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let recorded = Arc::clone(&recorded);
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let recorded = Arc::clone(&recorded);
                        async move {
                            let authorization = request
                                .headers()
                                .get(hyper::header::AUTHORIZATION)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_owned();
                            recorded.lock().expect("not poisoned").push(authorization);
                            let body = request.into_body().collect().await?.to_bytes();
                            let body = String::from_utf8_lossy(&body);
                            let streamed = body.contains("\"stream\":true")
                                || body.contains("\"stream\": true");
                            let response = if streamed {
                                let events: Vec<Result<Frame<Bytes>, std::io::Error>> =
                                STAND_IN_ANSWER
                                    .chars()
                                    .map(|c| {
                                        let chunk = serde_json::json!({
                                            "id": "stand-in", "object": "chat.completion.chunk",
                                            "created": 0, "model": "stand-in",
                                            "choices": [{"index": 0, "delta": {"content": c.to_string()},
                                                         "finish_reason": null}],
                                        });
                                        format!("data: {chunk}\n\n")
                                    })
                                    .chain(std::iter::once("data: [DONE]\n\n".to_owned()))
                                    .map(|event| Ok(Frame::data(Bytes::from(event))))
                                    .collect();
                                hyper::Response::builder()
                                    .header("content-type", "text/event-stream")
                                    .body(StreamBody::new(futures::stream::iter(events)).boxed())
                            } else {
                                let answer = serde_json::json!({
                                    "id": "stand-in", "object": "chat.completion", "created": 0,
                                    "model": "stand-in",
                                    "choices": [{"index": 0, "finish_reason": "stop",
                                                 "message": {"role": "assistant", "content": STAND_IN_ANSWER}}],
                                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                                });
                                hyper::Response::builder()
                                    .header("content-type", "application/json")
                                    .body(
                                        Full::new(Bytes::from(answer.to_string()))
                                            .map_err(|never| match never {})
                                            .boxed(),
                                    )
                            };
                            Ok::<_, hyper::Error>(response.expect("a response builds"))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    StandInModel {
        address,
        ca_pem: material.ca_pem,
        seen,
    }
}
