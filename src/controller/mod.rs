//! The cluster backend: a controller that runs each AgentExecution once as a Job and records what happened.
//!
//! [`run`] wires the caches, the reconcile pipeline ([`reconcile`]), leader election
//! ([`leader`]), the HTTP endpoints ([`http`]) and the admission webhook ([`crate::webhook`]).
//! The pure parts — [`build`], [`status`], [`names`] — take no client; the signed URLs come
//! from [`crate::store::grants`].

pub mod blobs;
pub mod build;
pub mod catalog;
pub mod config;
pub mod context;
pub mod error;
pub mod events;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod names;
pub mod reconcile;
pub mod results_cleanup;
pub mod status;
pub mod watches;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Api, Client};
use tracing::{debug, info, warn};

use crate::api::{Agent, AgentEnvironment, AgentExecution, Fileset};
use crate::store::grants::{self, UrlSigner};
use catalog::ClusterCatalog;
use config::{ControllerConfig, FIELD_MANAGER};
use context::Context;
use leader::LeaseSettings;
use metrics::Metrics;

/// Everything [`run`] needs besides the client.
pub struct ControllerOptions {
    /// Settings of the Jobs.
    pub config: ControllerConfig,
    /// Reconcile only this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Where results are kept (the finalizer deletes from it).
    pub results: crate::store::Store,
    /// Signs the store URLs each pod gets.
    pub signer: Arc<dyn UrlSigner>,
    /// Serve the signed URLs of this signer at `/blobs/` (for `file://` stores, whose URLs
    /// point at the controller itself).
    pub serve_blobs: Option<Arc<grants::HmacSigner>>,
    /// Where to serve `/healthz`, `/readyz` and `/metrics` (not served when `None`).
    pub listen: Option<SocketAddr>,
    /// Serve the validating admission webhook (every replica does, leader or not).
    pub webhook: Option<crate::webhook::WebhookOptions>,
    /// The Lease to hold before reconciling, in its namespace (no election when `None`).
    pub leader_election: Option<(String, LeaseSettings)>,
    /// This replica's name in events.
    pub instance: String,
}

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The HTTP endpoints could not be served.
    #[error("listening on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The admission webhook could not be served.
    #[error("starting the webhook: {0}")]
    Webhook(#[from] crate::webhook::StartError),
    /// A cache stopped before it was filled.
    #[error("a cache stopped before it was filled")]
    CacheStopped,
    /// This replica could not renew its Lease; another may be reconciling now.
    #[error("lost the leader lease")]
    LostLease,
}

impl RunError {
    /// A short, stable label for metrics and exit reporting.
    pub fn metric_label(&self) -> &'static str {
        match self {
            RunError::Listen { .. } => "listen",
            RunError::Webhook(_) => "webhook",
            RunError::CacheStopped => "cache_stopped",
            RunError::LostLease => "lost_lease",
        }
    }
}

/// Runs the controller until `shutdown` completes (in-flight reconciles finish first) or the
/// Lease is lost.
///
/// Every replica fills the caches, serves the webhook and reports ready; only the one holding
/// the Lease reconciles. Readiness therefore means "can answer admission reviews", which is
/// what the webhook Service routes by.
pub async fn run(
    client: Client,
    options: ControllerOptions,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), RunError> {
    let namespace = options.namespace.as_deref();
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();

    let managed = watches::managed_selector();
    let all = watcher::Config::default;
    let (executions, execution_stream) = watches::cache(
        watches::api::<AgentExecution>(&client, namespace),
        all(),
        |_| {},
    );
    let (agents, agent_stream) =
        watches::cache(watches::api::<Agent>(&client, namespace), all(), |_| {});
    let (environments, environment_stream) = watches::cache(
        watches::api::<AgentEnvironment>(&client, namespace),
        all(),
        |_| {},
    );
    let (filesets, fileset_stream) =
        watches::cache(watches::api::<Fileset>(&client, namespace), all(), |_| {});
    let (jobs, job_stream) = watches::cache(
        watches::api::<Job>(&client, namespace),
        all().labels(&managed),
        watches::trim_job,
    );
    let (pods, pod_stream) = watches::cache(
        watches::api::<Pod>(&client, namespace),
        all().labels(&managed),
        watches::trim_pod,
    );
    tasks.spawn(watches::drive(agent_stream));
    tasks.spawn(watches::drive(environment_stream));
    tasks.spawn(watches::drive(fileset_stream));
    let catalog = ClusterCatalog {
        agents,
        environments,
        filesets,
    };

    if let Some(address) = options.listen {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| RunError::Listen { address, source })?;
        let (store, metrics) = (executions.clone(), Arc::clone(&metrics));
        let probes = http::Probes {
            ready: Arc::clone(&ready),
            metrics: Arc::new(move || metrics.render(&store.state())),
            blobs: options
                .serve_blobs
                .map(|signer| Arc::new(blobs::BlobEndpoint::new(options.results.clone(), signer))),
        };
        tasks.spawn(http::serve(listener, probes));
    }
    let webhook_certificate = match options.webhook {
        Some(webhook) => Some(
            crate::webhook::start(
                client.clone(),
                catalog.clone(),
                Arc::clone(&metrics),
                options.config.run_limits(options.signer.as_ref()),
                webhook,
                &mut tasks,
            )
            .await?,
        ),
        None => None,
    };
    if !catalog.wait_until_ready().await {
        return Err(RunError::CacheStopped);
    }
    if let Some(certificate) = &webhook_certificate {
        certificate.wait_loaded().await;
    }
    ready.store(true, Ordering::Relaxed);

    let lease = options.leader_election.map(|(lease_namespace, settings)| {
        (
            Api::<Lease>::namespaced(client.clone(), &lease_namespace),
            settings,
        )
    });
    if let Some((api, settings)) = &lease {
        leader::acquire(api, settings).await;
    }

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: Some(options.instance.clone()),
        },
    );
    let ctx = Arc::new(Context::new(
        client.clone(),
        options.config,
        catalog,
        jobs,
        pods,
        options.results,
        options.signer,
        recorder,
        Arc::clone(&metrics),
    ));
    // Snapshot ConfigMaps are watched by metadata only, and only for their deletion: their
    // finalizer keeps the results until both they and their execution are going. The grants
    // Secrets are not watched at all, so the controller needs no list or watch permission on
    // Secrets; nothing about them changes an execution's status.
    let (config_maps, config_map_stream) = watches::cache(
        watches::api::<PartialObjectMeta<ConfigMap>>(&client, namespace),
        all().labels(&managed),
        watches::trim_config_map,
    );
    let shutdown = shutdown.shared();
    let cleanup = Controller::for_stream(config_map_stream, config_maps)
        .with_config(controller::Config::default().concurrency(8))
        .graceful_shutdown_on(shutdown.clone())
        .run(
            results_cleanup::reconcile,
            results_cleanup::error_policy,
            Arc::clone(&ctx),
        )
        .for_each(log_failure);
    let controller = Controller::for_stream(execution_stream, executions)
        .owns_stream(job_stream)
        .watches_stream(pod_stream, watches::pod_execution)
        .with_config(controller::Config::default().concurrency(64))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(log_failure);
    let controllers = async {
        futures::join!(controller, cleanup);
    };
    info!(
        namespace = namespace.unwrap_or("*"),
        "reconciling AgentExecutions"
    );
    let outcome = match &lease {
        Some((api, settings)) => tokio::select! {
            () = controllers => Ok(()),
            () = leader::keep(api, settings) => Err(RunError::LostLease),
        },
        None => {
            controllers.await;
            Ok(())
        }
    };
    ready.store(false, Ordering::Relaxed);
    tasks.abort_all();
    outcome
}

/// Logs what the controller could not schedule. Failed reconciles were already logged by their
/// error policy; an object deleted before its turn came is routine (its children's deletion
/// events still name it).
fn log_failure<T, E1, E2>(result: Result<T, controller::Error<E1, E2>>) -> std::future::Ready<()>
where
    E1: std::error::Error + 'static,
    E2: std::error::Error + 'static,
{
    match result {
        Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(controller::Error::ObjectNotFound(object)) => {
            debug!(%object, "deleted before its reconcile");
        }
        Err(e) => warn!("controller: {e}"),
    }
    std::future::ready(())
}
