//! A controller listener under abuse on the real test cluster: the `errand controller` process, with its default server limits, cuts off a slowloris client (a request head that never ends) after its header-read timeout, and refuses an oversized result upload (declared, or sent chunked without a length) with 413, storing nothing, even when the uploader holds a valid signed URL for that key (a hostile agent holds its own).

use std::time::{Duration, Instant};

use jiff::Timestamp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::harness::{Harness, SIGNING_KEY};
use errand::cluster::listener::ServerLimits;
use errand::store::grants::{Access, HmacSigner, UrlSigner};

/// The largest result the controller accepts in this test (`--max-result-bytes`).
const MAX_RESULT_BYTES: usize = 64 * 1024;

/// Everything the server sends until it closes the connection (at most `limit`), and when.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(limit, stream.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "the controller kept the connection open past {limit:?}"
    );
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_cuts_off_slowloris_and_oversized_uploads() {
    let max = MAX_RESULT_BYTES.to_string();
    let Some(harness) =
        Harness::start_with_controller_args("abuse", &["--max-result-bytes", &max]).await
    else {
        return;
    };
    let address = harness
        .controller_url()
        .trim_start_matches("http://")
        .to_owned();

    // Slowloris: a request head that never ends is cut off at the header-read timeout.
    let timeout = ServerLimits::DEFAULT.header_read_timeout;
    let mut slow = TcpStream::connect(&address).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: a")
        .await
        .unwrap();
    let (answer, after) = read_until_closed(&mut slow, timeout + Duration::from_secs(10)).await;
    assert!(
        after >= timeout - Duration::from_secs(1),
        "cut off after {after:?}: before the {timeout:?} timeout"
    );
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer:?}"
    );

    // An upload to a valid signed URL past the limit: 413 for a declared length, and for a
    // chunked body once it passes the limit; nothing is stored under the key either way.
    let signer = HmacSigner::new(&harness.controller_url(), SIGNING_KEY.as_bytes());
    let expires = Timestamp::now() + jiff::SignedDuration::from_secs(600);
    let client = reqwest::Client::new();
    let oversized = vec![b'x'; MAX_RESULT_BYTES * 4];
    for (how, key) in [("declared", "declared"), ("chunked", "chunked")] {
        let key = format!("results/{}/abuser/0000/{key}", harness.namespace.name());
        let url = signer.sign(Access::Put, &key, expires).await.unwrap();
        let request = client.put(&url);
        let request = match how {
            "declared" => request.body(oversized.clone()),
            _ => {
                let chunks = oversized
                    .chunks(8 * 1024)
                    .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(c)))
                    .collect::<Vec<_>>();
                request.body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
            }
        };
        let status = match request.send().await {
            Ok(response) => Some(response.status().as_u16()),
            // The controller may close the connection once it has answered, before the
            // client finished sending.
            Err(e) => {
                assert!(how == "chunked", "{how}: {e}");
                None
            }
        };
        assert!(
            status.is_none_or(|s| s == 413),
            "{how}: an upload past --max-result-bytes got {status:?}"
        );
        let stored = harness.store().exists(&key).await.unwrap();
        assert!(!stored, "{how}: the oversized upload was stored");
    }
    harness.finish().await;
}
