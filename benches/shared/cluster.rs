//! What the cluster benchmarks share: a client whose writes are counted, a watch that records when each Job appeared, and this process's memory.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::Mutex;

/// When each Job name was first seen by a watch.
pub type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// A client of `kubeconfig` whose writes are counted: its requests other than GETs (reads,
/// lists, watches) and TokenReviews (the grant endpoint's check of a pod's token, which the API
/// server answers without storing anything).
pub async fn counting_client(kubeconfig: &Path, writes: Arc<AtomicUsize>) -> Client {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig).expect("the kubeconfig reads"),
        &Default::default(),
    )
    .await
    .expect("a client config");
    let count =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            if request.method() != http::Method::GET
                && !request.uri().path().ends_with("/tokenreviews")
            {
                writes.fetch_add(1, Ordering::SeqCst);
            }
            request
        });
    kube::client::ClientBuilder::try_from(config)
        .expect("a client")
        .with_layer(&count)
        .build()
}

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

/// This process's resident memory in KiB (`VmRSS`), or its peak (`VmHWM`).
pub fn memory_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
