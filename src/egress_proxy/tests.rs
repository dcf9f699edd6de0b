//! The proxy's I/O shell on loopback: a listed name is reached by CONNECT and by forwarding (a streamed answer passes through chunk by chunk, without the proxy's own headers going upstream, also to a client that shut its write side after its request), and everything else is answered with a refusal.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodIP;
use kube::runtime::{reflector, watcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::api::contract::EGRESS_HOSTS_ANNOTATION;

const LISTED: &str = "api.example.test";

/// Resolves every name to `0` (the upstream), except `metadata.example.test`, which
/// resolves to the metadata address.
struct Fixed(SocketAddr);

impl Resolver for Fixed {
    fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> {
        let ip = if host == "metadata.example.test" {
            "169.254.169.254".parse().unwrap()
        } else {
            self.0.ip()
        };
        Box::pin(async move { Ok(vec![SocketAddr::new(ip, port)]) })
    }
}

/// An upstream that answers each connection's one request with its head echoed back,
/// streamed as two chunks a moment apart.
async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).replace("\r\n", "|");
                let first = format!("seen {head}\n");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{first}\r\n",
                    first.len()
                );
                stream.write_all(answer.as_bytes()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                stream.write_all(b"5\r\ndone\n\r\n0\r\n\r\n").await.unwrap();
            });
        }
    });
    address
}

/// A proxy whose one caller is a running pod at `caller_ip` listing [`LISTED`] and
/// `metadata.example.test` on `port`.
async fn proxy(caller_ip: &str, upstream: SocketAddr) -> SocketAddr {
    let mut pod = Pod::default();
    pod.metadata.name = Some("run".into());
    pod.metadata.namespace = Some("team".into());
    let hosts = format!(
        r#"[{{"host":"{LISTED}","ports":[{0}]}},{{"host":"metadata.example.test","ports":[{0}]}}]"#,
        upstream.port()
    );
    pod.metadata.annotations = Some(BTreeMap::from([(EGRESS_HOSTS_ANNOTATION.into(), hosts)]));
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some(caller_ip.into()),
        pod_ips: Some(vec![PodIP {
            ip: caller_ip.into(),
        }]),
        ..PodStatus::default()
    });
    let (pods, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Apply(pod));
    let policy = OutboundPolicy::default().allow("127.0.0.0/8".parse().unwrap());
    let proxy = EgressProxy::new(
        pods,
        Arc::new(policy),
        Arc::new(ProxyMetrics::default()),
        ServerLimits::DEFAULT,
    )
    .with_resolver(Arc::new(Fixed(upstream)));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    start(proxy, listener, ServerLimits::DEFAULT, &mut tasks);
    tasks.detach_all();
    address
}

/// Sends `request` to the proxy at `proxy`, shuts the write side as `nc` does, and reads
/// until the proxy closes (or 5 s pass).
async fn exchange(proxy: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_listed_name_is_reached_by_connect_and_by_forwarding_with_the_answer_streamed() {
    let upstream = upstream().await;
    let proxy = proxy("127.0.0.1", upstream).await;
    let port = upstream.port();

    let tunnel = exchange(
        proxy,
        &format!(
            "CONNECT {LISTED}:{port} HTTP/1.1\r\nHost: {LISTED}:{port}\r\n\r\n\
             GET /v1/models HTTP/1.1\r\nHost: {LISTED}\r\n\r\n"
        ),
    )
    .await;
    assert!(tunnel.starts_with("HTTP/1.1 200"), "{tunnel}");
    assert!(tunnel.contains("seen GET /v1/models HTTP/1.1|"), "{tunnel}");
    assert!(tunnel.contains("done"), "{tunnel}");

    let forwarded = exchange(
        proxy,
        &format!(
            "GET http://{LISTED}:{port}/v1/chat?stream=1 HTTP/1.0\r\nHost: {LISTED}:{port}\r\n\
             Proxy-Authorization: Basic c2VjcmV0\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(forwarded.starts_with("HTTP/1.0 200"), "{forwarded}");
    assert!(
        forwarded.contains("seen GET /v1/chat?stream=1 HTTP/1.0|"),
        "origin form upstream: {forwarded}"
    );
    assert!(
        !forwarded
            .to_ascii_lowercase()
            .contains("proxy-authorization"),
        "the proxy's own header stays with the proxy: {forwarded}"
    );
    assert!(forwarded.contains("done"), "both chunks pass: {forwarded}");
}

#[tokio::test]
async fn everything_else_is_answered_with_a_refusal_that_says_why() {
    let upstream = upstream().await;
    let port = upstream.port();
    let proxy_for_us = proxy("127.0.0.1", upstream).await;
    let proxy_for_another = proxy("10.1.2.3", upstream).await;
    let connect =
        |authority: String| format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    for (proxy, request, status, says) in [
        (
            proxy_for_another,
            connect(format!("{LISTED}:{port}")),
            "403",
            "serves only the pods of runs",
        ),
        (
            proxy_for_us,
            connect(format!("other.example.test:{port}")),
            "403",
            "not in this run's egress.hosts",
        ),
        (
            proxy_for_us,
            connect(format!("{LISTED}:{}", port.wrapping_add(1).max(1))),
            "403",
            "not in this run's egress.hosts",
        ),
        (
            proxy_for_us,
            connect(format!("127.0.0.1:{port}")),
            "403",
            "reaches host names only",
        ),
        (
            proxy_for_us,
            connect(format!("metadata.example.test:{port}")),
            "403",
            "resolves only to addresses runs may not reach",
        ),
        (
            proxy_for_us,
            "GET /relative HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(),
            "400",
            "not a proxy request",
        ),
    ] {
        let answer = exchange(proxy, &request).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")) && answer.contains(says),
            "{request:?}: {answer}"
        );
    }
}
