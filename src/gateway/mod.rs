//! The gateway: one authenticated entry to every AgentDeployment — invoke, named chat sessions and OpenAI chat completions — routed to ready pods only.
//!
//! [`route`] reads what a request asks for, [`requests`] checks its body, [`pick`] finds the
//! deployment and a ready pod (from the cached EndpointSlices on a cluster, through the
//! [`server::Directory`] the local backend implements too), [`auth`] checks the caller's
//! bearer token (TokenReview, then SubjectAccessReview on `agentdeployments/invoke`), all but
//! the API calls pure; [`sessions`] keeps chat sessions in the object store; [`server`]
//! passes requests on and streams answers back. Every replica serves it.

pub mod answer_cache;
pub mod auth;
pub mod pick;
pub mod refusal;
pub mod requests;
pub mod route;
pub mod server;
pub mod sessions;

use crate::cluster::listener::ServerLimits;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::runtime::reflector::Store as Cache;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::api::AgentDeployment;
use auth::ClusterAuthorizer;
use server::{ClusterDirectory, Gateway};
use sessions::{SessionLimits, Sessions};

/// How the gateway is served.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// The address it listens on.
    pub listen: SocketAddr,
    /// How many turns a chat session may hold and how long it lasts.
    pub sessions: SessionLimits,
}

/// How long connecting to a pod may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts serving the gateway on `listener` and `tasks`: over TLS with `acceptor` when given,
/// routing by the `deployments` and `slices` caches, keeping chat `sessions`, serving
/// connections within `limits`.
#[allow(clippy::too_many_arguments)]
pub fn start(
    client: Client,
    deployments: Cache<AgentDeployment>,
    slices: Cache<EndpointSlice>,
    sessions: Sessions,
    listener: TcpListener,
    limits: ServerLimits,
    acceptor: Option<TlsAcceptor>,
    tasks: &mut JoinSet<()>,
) {
    let gateway = Arc::new(Gateway {
        authorizer: Box::new(ClusterAuthorizer::new(client)),
        directory: Box::new(ClusterDirectory {
            deployments,
            slices,
        }),
        sessions,
        client: agent_client(),
        next: AtomicUsize::new(0),
    });
    tasks.spawn(server::serve(listener, acceptor, limits, gateway));
}

/// A plain HTTP client for agent servers, as the gateway passes requests on with: to the
/// addresses of the deployment's own pods, never following a redirect an agent server answers
/// (which could point anywhere: the cloud metadata endpoint, another tenant's Service).
pub fn agent_client() -> reqwest::Client {
    crate::outbound::internal_client(CONNECT_TIMEOUT)
}
