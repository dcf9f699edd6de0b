//! The `data.errand.dev` aggregated API: an execution's results and a Fileset's content as Kubernetes API resources, so that a tenant needs namespace RBAC only, never store credentials.
//!
//! The Kubernetes API server authenticates and authorizes the caller and proxies the request
//! here with its front-proxy client certificate and the user in `X-Remote-*` headers
//! ([`authn`], [`frontproxy`]); each request is authorized again with a SubjectAccessReview
//! ([`authz`]); [`route`] names what is asked, [`results`] and [`ranges`] decide what to send
//! and [`status`] how to refuse, all pure. [`handler`] answers, streaming downloads from the
//! store and vetting uploads on their way in ([`handler::upload`]); [`server`] is the HTTPS endpoint
//! every replica serves, with the certificate of [`crate::cluster::serving`].

pub mod authn;
pub mod authz;
pub mod discovery;
pub mod frontproxy;
pub mod handler;
pub mod link;
pub mod objects;
pub mod ranges;
pub mod results;
pub mod route;
pub mod server;
pub mod status;

use crate::cluster::listener::ServerLimits;
use crate::cluster::scope::Namespaces;
use std::net::SocketAddr;
use std::sync::Arc;

use kube::Client;
use kube::runtime::reflector;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::api::{AgentExecution, Fileset};
use crate::cluster::serving::tls::ServingCertificate;
use crate::store::Store;
use frontproxy::FrontProxy;
use handler::DataApi;
pub use handler::upload::{DEFAULT_MAX_UPLOAD_BYTES, UploadLimits};
use objects::{ClusterAuthorizer, ClusterObjects};

/// How the data API is served.
#[derive(Clone, Debug)]
pub struct DataApiOptions {
    /// The HTTPS address (the Service's target port the APIService points at).
    pub listen: SocketAddr,
    /// What an upload may be.
    pub limits: UploadLimits,
    /// Whether downloads that ask (`link=true`) may get a link (the store's presigned URL),
    /// when the store presigns URLs clients can reach ([`link`]).
    pub links: bool,
}

/// What the data API reads from: the process's caches and its store.
pub struct Sources {
    /// The executions' cache.
    pub executions: reflector::Store<AgentExecution>,
    /// The Filesets' cache.
    pub filesets: reflector::Store<Fileset>,
    /// The store of results and Fileset content.
    pub store: Store,
    /// The namespaces errand serves.
    pub namespaces: Namespaces,
}

/// Why the data API could not start: its TLS could not be configured.
#[derive(Debug, thiserror::Error)]
#[error("configuring the data API's TLS: {0}")]
pub struct StartError(#[from] tokio_rustls::rustls::Error);

/// Starts serving the data API on `listener` and `tasks` with `certificate`, uploads within
/// `limits`, giving links to downloads that ask when `links` allows and the store presigns,
/// with the front proxy's settings kept current alongside. Until they are first read, requests
/// get 503.
#[allow(clippy::too_many_arguments)]
pub fn start(
    client: Client,
    sources: Sources,
    listener: TcpListener,
    server_limits: ServerLimits,
    limits: UploadLimits,
    links: bool,
    certificate: Arc<ServingCertificate>,
    tasks: &mut JoinSet<()>,
) -> Result<(), StartError> {
    let store = sources.store;
    let front_proxy = Arc::new(FrontProxy::default());
    let acceptor = server::acceptor(certificate, Arc::clone(&front_proxy))?;
    let api = DataApi::new(
        Box::new(ClusterObjects {
            client: client.clone(),
            executions: sources.executions,
            filesets: sources.filesets,
        }),
        Box::new(ClusterAuthorizer {
            client: client.clone(),
        }),
        store.clone(),
        Arc::clone(&front_proxy),
        limits,
        sources.namespaces,
    );
    let api = Arc::new(if links { api.linking_to(&store) } else { api });
    tasks.spawn(server::serve(listener, acceptor, server_limits, api));
    tasks.spawn(frontproxy::keep(client, front_proxy));
    Ok(())
}
