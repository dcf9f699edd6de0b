//! Submission-time rejection: the validating admission webhook for AgentExecutions, served by the controller over TLS.
//!
//! A create is resolved against the live API with the same rules the controller applies
//! ([`crate::resolve`]), so a bad agent name, a missing Secret or key, a missing Fileset and
//! the rest fail the `kubectl apply` with every problem listed instead of failing the run.
//! [`review`] is the pure decision; [`server`] the HTTPS endpoint, served with the certificate
//! [`crate::cluster::serving`] keeps in place.

pub mod metrics;
pub mod review;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use kube::Client;
use tokio::task::JoinSet;

use crate::cluster::catalog::ClusterCatalog;
use crate::cluster::serving::tls::{self, ServingCertificate, TlsError};
use crate::resolve::RunLimits;
use metrics::AdmissionMetrics;
use server::{Admission, ClusterResolver};

/// How the webhook is served.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// The HTTPS address (the Service's target port).
    pub listen: SocketAddr,
}

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The port could not be bound.
    #[error("listening on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// TLS could not be configured.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Binds the webhook's port and starts serving on `tasks` with `certificate`. Creates are
/// checked against `limits`. Handshakes fail until the first certificate is loaded.
pub async fn start(
    client: Client,
    catalog: ClusterCatalog,
    metrics: Arc<AdmissionMetrics>,
    limits: RunLimits,
    options: WebhookOptions,
    certificate: Arc<ServingCertificate>,
    tasks: &mut JoinSet<()>,
) -> Result<(), StartError> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| StartError::Listen {
            address: options.listen,
            source,
        })?;
    let acceptor = tls::acceptor(certificate)?;
    let admission = Arc::new(Admission {
        resolver: Box::new(ClusterResolver {
            client: client.clone(),
            catalog,
        }),
        metrics,
        limits,
    });
    tasks.spawn(server::serve(listener, acceptor, admission));
    Ok(())
}
