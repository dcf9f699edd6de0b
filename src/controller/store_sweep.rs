//! The leader's periodic store sweep: every interval, what the cluster still references is read and the store's unreferenced objects older than the grace period are removed, with metrics.

use std::sync::Arc;

use jiff::Timestamp;
use kube::Client;
use tracing::{info, warn};

use super::config::StoreSweepSchedule;
use super::metrics::Metrics;
use crate::cluster::references::references;
use crate::cluster::scope::Namespaces;
use crate::retention::sweep_store::sweep_store;
use crate::store::Store;

/// Sweeps `store` (only the served namespaces' part, for a controller of some) every
/// `schedule.interval`, forever; a failed sweep is logged, counted and tried again at the next.
pub async fn run(
    client: Client,
    store: Store,
    namespaces: Namespaces,
    schedule: StoreSweepSchedule,
    metrics: Arc<Metrics>,
) {
    let mut ticks = tokio::time::interval(schedule.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let outcome = match references(&client, &namespaces).await {
            Ok(references) => sweep_store(
                &store,
                namespaces.names(),
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
