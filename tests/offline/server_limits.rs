//! The limits every errand server holds to ([`errand::cluster::listener`]), over real sockets: a slowloris client is cut off after the header-read timeout, an idle kept-alive connection too, a body that stops after its head is cut off after the body idle timeout (while one that trickles in within it is served), and past the connection cap a new connection gets 503.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use jiff::Timestamp;

use errand::cluster::listener::ServerLimits;
use errand::serve::blobs::BlobEndpoint;
use errand::serve::http::{Probes, serve};
use errand::store::Store;
use errand::store::grants::{Access, HmacSigner, UrlSigner};

const LIMITS: ServerLimits = ServerLimits {
    header_read_timeout: Duration::from_secs(1),
    handshake_timeout: Duration::from_secs(1),
    body_idle_timeout: Duration::from_secs(1),
    max_connections: 2,
};

/// The controller's HTTP endpoint (probes, metrics) served within [`LIMITS`]; its address.
async fn server() -> std::net::SocketAddr {
    serving(None).await
}

/// [`server`], also serving the blob endpoint of `blobs` when given.
async fn serving(blobs: Option<BlobEndpoint>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let probes = Probes {
        ready: Arc::new(AtomicBool::new(true)),
        metrics: Arc::new(String::new),
        grants: None,
        run_ended: None,
        blobs: blobs.map(Arc::new),
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

/// A connection to `address` that has sent the head of a signed PUT of 10 bytes to `key`.
async fn start_put(address: std::net::SocketAddr, signer: &HmacSigner, key: &str) -> TcpStream {
    let expires = Timestamp::now() + jiff::SignedDuration::from_secs(600);
    let url = signer.sign(Access::Put, key, expires).await.unwrap();
    let target = url.trim_start_matches("http://errand");
    let mut stream = TcpStream::connect(address).await.unwrap();
    let head = format!("PUT {target} HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

#[tokio::test]
async fn a_body_that_stops_is_cut_off_and_one_that_trickles_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&format!("file://{}", dir.path().display())).unwrap();
    let signer = Arc::new(HmacSigner::new(
        "http://errand",
        b"limits-key-0123456789abcdef",
    ));
    let address = serving(Some(BlobEndpoint::new(store.clone(), signer.clone()))).await;
    // The head and half the body, then nothing: cut off after the body idle timeout.
    let key = "results/team/run/0000/run_result";
    let mut stream = start_put(address, &signer, key).await;
    stream.write_all(b"12345").await.unwrap();
    let (answer, after) = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    assert!(answer.contains("nothing is kept"), "{answer:?}");
    assert!(after < Duration::from_secs(3), "{after:?}");
    assert!(
        !store.exists(key).await.unwrap(),
        "a cut-off upload is kept"
    );

    // A byte every half timeout: slow, but never idle for the timeout, so it is served.
    let key = "results/team/run/0000/run_error";
    let mut stream = start_put(address, &signer, key).await;
    for byte in b"0123456789" {
        tokio::time::sleep(LIMITS.body_idle_timeout / 2).await;
        stream.write_all(&[*byte]).await.unwrap();
    }
    let (answer, _) = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer:?}");
    assert!(store.exists(key).await.unwrap());
}
