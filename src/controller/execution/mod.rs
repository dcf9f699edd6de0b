//! The AgentExecution reconciler: each execution runs once as a Job, and what happened is recorded in its status.
//!
//! [`run`] drives the reconcile pipeline ([`reconcile`]) and the results cleanup
//! ([`results_cleanup`]) over the caches it watches. The pure parts — [`build`] (the
//! children) and [`status`] (observe → decide → render) — take no client; the pods ask
//! [`crate::serve::grants`] for their signed URLs when they start. [`notify`] sends the
//! webhooks of finished executions.

pub mod build;
pub mod context;
pub mod created_jobs;
pub mod events;
pub mod handed_reports;
pub mod notify;
pub mod reconcile;
pub mod results_cleanup;
pub mod status;
pub mod work_queue;

use std::future::Future;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tracing::{debug, warn};

use super::ControllerSettings;
use crate::api::AgentExecution;
use crate::cluster::catalog::ClusterCatalog;
use crate::cluster::kueue::{self, Workload};
use crate::cluster::readiness::{Cache, CachesReady};
use crate::cluster::watches;
use crate::controller::config::{ControllerConfig, FIELD_MANAGER};
use crate::controller::metrics::Metrics;
use crate::telemetry::ReconcileSpans;
use context::Context;

/// Reconciles AgentExecutions (and deletes the results of those that are gone) until
/// `shutdown` completes; in-flight reconciles finish first.
///
/// `executions` is the cache of AgentExecutions and the stream that fills it; the Job, pod
/// and snapshot ConfigMap caches are watched from here, trimmed to what reconciling needs.
pub async fn run(
    client: Client,
    settings: ControllerSettings,
    catalog: ClusterCatalog,
    metrics: Arc<Metrics>,
    executions: (
        Store<AgentExecution>,
        impl Stream<Item = Result<AgentExecution, watcher::Error>> + Send + 'static,
    ),
    shutdown: impl Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let served = &settings.namespaces;
    let (executions, execution_stream) = executions;
    let managed = watcher::Config::default().labels(&watches::managed_selector());
    let (jobs, job_stream) =
        watches::cache(served.watches::<Job>(&client, &managed), watches::trim_job);
    let (pods, pod_stream) = watches::indexed_cache(
        served.watches::<Pod>(&client, &managed),
        watches::trim_pod,
        watches::pod_execution_uid,
    );
    // Snapshot ConfigMaps are watched by metadata only, and only for their deletion: their
    // finalizer keeps the results until both they and their execution are going.
    let (config_maps, config_map_stream) = watches::cache(
        served.watches::<PartialObjectMeta<ConfigMap>>(&client, &managed),
        watches::trim_config_map,
    );
    // Kueue's Workloads say why a queued Job waits. Watched only where Kueue runs (found at
    // start: a Kueue installed later is seen after a restart); without them a queued
    // execution still shows Queued, without Kueue's reason.
    let (workloads, workload_stream) = match kueue::workloads_served(&client).await {
        Ok(true) => {
            let (index, stream) = watches::indexed_cache(
                served.watches::<Workload>(&client, &watcher::Config::default()),
                kueue::trim_workload,
                Workload::job_uid,
            );
            (Some(index), stream.boxed())
        }
        served => {
            if let Err(e) = served {
                warn!("discovering Kueue's Workloads: {e}; queued executions show no Kueue reason");
            } else {
                debug!("Kueue is not installed: its Workloads are not watched");
            }
            (None, futures::stream::pending().boxed())
        }
    };
    // Namespaces by metadata, for the lifetime a namespace gives its finished executions; a
    // change to one looks at its executions again.
    let (namespaces, namespace_stream) =
        watches::cache(served.namespace_watches(&client), watches::trim_namespace);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: Some(settings.instance),
        },
    );
    // Every reconcile waits for these two caches right after a start; one task waits for
    // them and tells all the others (`cluster::readiness` says why).
    let mut caches = vec![Cache::new("Job", &jobs), Cache::new("Pod", pods.store())];
    caches.extend(
        workloads
            .as_ref()
            .map(|w| Cache::new("Workload", w.store())),
    );
    let (caches_ready, report_ready) = CachesReady::of(caches);
    let workload_execution = {
        let jobs = jobs.clone();
        move |workload: Workload| job_execution(&jobs, &workload)
    };
    let reconcile_spans = reconcile_spans(&settings.config);
    let ctx = Arc::new(
        Context::new(
            client,
            settings.config,
            catalog,
            jobs,
            pods,
            workloads,
            caches_ready,
            settings.results,
            settings.signer,
            recorder,
            metrics,
        )
        .with_namespaces(namespaces)
        .with_reconcile_spans(reconcile_spans)
        .with_handed_reports(Arc::clone(&settings.handed_reports)),
    );
    let cleanup = Controller::for_stream(config_map_stream, config_maps)
        .with_config(controller::Config::default().concurrency(8))
        .graceful_shutdown_on(shutdown.clone())
        .run(
            results_cleanup::reconcile,
            results_cleanup::error_policy,
            Arc::clone(&ctx),
        )
        .for_each(log_failure);
    // Every trigger passes through the work queue's count (`work_queue` says what it counts).
    let in_namespace = watches::executions_in_namespace(executions.clone());
    let queue = || {
        let metrics = Arc::clone(&ctx.metrics);
        move |execution| metrics.work_queue.wants(execution)
    };
    let execution_stream = {
        let wants = queue();
        execution_stream.inspect(move |event| {
            if let Ok(execution) = event {
                wants(ObjectRef::from_obj(execution));
            }
        })
    };
    let pod_execution = {
        let wants = queue();
        move |pod| watches::pod_execution(pod).map(&wants)
    };
    let workload_execution = {
        let wants = queue();
        move |workload| workload_execution(workload).map(&wants)
    };
    let in_namespace = {
        let wants = queue();
        move |namespace| {
            in_namespace(namespace)
                .into_iter()
                .map(&wants)
                .collect::<Vec<_>>()
        }
    };
    let job_execution = {
        let wants = queue();
        let ctx = Arc::clone(&ctx);
        move |job: Job| {
            ctx.created_jobs.seen(&job);
            watches::job_execution(&job).map(&wants)
        }
    };
    let reported = {
        let wants = queue();
        settings.handed_reports.open().map(wants)
    };
    let dropped = Arc::clone(&ctx.metrics);
    let reconciler = Controller::for_stream(execution_stream, executions)
        .reconcile_on(reported)
        .watches_stream(job_stream, job_execution)
        .watches_stream(pod_stream, pod_execution)
        .watches_stream(workload_stream, workload_execution)
        .watches_stream(namespace_stream, in_namespace)
        .with_config(controller::Config::default().concurrency(64))
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile::reconcile,
            reconcile::error_policy,
            Arc::clone(&ctx),
        )
        .for_each(move |result| {
            if let Err(controller::Error::ObjectNotFound(object)) = &result {
                dropped
                    .work_queue
                    .taken(&object.name, object.namespace.as_deref());
            }
            log_failure(result)
        });
    futures::join!(reconciler, cleanup, report_ready);
    ctx.reconcile_spans.shutdown().await;
}

/// The reconcile spans `config` asks for: off unless `export_reconcile_spans` and an OTLP
/// endpoint are set (and, with a warning, when the exporter cannot be built).
fn reconcile_spans(config: &ControllerConfig) -> ReconcileSpans {
    let Some(target) = config
        .otlp_endpoint
        .as_ref()
        .filter(|_| config.export_reconcile_spans)
    else {
        return ReconcileSpans::off();
    };
    ReconcileSpans::start(target).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "the controller's reconcile spans are off");
        ReconcileSpans::off()
    })
}

/// The execution whose Job owns `workload`, as the Job cache knows it.
fn job_execution(jobs: &Store<Job>, workload: &Workload) -> Option<ObjectRef<AgentExecution>> {
    let namespace = workload.namespace()?;
    let job = jobs.get(&ObjectRef::new(workload.job_name()?).within(&namespace))?;
    watches::job_execution(&job)
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
