//! What the cluster benchmarks share: watches that record when each Job and each Job's first pod appeared, and this process's memory (their writes are tallied by `tests/support/writes.rs`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Mutex;

/// When each Job name was first seen by a watch.
pub type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// Records, from a watch of the Jobs in `ns`, when each was first seen.
pub fn watch_jobs(client: &Client, ns: &str) -> Seen {
    let seen: Seen = Arc::default();
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    let record = seen.clone();
    tokio::spawn(async move {
        let mut events = watcher(jobs, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(job)) = events.try_next().await {
            record
                .lock()
                .await
                .entry(job.name_any())
                .or_insert_with(Instant::now);
        }
    });
    seen
}

/// The label the Job controller puts on a Job's pods, naming the Job.
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// Records, from a watch of the pods' metadata in `ns`, when the first pod of each Job (by
/// name) was seen.
pub fn watch_pods(client: &Client, ns: &str) -> Seen {
    let seen: Seen = Arc::default();
    let pods = Api::<PartialObjectMeta<Pod>>::namespaced(client.clone(), ns);
    let record = seen.clone();
    tokio::spawn(async move {
        let mut events = watcher(pods, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(pod)) = events.try_next().await {
            if let Some(job) = pod.labels().get(JOB_NAME_LABEL) {
                record
                    .lock()
                    .await
                    .entry(job.clone())
                    .or_insert_with(Instant::now);
            }
        }
    });
    seen
}

/// This process's resident memory in KiB (`VmRSS`), or its peak (`VmHWM`).
pub fn memory_kib(field: &str) -> u64 {
    super::control_plane::status_kib("self", field)
}
