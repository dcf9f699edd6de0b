//! The reconcilers of the cluster backend, one home per kind: each AgentExecution runs once as a Job ([`execution`]); each AgentDeployment is served by a Deployment ([`deployment`]); each AgentSchedule creates executions on its cron schedule ([`schedule`]).
//!
//! [`run`] starts both reconcilers and the periodic [`store_sweep`]; [`crate::serve`] starts it
//! once this replica leads. What the kinds share sits beside them: the settings ([`config`]),
//! the reconcile [`error`], the [`metrics`], the children's [`names`], the builders of their
//! pods ([`build`]); the writer of their conditions is [`crate::resolve::conditions`], which the
//! local backend shares.

pub mod build;
pub mod config;
pub mod deployment;
pub mod error;
pub mod execution;
pub mod metrics;
pub mod names;
pub mod schedule;
pub mod status_write;
pub mod store_sweep;

use std::future::Future;
use std::sync::Arc;

use futures::{FutureExt, Stream};
use kube::Client;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use crate::api::AgentExecution;
use crate::cluster::catalog::ClusterCatalog;
use crate::cluster::scope::Namespaces;
use crate::store::grants::UrlSigner;
use config::ControllerConfig;
use metrics::Metrics;

/// What the reconcilers act with, besides the client and the caches.
pub struct ControllerSettings {
    /// The namespaces reconciled.
    pub namespaces: Namespaces,
    /// Settings of the Jobs.
    pub config: ControllerConfig,
    /// Where results are kept (the finalizer deletes from it).
    pub results: crate::store::Store,
    /// Signs the store URLs each pod gets.
    pub signer: Arc<dyn UrlSigner>,
    /// This replica's name in events.
    pub instance: String,
    /// Run-ended reports the HTTP endpoint hands to the reconciler while this replica leads.
    pub handed_reports: Arc<execution::handed_reports::HandedReports>,
}

/// Reconciles AgentExecutions ([`execution::run`]) and AgentDeployments
/// ([`deployment::run`]) and AgentSchedules ([`schedule::run`]), and sweeps the store when configured, until `shutdown` completes;
/// in-flight reconciles finish first.
///
/// `executions` is the cache of AgentExecutions and the stream that fills it.
pub async fn run(
    client: Client,
    settings: ControllerSettings,
    catalog: ClusterCatalog,
    metrics: Arc<Metrics>,
    executions: (
        Store<AgentExecution>,
        impl Stream<Item = Result<AgentExecution, watcher::Error>> + Send + 'static,
    ),
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let shutdown = shutdown.shared();
    let sweep = settings.config.store_sweep.map(|schedule| {
        store_sweep::run(
            client.clone(),
            settings.results.clone(),
            settings.namespaces.clone(),
            schedule,
            Arc::clone(&metrics),
        )
    });
    let sweeping = {
        let shutdown = shutdown.clone();
        async move {
            if let Some(sweep) = sweep {
                tokio::select! {
                    () = sweep => {}
                    () = shutdown => {}
                }
            }
        }
    };
    let deployments = deployment::run(
        client.clone(),
        settings.namespaces.clone(),
        catalog.clone(),
        settings.config.clone(),
        shutdown.clone(),
    );
    let schedules = schedule::run(
        client.clone(),
        settings.namespaces.clone(),
        Arc::clone(&metrics),
        shutdown.clone(),
    );
    let executions = execution::run(client, settings, catalog, metrics, executions, shutdown);
    futures::join!(executions, sweeping, deployments, schedules);
}

/// Runs one reconcile, failing (and so retrying) if it takes longer than `limit`.
pub async fn within_limit(
    limit: std::time::Duration,
    reconcile: impl std::future::Future<Output = error::Result<kube::runtime::controller::Action>>,
) -> error::Result<kube::runtime::controller::Action> {
    tokio::time::timeout(limit, reconcile)
        .await
        .unwrap_or(Err(error::Error::TimedOut(limit)))
}

/// Logs a failed reconcile of `object` and retries it after `after` (a deployment's or a
/// schedule's error policy).
pub fn retry_after_failure<K: kube::Resource<DynamicType = ()>>(
    object: &K,
    error: &error::Error,
    after: std::time::Duration,
) -> kube::runtime::controller::Action {
    use kube::ResourceExt;
    tracing::warn!(
        kind = %K::kind(&()),
        name = %object.name_any(),
        reason = error.metric_label(),
        "reconcile failed: {error}"
    );
    kube::runtime::controller::Action::requeue(after)
}

/// Logs what a reconciler's stream yields that needs a line of its own: an object deleted
/// before its reconcile, and the runtime's failures (a failed reconcile is logged by its
/// error policy).
pub fn log_outcome<K, E>(
    kind: &str,
    result: std::result::Result<
        (
            kube::runtime::reflector::ObjectRef<K>,
            kube::runtime::controller::Action,
        ),
        kube::runtime::controller::Error<E, kube::runtime::watcher::Error>,
    >,
) -> std::future::Ready<()>
where
    K: kube::Resource,
    E: std::error::Error,
{
    use kube::runtime::controller::Error;
    match result {
        Ok(_) | Err(Error::ReconcilerFailed(..)) => {}
        Err(Error::ObjectNotFound(object)) => {
            tracing::debug!(%object, "deleted before its reconcile");
        }
        Err(e) => tracing::warn!("{kind} controller: {e}"),
    }
    std::future::ready(())
}
