//! Prometheus metrics of the reconcilers: reconciles, errors by reason, durations, executions by phase, and the latencies users feel.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::api::{AgentExecution, Phase};
use crate::cluster::metrics::MetricsRegistry;

/// Label of an error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The error's [`metric_label`](super::error::Error::metric_label).
    pub reason: String,
}

/// Label of the executions-by-phase gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The phase (`None` before the first status).
    pub phase: String,
}

/// Every metric the reconcilers export; they are exported once [`Metrics::register`] has put
/// them on the process's registry.
pub struct Metrics {
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Histogram,
    executions: Family<PhaseLabels, Gauge>,
    job_created_after: Histogram,
    completed_after: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            errors: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            executions: Family::default(),
            job_created_after: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            completed_after: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
        }
    }
}

impl Metrics {
    /// Registers every metric on `registry`.
    pub fn register(&self, registry: &mut MetricsRegistry) {
        registry.register("reconciles", "Reconciles started", self.reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by reason",
            self.errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "How long a reconcile took",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "executions",
            "AgentExecutions by phase",
            self.executions.clone(),
        );
        registry.register(
            "job_created_after_seconds",
            "Time from an AgentExecution's creation to its Job's creation",
            self.job_created_after.clone(),
        );
        registry.register(
            "completed_after_seconds",
            "Time from an AgentExecution's creation to its terminal phase",
            self.completed_after.clone(),
        );
    }
}

/// Observes a reconcile's duration when dropped, so every exit path is timed.
pub struct ReconcileTimer {
    metrics: Arc<Metrics>,
    started: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.metrics
            .reconcile_duration
            .observe(self.started.elapsed().as_secs_f64());
    }
}

impl Metrics {
    /// Counts a reconcile and times it until the returned guard drops.
    pub fn reconcile_started(self: &Arc<Self>) -> ReconcileTimer {
        self.reconciles.inc();
        ReconcileTimer {
            metrics: Arc::clone(self),
            started: Instant::now(),
        }
    }

    /// Counts a failed reconcile.
    pub fn reconcile_failed(&self, reason: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Records the time from an execution's creation to its Job's creation.
    pub fn job_created(&self, seconds: f64) {
        self.job_created_after.observe(seconds.max(0.0));
    }

    /// Records the time from an execution's creation to its terminal phase.
    pub fn completed(&self, seconds: f64) {
        self.completed_after.observe(seconds.max(0.0));
    }

    /// Sets the executions-by-phase gauge to the phases of `executions`, as they are now.
    pub fn count_phases(&self, executions: &[Arc<AgentExecution>]) {
        self.executions.clear();
        for execution in executions {
            let phase = execution
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map_or("None", phase_label);
            self.executions
                .get_or_create(&PhaseLabels {
                    phase: phase.to_owned(),
                })
                .inc();
        }
    }
}

fn phase_label(phase: Phase) -> &'static str {
    match phase {
        Phase::Pending => "Pending",
        Phase::Queued => "Queued",
        Phase::Starting => "Starting",
        Phase::Running => "Running",
        Phase::Succeeded => "Succeeded",
        Phase::Failed => "Failed",
        Phase::Cancelled => "Cancelled",
    }
}
