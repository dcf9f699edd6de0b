//! The data API's HTTPS endpoint: TLS with the shared serving certificate and an optional client certificate checked against the front-proxy CA, HTTP/1.1, one [`DataApi::handle`] per request.

use crate::cluster::listener::{self, RequestBody, ServerLimits};
use std::convert::Infallible;
use std::sync::Arc;

use hyper::Request;

use hyper::service::service_fn;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::{self, ServerConfig};

use super::frontproxy::{FrontProxy, common_name};
use super::handler::DataApi;
use crate::cluster::serving::tls::ServingCertificate;

/// A TLS acceptor serving whatever `certificate` holds, asking for a client certificate that
/// `front_proxy` checks.
pub fn acceptor(
    certificate: Arc<ServingCertificate>,
    front_proxy: Arc<FrontProxy>,
) -> Result<TlsAcceptor, rustls::Error> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(front_proxy)
        .with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves the data API over TLS on `listener` within `limits` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    limits: ServerLimits,
    api: Arc<DataApi>,
) {
    listener::serve(listener, Some(acceptor), limits, "data API", move |peer| {
        // The chain was verified in the handshake; only its leaf's name is read here.
        let name: Option<Arc<str>> = peer
            .certificate
            .as_ref()
            .and_then(common_name)
            .map(Arc::from);
        let api = Arc::clone(&api);
        service_fn(move |request: Request<RequestBody>| {
            let api = Arc::clone(&api);
            let name = name.clone();
            async move { Ok::<_, Infallible>(api.handle(request, name.as_deref()).await) }
        })
    })
    .await;
}
