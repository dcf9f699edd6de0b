//! A real HTTP endpoint that receives webhook deliveries: it keeps every request (headers, body) and answers each with the next status of a script (the last one repeats).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    /// `POST`, ...
    pub method: String,
    /// Its path.
    pub path: String,
    /// Its `Content-Type`.
    pub content_type: Option<String>,
    /// Its `X-Errand-Signature`.
    pub signature: Option<String>,
    /// Its body.
    pub body: Vec<u8>,
}

impl Received {
    /// Asserts this is a signed CloudEvent POSTed to `path`: its `Content-Type` and an
    /// `X-Errand-Signature` that verifies with `key`.
    pub fn assert_signed_cloudevent(&self, path: &str, key: &[u8]) {
        use errand::controller::execution::notify::{CLOUDEVENTS_CONTENT_TYPE, verify};
        assert_eq!(self.method, "POST");
        assert_eq!(self.path, path);
        assert_eq!(self.content_type.as_deref(), Some(CLOUDEVENTS_CONTENT_TYPE));
        let signature = self
            .signature
            .as_deref()
            .expect("an X-Errand-Signature header");
        assert!(verify(key, &self.body, signature), "{signature}");
        assert!(!verify(b"another key", &self.body, signature));
    }
}

/// A webhook endpoint serving on a local address until dropped.
pub struct Receiver {
    /// Where it listens.
    pub address: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on `ip` (port chosen by the system), answering the n-th request with
    /// `statuses[n]` (the last status for every later one).
    pub async fn start(ip: &str, statuses: &[u16]) -> Self {
        let listener = tokio::net::TcpListener::bind((ip, 0))
            .await
            .unwrap_or_else(|e| panic!("binding {ip}: {e}"));
        let address = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let statuses = Arc::new(statuses.to_vec());
        let kept = Arc::clone(&received);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (kept, statuses) = (Arc::clone(&kept), Arc::clone(&statuses));
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: Request<hyper::body::Incoming>| {
                            let (kept, statuses) = (Arc::clone(&kept), Arc::clone(&statuses));
                            async move {
                                let header = |name: &str| {
                                    request
                                        .headers()
                                        .get(name)
                                        .and_then(|v| v.to_str().ok())
                                        .map(str::to_owned)
                                };
                                let entry = Received {
                                    method: request.method().to_string(),
                                    path: request.uri().path().to_owned(),
                                    content_type: header("content-type"),
                                    signature: header("x-errand-signature"),
                                    body: Vec::new(),
                                };
                                let body = request.into_body().collect().await?.to_bytes();
                                let mut kept = kept.lock().unwrap();
                                let status = statuses[kept.len().min(statuses.len() - 1)];
                                kept.push(Received {
                                    body: body.to_vec(),
                                    ..entry
                                });
                                Ok::<_, hyper::Error>(
                                    Response::builder()
                                        .status(status)
                                        .body(Full::new(Bytes::new()))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            address,
            received,
            task,
        }
    }

    /// `http://ADDRESS/PATH`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{}", self.address, path.trim_start_matches('/'))
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits until `count` requests came, at most `limit`; every request so far.
    pub async fn wait_for(&self, count: usize, limit: Duration) -> Vec<Received> {
        let start = Instant::now();
        loop {
            let received = self.received();
            if received.len() >= count || start.elapsed() > limit {
                return received;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
