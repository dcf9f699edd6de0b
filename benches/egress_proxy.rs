//! errand's egress proxy's added latency: 1,000 small requests to a loopback HTTP server directly, through a CONNECT tunnel of the proxy and by the proxy's plain forwarding, interleaved one for one so all three see the same machine, with p50 and p99 of each and the proxy's against the target of 1.1 × direct + 1 ms.
//!
//! Each path keeps one connection (as an SDK's pooled client does): direct to the server, a
//! tunnel opened once with CONNECT, and a keep-alive connection to the proxy whose forwarded
//! requests each open a connection upstream. The caller is a pod at 127.0.0.1 listing the
//! server's name (resolved to the loopback server by a fixed resolver), under an outbound
//! policy that allows loopback back. No cluster is needed.
//!
//! `cargo bench --bench egress_proxy` (`REQUESTS=N` for another count).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Pod, PodIP, PodStatus};
use kube::runtime::{reflector, watcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use errand::api::contract::EGRESS_HOSTS_ANNOTATION;
use errand::cluster::listener::ServerLimits;
use errand::egress_proxy::{self, EgressProxy, ProxyMetrics, Resolver};
use errand::outbound::OutboundPolicy;

/// The name the caller lists and asks for.
const HOST: &str = "model.bench.errand.test";
/// The target: the proxy's added time is at most this ratio of the direct time...
const RATIO_LIMIT: f64 = 1.1;
/// ...plus this.
const ADDED_LIMIT: Duration = Duration::from_millis(1);

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("egress proxy benchmark: skipped outside `cargo bench --bench egress_proxy`");
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(bench());
}

/// Resolves [`HOST`] to the server.
struct Fixed(SocketAddr);

impl Resolver for Fixed {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        let found = (host == HOST).then(|| SocketAddr::new(self.0.ip(), port));
        Box::pin(async move { Ok(found.into_iter().collect()) })
    }
}

/// A server answering every request with a small JSON body.
async fn serve_target() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                        br#"{"choices":[{"message":{"content":"pong"}}]}"#,
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// The caller: a running errand pod at 127.0.0.1 whose run lists [`HOST`] on `port`.
fn caller_pod(port: u16) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some("bench".into());
    pod.metadata.namespace = Some("bench".into());
    let hosts = format!(r#"[{{"host":"{HOST}","ports":[{port}]}}]"#);
    pod.metadata.annotations = Some(BTreeMap::from([(EGRESS_HOSTS_ANNOTATION.into(), hosts)]));
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("127.0.0.1".into()),
        pod_ips: Some(vec![PodIP {
            ip: "127.0.0.1".into(),
        }]),
        ..PodStatus::default()
    });
    pod
}

async fn serve_proxy(target: SocketAddr) -> SocketAddr {
    let (pods, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Apply(caller_pod(target.port())));
    let policy = OutboundPolicy::default().allow("127.0.0.0/8".parse().unwrap());
    let proxy = EgressProxy::new(
        pods,
        Arc::new(policy),
        Arc::new(ProxyMetrics::default()),
        ServerLimits::DEFAULT,
    )
    .with_resolver(Arc::new(Fixed(target)));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    egress_proxy::start(proxy, listener, ServerLimits::DEFAULT, &mut tasks);
    // The tasks live as long as the process.
    std::mem::forget(tasks);
    address
}

/// An HTTP/1 connection over `stream`.
async fn connection(stream: TcpStream) -> SendRequest<Empty<Bytes>> {
    stream.set_nodelay(true).unwrap();
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    sender
}

/// A tunnel to [`HOST`] through the proxy at `proxy`, with the CONNECT's answer read.
async fn tunnel(proxy: SocketAddr, port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    let connect = format!("CONNECT {HOST}:{port} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n");
    stream.write_all(connect.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0];
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    stream
}

/// One GET of `uri` on `sender`, timed to the body's end.
async fn timed(sender: &mut SendRequest<Empty<Bytes>>, uri: &str, port: u16) -> Duration {
    let request = Request::get(uri)
        .header("host", format!("{HOST}:{port}"))
        .body(Empty::new())
        .unwrap();
    sender.ready().await.expect("the connection stays open");
    let started = Instant::now();
    let response = sender.send_request(request).await.expect("an answer");
    assert_eq!(response.status(), 200, "{uri}");
    response.into_body().collect().await.expect("the body");
    started.elapsed()
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

async fn bench() {
    let requests: usize = std::env::var("REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let target = serve_target().await;
    let proxy = serve_proxy(target).await;
    let port = target.port();
    let mut direct = connection(TcpStream::connect(target).await.unwrap()).await;
    let mut tunneled = connection(tunnel(proxy, port).await).await;
    let mut forwarded = connection(TcpStream::connect(proxy).await.unwrap()).await;
    let absolute = format!("http://{HOST}:{port}/v1/chat/completions");
    let (mut times_direct, mut times_tunnel, mut times_forward) = (vec![], vec![], vec![]);
    for _ in 0..requests {
        times_direct.push(timed(&mut direct, "/v1/chat/completions", port).await);
        times_tunnel.push(timed(&mut tunneled, "/v1/chat/completions", port).await);
        times_forward.push(timed(&mut forwarded, &absolute, port).await);
    }
    for times in [&mut times_direct, &mut times_tunnel, &mut times_forward] {
        times.sort();
    }
    println!("egress proxy: {requests} requests each, interleaved, to a loopback server");
    println!("path       p50        p99");
    let mut within = true;
    for (name, times) in [
        ("direct", &times_direct),
        ("tunnel", &times_tunnel),
        ("forward", &times_forward),
    ] {
        let (p50, p99) = (quantile(times, 0.5), quantile(times, 0.99));
        print!("{name:<10} {p50:>9.1?} {p99:>9.1?}");
        if name != "direct" {
            for (q, base, via) in [
                ("p50", quantile(&times_direct, 0.5), p50),
                ("p99", quantile(&times_direct, 0.99), p99),
            ] {
                let ratio = via.as_secs_f64() / base.as_secs_f64();
                let limit = base.mul_f64(RATIO_LIMIT) + ADDED_LIMIT;
                within &= via <= limit;
                print!(
                    "   {q} {ratio:.2}x (+{:.1?}; limit {limit:.1?})",
                    via.saturating_sub(base)
                );
            }
        }
        println!();
    }
    println!(
        "target (1.1 x direct + 1 ms): {}",
        if within { "met" } else { "MISSED" }
    );
}
