//! What the cluster benchmarks share: watches that record when each Job and each Job's first pod appeared, and this process's memory (their writes are tallied by `tests/support/writes.rs`).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;

/// When each Job name was first seen by a watch.
pub type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// Records, from a watch of the Jobs in `ns`, when each was first seen.
pub fn watch_jobs(client: &Client, ns: &str) -> Seen {
    first_seen(Api::<Job>::namespaced(client.clone(), ns), |job| {
        Some(job.name_any())
    })
}

/// The label the Job controller puts on a Job's pods, naming the Job.
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// Records, from a watch of the pods' metadata in `ns`, when the first pod of each Job (by
/// name) was seen.
pub fn watch_pods(client: &Client, ns: &str) -> Seen {
    let pods = Api::<PartialObjectMeta<Pod>>::namespaced(client.clone(), ns);
    first_seen(pods, |pod| pod.labels().get(JOB_NAME_LABEL).cloned())
}

/// Records, from a watch of `api`, when each `key` (of the objects that have one) was first
/// seen.
fn first_seen<K>(api: Api<K>, key: impl Fn(&K) -> Option<String> + Send + 'static) -> Seen
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K::DynamicType: Default,
{
    let seen: Seen = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(object)) = events.try_next().await {
            if let Some(key) = key(&object) {
                record.lock().await.entry(key).or_insert_with(Instant::now);
            }
        }
    });
    seen
}

/// This process's resident memory in KiB (`VmRSS`), or its peak (`VmHWM`).
pub fn memory_kib(field: &str) -> u64 {
    super::control_plane::status_kib("self", field)
}
