//! errand's egress proxy's added latency: 1,000 small requests to a loopback HTTP server directly, through a CONNECT tunnel of the proxy and by the proxy's plain forwarding, and 1,000 chat completions to a stand-in model over TLS directly and through the proxy's model route (placeholder token checked, real key added), interleaved one for one so all see the same machine, with p50 and p99 of each and the proxy's against the target of 1.1 × direct + 1 ms.
//!
//! Each path keeps one connection (as an SDK's pooled client does): direct to the server, a
//! tunnel opened once with CONNECT, and a keep-alive connection to the proxy whose forwarded
//! requests each open a connection upstream. The caller is a pod at 127.0.0.1 listing the
//! server's name (resolved to the loopback server by a fixed resolver), under an outbound
//! policy that allows loopback back. No cluster is needed.
//!
//! `cargo bench --bench egress_proxy` (`REQUESTS=N` for another count).

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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use errand::api::contract::{
    EGRESS_HOSTS_ANNOTATION, EXECUTION_UID_LABEL, MODEL_ROUTES_ANNOTATION,
};
use errand::egress_proxy::loopback::{self, StandInModel, stand_in_model};
use errand::egress_proxy::model_route::{KeySource, ModelRoute};
use errand::resolve::run_tokens::RunTokens;

/// The name the caller lists and asks for.
const HOST: &str = "server.bench.errand.test";
/// The stand-in model's name (its certificate's).
const MODEL_HOST: &str = "model.bench.errand.test";
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

/// The model's key, as its Secret would hold it.
struct BenchKey;

impl KeySource for BenchKey {
    fn key(&self, _: &str, _: &str, _: &str) -> BoxFuture<'static, Option<String>> {
        Box::pin(async { Some("sk-bench".to_owned()) })
    }
}

/// A proxy whose one caller, a running errand pod at 127.0.0.1, lists [`HOST`] on the
/// target's port and has its model `default` proxied to `model` (trusting `model`'s CA).
async fn serve_proxy(target: SocketAddr, model: &StandInModel, tokens: &RunTokens) -> SocketAddr {
    let hosts = format!(r#"[{{"host":"{HOST}","ports":[{}]}}]"#, target.port());
    let routes = serde_json::json!([{"alias": "default",
        "baseUrl": format!("https://{MODEL_HOST}:{}/v1", model.address.port()),
        "env": "OPENAI_API_KEY", "secret": "openai", "key": "OPENAI_API_KEY"}]);
    let pod = loopback::running_pod(
        "bench",
        "bench",
        "127.0.0.1",
        &[(EXECUTION_UID_LABEL, "bench-uid")],
        &[
            (EGRESS_HOSTS_ANNOTATION, hosts),
            (MODEL_ROUTES_ANNOTATION, routes.to_string()),
        ],
    );
    let names = || {
        loopback::FixedNames(vec![
            (HOST.into(), target.ip()),
            (MODEL_HOST.into(), model.address.ip()),
        ])
    };
    let route = ModelRoute::new(
        tokens.clone(),
        Arc::new(BenchKey),
        loopback::loopback_policy(),
        Arc::new(names()),
        vec![reqwest::Certificate::from_pem(model.ca_pem.as_bytes()).unwrap()],
    );
    loopback::serve(vec![pod], names(), Some(route)).await
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
    let model = stand_in_model("127.0.0.1:0".parse().unwrap(), &[MODEL_HOST.to_owned()]).await;
    let tokens = RunTokens::models(b"a bench signing key of 32 bytes or more");
    let proxy = serve_proxy(target, &model, &tokens).await;
    let port = target.port();
    let mut direct = connection(TcpStream::connect(target).await.unwrap()).await;
    let mut tunneled = connection(tunnel(proxy, port).await).await;
    let mut forwarded = connection(TcpStream::connect(proxy).await.unwrap()).await;
    let absolute = format!("http://{HOST}:{port}/v1/chat/completions");
    // The model: an SDK's pooled HTTPS client straight to it, and a pooled HTTP client to the
    // proxy's model route (which keeps its own pool of TLS connections to the model).
    let model_direct = reqwest::Client::builder()
        .no_proxy()
        .resolve(MODEL_HOST, model.address)
        .add_root_certificate(reqwest::Certificate::from_pem(model.ca_pem.as_bytes()).unwrap())
        .build()
        .unwrap();
    let model_proxied = reqwest::Client::builder().no_proxy().build().unwrap();
    let direct_url = format!(
        "https://{MODEL_HOST}:{}/v1/chat/completions",
        model.address.port()
    );
    let route_url = format!("http://{proxy}/models/default/chat/completions");
    let token = tokens.mint("bench", "bench-uid");
    let (mut times_direct, mut times_tunnel, mut times_forward) = (vec![], vec![], vec![]);
    let (mut times_model, mut times_route) = (vec![], vec![]);
    for _ in 0..requests {
        times_direct.push(timed(&mut direct, "/v1/chat/completions", port).await);
        times_tunnel.push(timed(&mut tunneled, "/v1/chat/completions", port).await);
        times_forward.push(timed(&mut forwarded, &absolute, port).await);
        times_model.push(chat(model_direct.post(&direct_url).bearer_auth("sk-bench")).await);
        times_route.push(chat(model_proxied.post(&route_url).bearer_auth(&token)).await);
    }
    for times in [
        &mut times_direct,
        &mut times_tunnel,
        &mut times_forward,
        &mut times_model,
        &mut times_route,
    ] {
        times.sort();
    }
    println!("egress proxy: {requests} requests each, interleaved, to loopback servers");
    println!("path         p50        p99");
    let mut within = true;
    for (name, times, base) in [
        ("direct", &times_direct, None),
        ("tunnel", &times_tunnel, Some(&times_direct)),
        ("forward", &times_forward, Some(&times_direct)),
        ("model https", &times_model, None),
        ("model route", &times_route, Some(&times_model)),
    ] {
        let (p50, p99) = (quantile(times, 0.5), quantile(times, 0.99));
        print!("{name:<12} {p50:>9.1?} {p99:>9.1?}");
        if let Some(base) = base {
            for (q, base, via) in [
                ("p50", quantile(base, 0.5), p50),
                ("p99", quantile(base, 0.99), p99),
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
        "target (1.1 x the direct path + 1 ms): {}",
        if within { "met" } else { "MISSED" }
    );
}

/// One chat completion sent with `request`, timed to the body's end.
async fn chat(request: reqwest::RequestBuilder) -> Duration {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"12 * 8?"}]}"#;
    let started = Instant::now();
    let response = request
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), 200);
    response.bytes().await.expect("the body");
    started.elapsed()
}
