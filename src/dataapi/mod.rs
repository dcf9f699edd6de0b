//! The `data.errand.dev` aggregated API: an execution's results and a Fileset's content as Kubernetes API resources, so that a tenant needs namespace RBAC only, never store credentials.
//!
//! The Kubernetes API server authenticates and authorizes the caller and proxies the request
//! here with its front-proxy client certificate and the user in `X-Remote-*` headers
//! ([`authn`], [`frontproxy`]); each request is authorized again with a SubjectAccessReview
//! ([`authz`]); [`route`] names what is asked, [`results`] and [`ranges`] decide what to send
//! and [`status`] how to refuse, all pure. [`handler`] answers, streaming downloads from the
//! store and vetting uploads on their way in ([`upload`]); [`server`] is the HTTPS endpoint
//! every replica serves, with the certificate of [`crate::cluster::serving`].

pub mod authn;
pub mod authz;
pub mod discovery;
pub mod frontproxy;
pub mod handler;
pub mod objects;
pub mod ranges;
pub mod results;
pub mod route;
pub mod server;
pub mod status;
pub mod upload;

use std::net::SocketAddr;
use std::sync::Arc;

use kube::Client;
use kube::runtime::reflector;
use tokio::task::JoinSet;

use crate::api::{AgentExecution, Fileset};
use crate::cluster::serving::tls::ServingCertificate;
use crate::store::Store;
use frontproxy::FrontProxy;
use handler::DataApi;
use objects::{ClusterAuthorizer, ClusterObjects};
pub use upload::{DEFAULT_MAX_UPLOAD_BYTES, UploadLimits};

/// How the data API is served.
#[derive(Clone, Debug)]
pub struct DataApiOptions {
    /// The HTTPS address (the Service's target port the APIService points at).
    pub listen: SocketAddr,
    /// What an upload may be.
    pub limits: UploadLimits,
}

/// What the data API reads from: the process's caches and its store.
pub struct Sources {
    /// The executions' cache.
    pub executions: reflector::Store<AgentExecution>,
    /// The Filesets' cache.
    pub filesets: reflector::Store<Fileset>,
    /// The store of results and Fileset content.
    pub store: Store,
    /// The one namespace errand serves, or all.
    pub namespace: Option<String>,
}

/// Why the data API could not start.
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
    #[error("configuring the data API's TLS: {0}")]
    Tls(#[from] tokio_rustls::rustls::Error),
}

/// Binds the data API's port and starts serving on `tasks` with `certificate`, with the front
/// proxy's settings kept current alongside. Until they are first read, requests get 503.
pub async fn start(
    client: Client,
    sources: Sources,
    options: DataApiOptions,
    certificate: Arc<ServingCertificate>,
    tasks: &mut JoinSet<()>,
) -> Result<(), StartError> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|source| StartError::Listen {
            address: options.listen,
            source,
        })?;
    let front_proxy = Arc::new(FrontProxy::default());
    let acceptor = server::acceptor(certificate, Arc::clone(&front_proxy))?;
    let api = Arc::new(DataApi::new(
        Box::new(ClusterObjects {
            client: client.clone(),
            executions: sources.executions,
            filesets: sources.filesets,
        }),
        Box::new(ClusterAuthorizer {
            client: client.clone(),
        }),
        sources.store,
        Arc::clone(&front_proxy),
        options.limits,
        sources.namespace,
    ));
    tasks.spawn(server::serve(listener, acceptor, api));
    tasks.spawn(frontproxy::keep(client, front_proxy));
    Ok(())
}
