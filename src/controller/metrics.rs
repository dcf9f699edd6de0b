//! Prometheus metrics of the controller: reconciles, errors by reason, durations, executions by phase, admission reviews, and the latencies users feel.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api::{AgentExecution, Phase};

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

/// Label of the admission review counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    /// `allowed`, `invalid`, `malformed`, `unavailable` or `unreadable`.
    pub verdict: String,
}

/// Every metric the controller exports.
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Histogram,
    executions: Family<PhaseLabels, Gauge>,
    job_created_after: Histogram,
    completed_after: Histogram,
    admissions: Family<VerdictLabels, Counter>,
    admission_duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("errand_controller");
        let reconciles = Counter::default();
        registry.register("reconciles", "Reconciles started", reconciles.clone());
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by reason",
            errors.clone(),
        );
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "reconcile_duration_seconds",
            "How long a reconcile took",
            reconcile_duration.clone(),
        );
        let executions = Family::<PhaseLabels, Gauge>::default();
        registry.register("executions", "AgentExecutions by phase", executions.clone());
        let job_created_after = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register(
            "job_created_after_seconds",
            "Time from an AgentExecution's creation to its Job's creation",
            job_created_after.clone(),
        );
        let completed_after = Histogram::new(exponential_buckets(1.0, 2.0, 16));
        registry.register(
            "completed_after_seconds",
            "Time from an AgentExecution's creation to its terminal phase",
            completed_after.clone(),
        );
        let admissions = Family::<VerdictLabels, Counter>::default();
        registry.register(
            "admission_reviews",
            "AgentExecution admission reviews answered by the webhook, by verdict",
            admissions.clone(),
        );
        let admission_duration = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        registry.register(
            "admission_duration_seconds",
            "How long the webhook took to answer an admission review",
            admission_duration.clone(),
        );
        Self {
            registry,
            reconciles,
            errors,
            reconcile_duration,
            executions,
            job_created_after,
            completed_after,
            admissions,
            admission_duration,
        }
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

    /// Counts and times one admission review.
    pub fn admission_reviewed(&self, verdict: &str, seconds: f64) {
        self.admissions
            .get_or_create(&VerdictLabels {
                verdict: verdict.to_owned(),
            })
            .inc();
        self.admission_duration.observe(seconds.max(0.0));
    }

    /// The metrics in the Prometheus text format, with the phase gauge counted from
    /// `executions` first.
    pub fn render(&self, executions: &[Arc<AgentExecution>]) -> String {
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
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

fn phase_label(phase: Phase) -> &'static str {
    match phase {
        Phase::Pending => "Pending",
        Phase::Starting => "Starting",
        Phase::Running => "Running",
        Phase::Succeeded => "Succeeded",
        Phase::Failed => "Failed",
        Phase::Cancelled => "Cancelled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AgentExecutionStatus;

    fn execution(phase: Option<Phase>) -> Arc<AgentExecution> {
        Arc::new(AgentExecution {
            metadata: Default::default(),
            spec: Default::default(),
            status: Some(AgentExecutionStatus {
                phase,
                ..Default::default()
            }),
        })
    }

    #[test]
    fn the_text_format_has_every_metric() {
        let metrics = Arc::new(Metrics::default());
        drop(metrics.reconcile_started());
        metrics.reconcile_failed("conflict");
        metrics.job_created(0.02);
        metrics.completed(42.0);
        metrics.admission_reviewed("invalid", 0.002);
        let text = metrics.render(&[
            execution(Some(Phase::Running)),
            execution(Some(Phase::Running)),
            execution(None),
        ]);
        assert!(
            text.contains("errand_controller_reconciles_total 1"),
            "{text}"
        );
        assert!(text.contains("errand_controller_reconcile_errors_total{reason=\"conflict\"} 1"));
        assert!(text.contains("errand_controller_reconcile_duration_seconds_count 1"));
        assert!(text.contains("errand_controller_executions{phase=\"Running\"} 2"));
        assert!(text.contains("errand_controller_executions{phase=\"None\"} 1"));
        assert!(text.contains("errand_controller_job_created_after_seconds_count 1"));
        assert!(text.contains("errand_controller_completed_after_seconds_sum 42.0"));
        assert!(text.contains("errand_controller_admission_reviews_total{verdict=\"invalid\"} 1"));
        assert!(text.contains("errand_controller_admission_duration_seconds_count 1"));
        let later = metrics.render(&[execution(Some(Phase::Succeeded))]);
        assert!(!later.contains("phase=\"Running\""), "{later}");
    }
}
