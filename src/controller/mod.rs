//! The cluster backend: a controller that runs each AgentExecution once as a Job and records what happened.
//!
//! [`run`] wires the caches, the reconcile pipeline ([`reconcile`]), leader election
//! ([`leader`]) and the HTTP endpoints ([`http`]). The pure parts — [`build`], [`status`],
//! [`names`] — take no client; the signed URLs come from [`crate::store::grants`].

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
pub mod status;
pub mod watches;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tracing::{info, warn};

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
            RunError::CacheStopped => "cache_stopped",
            RunError::LostLease => "lost_lease",
        }
    }
}

/// Runs the controller until `shutdown` completes (in-flight reconciles finish first) or the
/// Lease is lost.
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
    // Users' Secrets (not the grants Secrets errand creates), values dropped on arrival.
    let users_secrets = all().labels(&format!(
        "{}!={}",
        names::MANAGED_BY_LABEL,
        names::MANAGED_BY
    ));
    let (secrets, secret_stream) = watches::cache(
        watches::api::<Secret>(&client, namespace),
        users_secrets,
        catalog::keep_key_names_only,
    );
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
    tasks.spawn(watches::drive(secret_stream));

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

    let lease = options.leader_election.map(|(lease_namespace, settings)| {
        (
            Api::<Lease>::namespaced(client.clone(), &lease_namespace),
            settings,
        )
    });
    if let Some((api, settings)) = &lease {
        leader::acquire(api, settings).await;
    }

    let catalog = ClusterCatalog {
        agents,
        environments,
        filesets,
        secrets,
    };
    for ready in [
        catalog.agents.wait_until_ready().await,
        catalog.environments.wait_until_ready().await,
        catalog.filesets.wait_until_ready().await,
        catalog.secrets.wait_until_ready().await,
    ] {
        ready.map_err(|_| RunError::CacheStopped)?;
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
    // Children are watched by metadata only: a change only needs to wake their owner.
    let config_maps = watcher(
        watches::api::<PartialObjectMeta<ConfigMap>>(&client, namespace),
        all().labels(&managed),
    )
    .default_backoff()
    .touched_objects();
    let grant_secrets = watcher(
        watches::api::<PartialObjectMeta<Secret>>(&client, namespace),
        all().labels(&managed),
    )
    .default_backoff()
    .touched_objects();

    let controller = Controller::for_stream(execution_stream, executions)
        .owns_stream(job_stream)
        .owns_stream(config_maps)
        .owns_stream(grant_secrets)
        .watches_stream(pod_stream, watches::pod_execution)
        .with_config(controller::Config::default().concurrency(64))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| {
            if let Err(e) = result {
                warn!("controller: {e}");
            }
            std::future::ready(())
        });
    ready.store(true, Ordering::Relaxed);
    info!(
        namespace = namespace.unwrap_or("*"),
        "reconciling AgentExecutions"
    );
    let outcome = match &lease {
        Some((api, settings)) => tokio::select! {
            () = controller => Ok(()),
            () = leader::keep(api, settings) => Err(RunError::LostLease),
        },
        None => {
            controller.await;
            Ok(())
        }
    };
    ready.store(false, Ordering::Relaxed);
    tasks.abort_all();
    outcome
}
