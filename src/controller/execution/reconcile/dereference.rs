//! Dereference: read what the execution names (to resolve its spec) and what became of its Job, its pods, Kueue's Workload for the Job and, when a start timed out, their (or the Job's) Warning events.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::ListParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use super::Reconciler;
use crate::cluster::catalog;
use crate::cluster::kueue::Workload;
use crate::controller::error::{Error, Result};
use crate::controller::execution::status::Warning;
use crate::controller::names;
use crate::resolve::{InvalidSpec, Snapshot};

/// The execution's Job and pods, as the caches (or, for a Job missing from its cache, the
/// API server) show them.
pub(super) struct Observed {
    /// The Job's name.
    pub job_name: String,
    /// The Job, if it exists and is the execution's.
    pub job: Option<Arc<Job>>,
    /// The execution's pods.
    pub pods: Vec<Arc<Pod>>,
    /// Kueue's Workload for the Job, when Kueue runs and has created one.
    pub workload: Option<Arc<Workload>>,
}

impl Observed {
    /// The pods, borrowed.
    pub fn pods(&self) -> Vec<&Pod> {
        self.pods.iter().map(AsRef::as_ref).collect()
    }
}

impl Reconciler<'_> {
    /// The execution's spec resolved against the objects it names. The outer error is an API
    /// failure; the inner one is the spec's own problems.
    pub(super) async fn resolve(&self) -> Result<Result<Snapshot, InvalidSpec>> {
        let resolution = catalog::resolve(
            &self.ctx.client,
            &self.ctx.catalog,
            &self.owner.namespace,
            &self.execution.spec,
        )
        .await?;
        Ok(resolution)
    }

    /// The execution's Job and pods.
    pub(super) async fn observe(&self) -> Result<Observed> {
        let namespace = self.owner.namespace.as_str();
        let ctx = self.ctx;
        // Right after a restart the caches may still be filling; a missing pod must not read
        // as a pod that has not started yet.
        ctx.caches_filled().await?;
        let job_name = self
            .execution
            .status
            .as_ref()
            .and_then(|s| s.job_name.clone())
            .unwrap_or_else(|| names::job_name(&self.owner.name));
        let uid = &self.owner.uid;
        let owned = |job: &Job| job.owner_references().iter().any(|o| &o.uid == uid);
        let cached = ctx
            .jobs
            .get(&ObjectRef::new(&job_name).within(namespace))
            .filter(|job| owned(job));
        let job = match cached.or_else(|| ctx.created_jobs.get(uid, &job_name)) {
            Some(job) => Some(job),
            // Neither cached nor just created here: the Job is gone, or the cache lags behind
            // one created before a restart. Ask before concluding it is gone.
            None => Api::<Job>::namespaced(ctx.client.clone(), namespace)
                .get_opt(&job_name)
                .await
                .map_err(Error::kube(format!("reading Job {job_name}")))?
                .filter(|job| owned(job))
                .map(Arc::new),
        };
        let pods = ctx.pods.get(namespace, uid);
        let job_uid = job.as_ref().and_then(|j| j.metadata.uid.as_deref());
        let workload = ctx
            .workloads
            .as_ref()
            .zip(job_uid)
            .and_then(|(workloads, job_uid)| workloads.get(namespace, job_uid).pop());
        Ok(Observed {
            job_name,
            job,
            pods,
            workload,
        })
    }

    /// The Warning events about `pods`, or about the Job (`job_uid`) when no pod was created,
    /// oldest first: read only when a start timed out.
    pub(super) async fn warnings(
        &self,
        pods: &[&Pod],
        job_uid: Option<&str>,
    ) -> Result<Vec<Warning>> {
        let api = Api::<Event>::namespaced(self.ctx.client.clone(), &self.owner.namespace);
        let mut warnings = Vec::new();
        let pod_uids = pods.iter().filter_map(|p| p.metadata.uid.as_deref());
        let about: Vec<&str> = if pods.is_empty() {
            job_uid.into_iter().collect()
        } else {
            pod_uids.collect()
        };
        for uid in about {
            let params =
                ListParams::default().fields(&format!("involvedObject.uid={uid},type=Warning"));
            let mut events = api
                .list(&params)
                .await
                .map_err(Error::kube(format!("reading the events of {uid}")))?
                .items;
            events.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
            warnings.extend(events.iter().filter_map(Warning::from_event));
        }
        Ok(warnings)
    }
}
