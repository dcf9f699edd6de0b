//! The leader's periodic store sweep: every interval, what the cluster still references is read and the store's unreferenced objects older than the grace period are removed, with metrics.

use std::sync::Arc;

use jiff::Timestamp;
use kube::Client;
use tracing::{info, warn};

use super::config::StoreSweepSchedule;
use super::metrics::Metrics;
use crate::cluster::references::references;
use crate::retention::sweep_store::sweep_store;
use crate::store::Store;

/// Sweeps `store` (only `namespace`'s part, for a controller of one namespace) every
/// `schedule.interval`, forever; a failed sweep is logged, counted and tried again at the next.
pub async fn run(
    client: Client,
    store: Store,
    namespace: Option<String>,
    schedule: StoreSweepSchedule,
    metrics: Arc<Metrics>,
) {
    let mut ticks = tokio::time::interval(schedule.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let namespace = namespace.as_deref();
        let outcome = match references(&client, namespace).await {
            Ok(references) => sweep_store(
                &store,
                namespace,
                &references,
                schedule.grace,
                false,
                Timestamp::now(),
            )
            .await
            .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(report) => {
                metrics.swept(&report);
                info!(
                    removed_objects = report.removed_objects(),
                    removed_bytes = report.removed_bytes(),
                    referenced = report.referenced,
                    in_grace = report.in_grace,
                    "store swept"
                );
            }
            Err(error) => {
                metrics.sweep_failed();
                warn!(
                    "store sweep failed, trying again in {:?}: {error}",
                    schedule.interval
                );
            }
        }
    }
}
