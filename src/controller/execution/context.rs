//! What every reconcile of an execution shares: the client, caches (namespaces among them), signer, results store, recorder, metrics, and the controller's memory of its own writes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Client, ResourceExt};
use tracing::warn;

use super::created_jobs::CreatedJobs;
use super::handed_reports::HandedReports;
use super::notify::WebhookSender;
use crate::api::AgentExecution;
use crate::api::contract::NAMESPACE_TTL_ANNOTATION;
use crate::cluster::catalog::ClusterCatalog;
use crate::cluster::index::Index;
use crate::cluster::kueue::Workload;
use crate::cluster::readiness::{CacheStopped, CachesReady};
use crate::controller::config::ControllerConfig;
use crate::controller::error::Error;
use crate::controller::metrics::Metrics;
use crate::store::grants::UrlSigner;
use crate::telemetry::ReconcileSpans;

/// Longest wait between retries of a failing execution.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Shared state of all reconciles.
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Run-ended reports handed over by this replica's HTTP endpoint.
    pub handed_reports: Arc<HandedReports>,
    /// Settings of the Jobs.
    pub config: ControllerConfig,
    /// What executions can refer to.
    pub catalog: ClusterCatalog,
    /// Jobs created by errand (templates stripped).
    pub jobs: Store<Job>,
    /// Pods of errand's Jobs (specs stripped), by the uid of their execution.
    pub pods: Index<Pod>,
    /// Kueue's Workloads (conditions only), by the uid of their Job, when the cluster runs
    /// Kueue.
    pub workloads: Option<Index<Workload>>,
    /// The metadata of the namespaces executions live in (for their lifetime annotation and
    /// whether they are being deleted).
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    /// Whether `jobs` and `pods` are filled ([`Context::caches_filled`]).
    caches_ready: CachesReady,
    /// Where results are kept; the finalizer deletes from it.
    pub results: crate::store::Store,
    /// Signs the store URLs each pod gets.
    pub signer: Arc<dyn UrlSigner>,
    /// Publishes events.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The last object each status write returned, by uid, until the cache shows it: a
    /// reconcile triggered by a child's event must not act on a status older than the one
    /// this controller already wrote.
    written: Mutex<HashMap<String, Arc<AgentExecution>>>,
    /// Jobs created moments ago that the Job cache has not seen yet.
    pub created_jobs: CreatedJobs,
    /// Consecutive failures by uid, for exponential backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// The span of each reconcile, in the execution's trace (off unless asked for).
    pub reconcile_spans: ReconcileSpans,
    /// Makes the webhook attempts of finished executions.
    pub webhooks: WebhookSender,
    /// The uids whose webhook attempt is in flight: one at a time per execution.
    deliveries: Mutex<HashSet<String>>,
}

impl Context {
    /// A context over the given caches.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        config: ControllerConfig,
        catalog: ClusterCatalog,
        jobs: Store<Job>,
        pods: Index<Pod>,
        workloads: Option<Index<Workload>>,
        caches_ready: CachesReady,
        results: crate::store::Store,
        signer: Arc<dyn UrlSigner>,
        recorder: Recorder,
        metrics: Arc<Metrics>,
    ) -> Self {
        let webhooks = WebhookSender::new(Arc::clone(&config.outbound));
        Self {
            client,
            config,
            catalog,
            jobs,
            pods,
            workloads,
            namespaces: reflector::store().0,
            caches_ready,
            results,
            signer,
            recorder,
            metrics,
            written: Mutex::default(),
            created_jobs: CreatedJobs::default(),
            failures: Mutex::default(),
            reconcile_spans: ReconcileSpans::off(),
            webhooks,
            deliveries: Mutex::default(),
            handed_reports: Arc::default(),
        }
    }

    /// Waits until the Job and Pod caches are filled (at once, after the first time).
    pub async fn caches_filled(&self) -> Result<(), Error> {
        self.caches_ready
            .wait()
            .await
            .map_err(|CacheStopped(cache)| Error::CacheStopped(cache))
    }

    /// The same context taking run-ended reports from `handed`.
    pub fn with_handed_reports(mut self, handed: Arc<HandedReports>) -> Self {
        self.handed_reports = handed;
        self
    }

    /// The same context reading namespaces from `namespaces` (without it, no namespace sets a
    /// lifetime).
    pub fn with_namespaces(mut self, namespaces: Store<PartialObjectMeta<Namespace>>) -> Self {
        self.namespaces = namespaces;
        self
    }

    /// The same context exporting a span of each reconcile with `spans`.
    pub fn with_reconcile_spans(mut self, spans: ReconcileSpans) -> Self {
        self.reconcile_spans = spans;
        self
    }

    /// The lifetime `namespace` gives its finished executions, from its annotation. A value
    /// that is not a lifetime is logged and ignored, so the controller's default applies.
    pub fn namespace_lifetime(&self, namespace: &str) -> Option<i64> {
        let object = self.namespaces.get(&ObjectRef::new(namespace))?;
        let value = object.annotations().get(NAMESPACE_TTL_ANNOTATION)?;
        crate::retention::ttl::parse_seconds(value)
            .inspect_err(|problem| {
                warn!(
                    namespace,
                    annotation = NAMESPACE_TTL_ANNOTATION,
                    "ignoring the namespace's lifetime: {problem}"
                );
            })
            .ok()
    }

    /// Whether `namespace` is being deleted, as the namespace cache knows it.
    pub fn namespace_deleting(&self, namespace: &str) -> bool {
        self.namespaces
            .get(&ObjectRef::new(namespace))
            .is_some_and(|n| n.metadata.deletion_timestamp.is_some())
    }

    /// `cached` with the status this controller wrote last, while the cache lags behind it.
    pub fn latest(&self, cached: Arc<AgentExecution>) -> Arc<AgentExecution> {
        let Some(uid) = cached.metadata.uid.clone() else {
            return cached;
        };
        let mut written = self
            .written
            .lock()
            .expect("no panics while holding the lock");
        match written.get(&uid) {
            Some(ours) if ours.status != cached.status => {
                let mut merged = (*cached).clone();
                merged.status = ours.status.clone();
                Arc::new(merged)
            }
            Some(_) => {
                written.remove(&uid);
                cached
            }
            None => cached,
        }
    }

    /// Remembers the object a status write returned (without its managed fields, which are
    /// most of it and which nothing reads).
    pub fn remember(&self, mut updated: AgentExecution) {
        updated.metadata.managed_fields = None;
        if let Some(uid) = updated.metadata.uid.clone() {
            self.written
                .lock()
                .expect("no panics while holding the lock")
                .insert(uid, Arc::new(updated));
        }
    }

    /// Marks a webhook attempt of `uid` in flight; false when one already is.
    pub fn begin_delivery(&self, uid: &str) -> bool {
        self.deliveries
            .lock()
            .expect("no panics while holding the lock")
            .insert(uid.to_owned())
    }

    /// Marks the webhook attempt of `uid` done.
    pub fn end_delivery(&self, uid: &str) {
        self.deliveries
            .lock()
            .expect("no panics while holding the lock")
            .remove(uid);
    }

    /// Forgets everything about an execution that is gone.
    pub fn forget(&self, uid: &str) {
        self.written
            .lock()
            .expect("no panics while holding the lock")
            .remove(uid);
        self.created_jobs.forget(uid);
        self.handed_reports.forget(uid);
        self.reset_backoff(uid);
    }

    /// Forgets the failures of an execution (its reconcile succeeded, or it is gone), so its
    /// next failure is retried after the shortest wait again.
    pub fn reset_backoff(&self, uid: &str) {
        self.failures
            .lock()
            .expect("no panics while holding the lock")
            .remove(uid);
    }

    /// How many reconciles of the object with `uid` failed in a row so far.
    pub fn failures_of(&self, uid: &str) -> u32 {
        self.failures
            .lock()
            .expect("no panics while holding the lock")
            .get(uid)
            .copied()
            .unwrap_or(0)
    }

    /// Counts and logs a failed reconcile of `object` (`what` names the loop) and retries it
    /// with exponential backoff.
    pub fn retry_failed<K: ResourceExt>(&self, what: &str, object: &K, error: &Error) -> Action {
        let label = error.metric_label();
        self.metrics.reconcile_failed(label);
        let delay = self.backoff(&object.uid().unwrap_or_default());
        warn!(
            object = %object.name_any(),
            namespace = object.namespace().unwrap_or_default(),
            reason = label,
            retry_in_seconds = delay.as_secs(),
            "{what} failed: {error}"
        );
        Action::requeue(delay)
    }

    /// How long to wait before retrying an object that just failed: 1s, 2s, 4s, ... 5m.
    pub fn backoff(&self, uid: &str) -> Duration {
        let mut failures = self
            .failures
            .lock()
            .expect("no panics while holding the lock");
        let count = failures.entry(uid.to_owned()).or_insert(0);
        *count = count.saturating_add(1);
        Duration::from_secs(1u64 << (*count - 1).min(9)).min(MAX_BACKOFF)
    }
}
