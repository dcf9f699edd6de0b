//! The one accept loop of every errand server (admission webhook, data API, gateway, the controller's HTTP endpoint): the limits each holds to under abuse, a TLS handshake timeout, a header-read timeout, a body idle timeout, and a cap on the connections served at once.
//!
//! Exceeding a limit never costs memory without bound: a client that sends its request head
//! too slowly (slowloris) or idles between requests is cut off after
//! [`ServerLimits::header_read_timeout`] (the connection is closed); one that sends its head
//! and then stops sending the body it announced gets a body read error after
//! [`ServerLimits::body_idle_timeout`] without a byte (each server answers it as a cut-off
//! body, and the connection is closed); a TLS
//! handshake that does not finish within [`ServerLimits::handshake_timeout`] is dropped; past
//! [`ServerLimits::max_connections`] a new connection gets `503 Service Unavailable` with
//! `Retry-After` (a few of them at once; beyond, it is closed). Body sizes are each server's:
//! its route knows what a body may be.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::{Service, service_fn};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tracing::debug;

/// What a server tolerates from its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// How long a client may take to send a request's head, and to start the next request on a
    /// kept-alive connection (the idle timeout).
    pub header_read_timeout: Duration,
    /// How long a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// How long a request body may go without a byte arriving (a body that trickles in stays;
    /// one that stops is cut off).
    pub body_idle_timeout: Duration,
    /// Connections served at once; more get 503.
    pub max_connections: usize,
}

impl ServerLimits {
    /// The limits of every errand server unless its caller sets others.
    pub const DEFAULT: ServerLimits = ServerLimits {
        header_read_timeout: Duration::from_secs(10),
        handshake_timeout: Duration::from_secs(10),
        body_idle_timeout: Duration::from_secs(30),
        max_connections: 512,
    };
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Connections past the cap answered 503 at once; beyond these they are closed unanswered.
const BUSY_ANSWERS: usize = 32;

/// Who is on the other end of a connection.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Its address.
    pub address: SocketAddr,
    /// The first certificate it presented in the TLS handshake, if any (verified by the
    /// acceptor's client verifier when it has one).
    pub certificate: Option<CertificateDer<'static>>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Serves `listener` (over TLS with `acceptor` when given) within `limits` until the task is
/// dropped: each connection gets the service `make(peer)` builds. `what` names the server in
/// the log.
pub async fn serve<M, S, B>(
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    limits: ServerLimits,
    what: &'static str,
    make: M,
) where
    M: Fn(Peer) -> S + Send + Sync + 'static,
    S: Service<Request<RequestBody>, Response = Response<B>> + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let make = Arc::new(make);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let busy = Arc::new(Semaphore::new(BUSY_ANSWERS));
    loop {
        let (stream, address) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                debug!("accepting a {what} connection: {e}");
                // Out of file descriptors, say: give the ones in use a moment to close.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A response goes out as several TLS records; with Nagle's algorithm the later ones
        // wait for the client's delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            debug!(%address, "setting TCP_NODELAY: {e}");
        }
        let acceptor = acceptor.clone();
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            let Ok(answer) = Arc::clone(&busy).try_acquire_owned() else {
                debug!(%address, "{what}: over the connection cap; closed");
                continue;
            };
            tokio::spawn(async move {
                if let Some((io, _)) = handshake(stream, acceptor, limits, address, what).await {
                    let service = service_fn(|_| async { Ok::<_, Infallible>(busy_response()) });
                    let _ = builder(limits)
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(io), service)
                        .await;
                }
                drop(answer);
            });
            continue;
        };
        let make = Arc::clone(&make);
        tokio::spawn(async move {
            let Some((io, certificate)) = handshake(stream, acceptor, limits, address, what).await
            else {
                return;
            };
            let service = Arc::new(make(Peer {
                address,
                certificate,
            }));
            let idle = limits.body_idle_timeout;
            let service = service_fn(move |request: Request<Incoming>| {
                service.call(request.map(|body| RequestBody::new(body, idle)))
            });
            // With upgrades: the egress proxy's CONNECT hands the connection on.
            if let Err(e) = builder(limits)
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades()
                .await
            {
                debug!(%address, "serving a {what} connection: {e}");
            }
            drop(slot);
        });
    }
}

/// A request's body as every errand server reads it: an error once no byte has come for the
/// limits' body idle timeout.
#[derive(Debug)]
pub struct RequestBody {
    inner: Incoming,
    idle: Duration,
    /// When the current wait for a frame times out; `None` when not waiting.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl RequestBody {
    fn new(inner: Incoming, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            deadline: None,
        }
    }
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// No byte came for this long.
    #[error("the request body stopped: nothing arrived for {0:?}")]
    Idle(Duration),
    /// The connection failed.
    #[error(transparent)]
    Connection(#[from] hyper::Error),
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.deadline = None;
            return Poll::Ready(frame.map(|frame| frame.map_err(BodyError::from)));
        }
        let idle = this.idle;
        let deadline = this
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyError::Idle(idle)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn builder(limits: ServerLimits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // A client that shuts its write side after its request (`nc`, some proxies) still
        // gets its answer: without this, hyper drops the connection at the read's EOF.
        .half_close(true);
    builder
}

/// The connection after its TLS handshake (when there is an acceptor) and the client's
/// certificate; `None` when the handshake failed or took too long.
async fn handshake(
    stream: TcpStream,
    acceptor: Option<TlsAcceptor>,
    limits: ServerLimits,
    address: SocketAddr,
    what: &str,
) -> Option<(Box<dyn Io>, Option<CertificateDer<'static>>)> {
    let Some(acceptor) = acceptor else {
        return Some((Box::new(stream), None));
    };
    match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let certificate = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|c| c.clone().into_owned());
            Some((Box::new(tls), certificate))
        }
        Ok(Err(e)) => {
            debug!(%address, "{what} TLS handshake: {e}");
            None
        }
        Err(_) => {
            debug!(%address, "{what} TLS handshake: not done within {:?}", limits.handshake_timeout);
            None
        }
    }
}

fn busy_response() -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .header("content-type", "text/plain; charset=utf-8")
        .header("retry-after", "1")
        .header("connection", "close")
        .body(Full::new(Bytes::from_static(
            b"too many connections to this server at once; retry shortly\n",
        )))
        .expect("a static response is valid")
}

/// A request body read whole, refused past `limit` bytes: what every server that reads a body
/// does, each answering the error (too large, or cut off) in its own terms.
pub async fn read_body<B>(
    body: B,
    limit: usize,
) -> Result<hyper::body::Bytes, Box<dyn std::error::Error + Send + Sync>>
where
    B: Body<Data = hyper::body::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use http_body_util::BodyExt;
    Ok(http_body_util::Limited::new(body, limit)
        .collect()
        .await?
        .to_bytes())
}

/// The bearer token of a request's `Authorization` header (`Bearer` or `bearer`, trimmed), if
/// it has a non-empty one: what every server that takes a token reads.
pub fn bearer_token(headers: &hyper::HeaderMap) -> Option<String> {
    let value = headers.get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let token = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))?
        .trim();
    (!token.is_empty()).then(|| token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_is_read_from_either_spelling_and_never_empty() {
        let headers = |value: &str| {
            let mut headers = hyper::HeaderMap::new();
            headers.insert(hyper::header::AUTHORIZATION, value.parse().unwrap());
            headers
        };
        assert_eq!(bearer_token(&headers("Bearer abc ")), Some("abc".into()));
        assert_eq!(bearer_token(&headers("bearer abc")), Some("abc".into()));
        assert_eq!(bearer_token(&headers("Bearer   ")), None);
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&hyper::HeaderMap::new()), None);
    }
}
