//! The AgentSchedule reconciler: executions created from a template on a cron schedule, with CronJob's semantics.
//!
//! The pure parts are shared with the local backend: [`crate::resolve::cron`] (when a
//! schedule fires), [`crate::resolve::schedule`] (what is due, held, missed, replaced or past
//! the history limits) and [`crate::resolve::schedule::status`] (the status it renders);
//! [`reconcile`] is the shell that creates, cancels, deletes and writes.

pub mod reconcile;

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use kube::Client;
use kube::runtime::controller::{self, Controller};
use kube::runtime::watcher;

use crate::api::contract::SCHEDULE_LABEL;
use crate::api::{AgentExecution, AgentSchedule};
use crate::cluster::scope::Namespaces;
use crate::cluster::watches;
use crate::controller::metrics::Metrics;
use reconcile::ScheduleContext;

/// Reconciles the AgentSchedules of `namespaces` until `shutdown`.
pub async fn run(
    client: Client,
    namespaces: Namespaces,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (schedules, schedule_stream) = watches::cache(
        namespaces.watches::<AgentSchedule>(&client, &watcher::Config::default()),
        |_| {},
    );
    // Only the executions schedules created: a small watch of its own.
    let (runs, runs_changed) = watches::cache(
        namespaces
            .watches::<AgentExecution>(&client, &watcher::Config::default().labels(SCHEDULE_LABEL)),
        |_| {},
    );
    let ctx = Arc::new(ScheduleContext {
        client,
        runs,
        metrics,
    });
    Controller::for_stream(schedule_stream, schedules)
        .owns_stream(runs_changed)
        .with_config(controller::Config::default().concurrency(8))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| crate::controller::log_outcome("schedule", result))
        .await;
}
