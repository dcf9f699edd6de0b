//! Submission-time rejection: the validating admission webhook for AgentExecutions and AgentExtensions, served by the controller over TLS.
//!
//! A create is resolved against the live API with the same rules the controller applies
//! ([`crate::resolve`]), so a bad agent name, a missing Secret or key, a missing Fileset and
//! the rest fail the `kubectl apply` with every problem listed instead of failing the run.
//! [`review`] is the pure decision; [`server`] the HTTPS endpoint, served with the certificate
//! [`crate::cluster::serving`] keeps in place.

pub mod metrics;
pub mod review;
pub mod server;

use crate::cluster::listener::ServerLimits;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::cluster::serving::tls::{self, ServingCertificate, TlsError};
use crate::resolve::RunLimits;
use metrics::AdmissionMetrics;
use server::Admission;
pub use server::ClusterResolver;

/// How the webhook is served.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// The HTTPS address (the Service's target port).
    pub listen: SocketAddr,
    /// The secret last segment of the paths the API server calls
    /// ([`crate::cluster::serving::caller`]); a request without it is answered 403 with no
    /// review. `None`: the paths are the plain ones (where the configuration's paths are not
    /// the controller's to keep).
    pub path_token: Option<String>,
}

/// Why the webhook could not start: its TLS could not be configured.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StartError(#[from] TlsError);

/// Starts serving the webhook on `listener` and `tasks` with `certificate`. Creates are
/// resolved by `resolver` and checked against `limits`; only paths ending with `path_token`
/// are answered when it is given; connections are served within `server_limits`. Handshakes
/// fail until the first certificate is loaded.
#[allow(clippy::too_many_arguments)]
pub fn start(
    resolver: ClusterResolver,
    metrics: Arc<AdmissionMetrics>,
    limits: RunLimits,
    path_token: Option<String>,
    listener: TcpListener,
    server_limits: ServerLimits,
    certificate: Arc<ServingCertificate>,
    tasks: &mut JoinSet<()>,
) -> Result<(), StartError> {
    let acceptor = tls::acceptor(certificate)?;
    let admission = Arc::new(Admission {
        resolver: Box::new(resolver),
        metrics,
        limits,
        path_token,
    });
    tasks.spawn(server::serve(listener, acceptor, server_limits, admission));
    Ok(())
}
