//! The limits every errand server holds to ([`errand::cluster::listener`]), over real sockets: a slowloris client is cut off after the header-read timeout, an idle kept-alive connection too, and past the connection cap a new connection gets 503.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use errand::cluster::listener::ServerLimits;
use errand::serve::http::{Probes, serve};

const LIMITS: ServerLimits = ServerLimits {
    header_read_timeout: Duration::from_secs(1),
    handshake_timeout: Duration::from_secs(1),
    max_connections: 2,
};

/// The controller's HTTP endpoint (probes, metrics) served within [`LIMITS`]; its address.
async fn server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let probes = Probes {
        ready: Arc::new(AtomicBool::new(true)),
        metrics: Arc::new(String::new),
        grants: None,
        blobs: None,
    };
    tokio::spawn(serve(listener, LIMITS, probes));
    address
}

/// Everything the server sends until it closes the connection (or 5 s pass).
async fn read_until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server kept the connection open");
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test]
async fn a_slowloris_client_is_cut_off_after_the_header_read_timeout() {
    let address = server().await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .unwrap();
    let (answer, after) = read_until_closed(&mut stream).await;
    assert_eq!(answer, "", "closed without an answer");
    assert!(after < Duration::from_secs(3), "{after:?}");
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let address = server().await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (answer, after) = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(after < Duration::from_secs(3), "{after:?}");
}

#[tokio::test]
async fn past_the_connection_cap_a_client_gets_503() {
    let address = server().await;
    let _held = [
        TcpStream::connect(address).await.unwrap(),
        TcpStream::connect(address).await.unwrap(),
    ];
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut third = TcpStream::connect(address).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = read_until_closed(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(
        answer.to_lowercase().contains("retry-after: 1"),
        "{answer:?}"
    );
    // Once the held connections time out, there is room again.
    drop(_held);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut again = TcpStream::connect(address).await.unwrap();
    again
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let (answer, _) = read_until_closed(&mut again).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}
