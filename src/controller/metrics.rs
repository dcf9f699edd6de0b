//! Prometheus metrics of the reconcilers: reconciles, the work-queue depth, errors by reason, durations, executions by phase, expired executions, the store sweep, grant issuance, and the latencies and sizes users feel (queue wait, start latency, run duration, results bytes).

use std::sync::Arc;
use std::time::Instant;

use jiff::Timestamp;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::execution::status::Timings;
use super::execution::work_queue::WorkQueue;
use crate::api::contract::{ConditionType, Reason};
use crate::api::{AgentExecution, Phase};
use crate::cluster::metrics::MetricsRegistry;
use crate::resolve::conditions;
use crate::retention::sweep_store::SweepReport;

/// Label of an error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The error's [`metric_label`](super::error::Error::metric_label).
    pub reason: String,
}

/// Label of the expired-executions counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LifetimeLabels {
    /// Who set the lifetime that ran out: `execution`, `namespace` or `controller`.
    pub source: String,
}

/// Label of the store sweep's, the grants' and the run-ended reports' counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `ok` or `failed` (the run-ended reports: see `run_ended_reports`).
    pub outcome: String,
}

/// Label of the store sweep's removal counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// What was removed: `results`, `fileset` or `upload`.
    pub kind: String,
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
    longest_starting: Gauge<f64, std::sync::atomic::AtomicU64>,
    job_created_after: Histogram,
    completed_after: Histogram,
    queue_wait: Histogram,
    start_latency: Histogram,
    run_duration: Histogram,
    results_bytes: Histogram,
    grants: Family<OutcomeLabels, Counter>,
    grant_duration: Histogram,
    run_ended_reports: Family<OutcomeLabels, Counter>,
    expired: Family<LifetimeLabels, Counter>,
    sweeps: Family<OutcomeLabels, Counter>,
    swept_objects: Family<KindLabels, Counter>,
    swept_bytes: Family<KindLabels, Counter>,
    schedule_created: Counter,
    schedule_missed: Counter,
    schedule_held: Counter,
    /// The executions waiting for a reconcile.
    pub work_queue: WorkQueue,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            errors: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            executions: Family::default(),
            longest_starting: Gauge::default(),
            job_created_after: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            completed_after: Histogram::new(exponential_buckets(1.0, 2.0, 16)),
            // 1 s to about 9 days: Kueue may hold a Job for long.
            queue_wait: Histogram::new(exponential_buckets(1.0, 2.0, 20)),
            // 0.5 s to about 4.5 h: scheduling, image pulls and staging.
            start_latency: Histogram::new(exponential_buckets(0.5, 2.0, 16)),
            // 1 s to about 9 days: up to the longest timeout (7 days).
            run_duration: Histogram::new(exponential_buckets(1.0, 2.0, 20)),
            // 1 KiB to 256 GiB, by factors of 4.
            results_bytes: Histogram::new(exponential_buckets(1024.0, 4.0, 15)),
            grants: Family::default(),
            grant_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            run_ended_reports: Family::default(),
            expired: Family::default(),
            sweeps: Family::default(),
            swept_objects: Family::default(),
            swept_bytes: Family::default(),
            schedule_created: Counter::default(),
            schedule_missed: Counter::default(),
            schedule_held: Counter::default(),
            work_queue: WorkQueue::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric on `registry`.
    pub fn register(&self, registry: &mut MetricsRegistry) {
        registry.register("reconciles", "Reconciles started", self.reconciles.clone());
        self.work_queue.register(registry);
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
            "longest_starting_seconds",
            "How long the oldest AgentExecution in phase Starting and not held by Kueue has been created (0: none)",
            self.longest_starting.clone(),
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
        registry.register(
            "queue_wait_seconds",
            "Time Kueue held an AgentExecution's Job before admitting it (condition Started: Queued)",
            self.queue_wait.clone(),
        );
        registry.register(
            "start_latency_seconds",
            "Time from an AgentExecution's creation to its agent's start (queueing, scheduling, image pull, staging)",
            self.start_latency.clone(),
        );
        registry.register(
            "run_duration_seconds",
            "Time an agent ran, from its start to the execution's terminal phase",
            self.run_duration.clone(),
        );
        registry.register(
            "results_bytes",
            "Bytes of the results an AgentExecution saved, at its terminal phase",
            self.results_bytes.clone(),
        );
        registry.register(
            "grants_issued",
            "Sets of signed store URLs issued to executions, by outcome",
            self.grants.clone(),
        );
        registry.register(
            "run_ended_reports",
            "Runners' run-ended reports, by outcome: handed_over (to this replica's reconciler), \
             recorded (on the execution), gone, refused, unavailable",
            self.run_ended_reports.clone(),
        );
        registry.register(
            "grant_issue_duration_seconds",
            "How long signing one execution's store URLs took",
            self.grant_duration.clone(),
        );
        registry.register(
            "executions_expired",
            "Finished AgentExecutions deleted when their lifetime (ttlSecondsAfterFinished) ran out, by who set it",
            self.expired.clone(),
        );
        registry.register(
            "store_sweeps",
            "Periodic store sweeps, by outcome",
            self.sweeps.clone(),
        );
        registry.register(
            "store_swept_objects",
            "Store objects the sweep removed because nothing referenced them, by kind",
            self.swept_objects.clone(),
        );
        registry.register(
            "store_swept_bytes",
            "Bytes of the store objects the sweep removed, by kind",
            self.swept_bytes.clone(),
        );
        registry.register(
            "schedule_executions_created",
            "Executions AgentSchedules created when they were due",
            self.schedule_created.clone(),
        );
        registry.register(
            "schedule_runs_missed",
            "Scheduled times of AgentSchedules that passed without a run (a controller outage, past startingDeadlineSeconds, or refused at create)",
            self.schedule_missed.clone(),
        );
        registry.register(
            "schedule_runs_held",
            "Due runs of AgentSchedules that concurrencyPolicy Forbid held while another ran",
            self.schedule_held.clone(),
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

    /// Counts an execution a schedule created.
    pub fn schedule_run_created(&self) {
        self.schedule_created.inc();
    }

    /// Counts `n` scheduled times that passed without a run.
    pub fn schedule_runs_missed(&self, n: u64) {
        self.schedule_missed.inc_by(n);
    }

    /// Counts a due run that `Forbid` held.
    pub fn schedule_run_held(&self) {
        self.schedule_held.inc();
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

    /// Records what a status change showed (see [`Timings`]).
    pub fn observe(&self, timings: &Timings) {
        let observed = [
            (&self.queue_wait, timings.queue_wait),
            (&self.start_latency, timings.start_latency),
            (&self.run_duration, timings.run_duration),
            (&self.completed_after, timings.completed_after),
            (&self.results_bytes, timings.results_bytes.map(|b| b as f64)),
        ];
        for (histogram, value) in observed {
            if let Some(value) = value {
                histogram.observe(value);
            }
        }
    }

    /// Counts one execution's grants issued (or failed) after `seconds` of signing.
    pub fn grants_issued(&self, seconds: f64, ok: bool) {
        self.grants
            .get_or_create(&OutcomeLabels {
                outcome: if ok { "ok" } else { "failed" }.to_owned(),
            })
            .inc();
        self.grant_duration.observe(seconds);
    }

    /// Counts one run-ended report answered with `outcome`.
    pub fn run_ended_report(&self, outcome: &str) {
        self.run_ended_reports
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Counts an execution deleted because its lifetime, set by `source`, ran out.
    pub fn expired(&self, source: &str) {
        self.expired
            .get_or_create(&LifetimeLabels {
                source: source.to_owned(),
            })
            .inc();
    }

    /// Counts a store sweep that ran, and what it removed.
    pub fn swept(&self, report: &SweepReport) {
        self.sweep_outcome("ok");
        for (kind, tally) in &report.removed {
            let labels = KindLabels {
                kind: (*kind).to_owned(),
            };
            self.swept_objects
                .get_or_create(&labels)
                .inc_by(tally.objects as u64);
            self.swept_bytes.get_or_create(&labels).inc_by(tally.bytes);
        }
    }

    /// Counts a store sweep that failed.
    pub fn sweep_failed(&self) {
        self.sweep_outcome("failed");
    }

    fn sweep_outcome(&self, outcome: &str) {
        self.sweeps
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Sets the executions-by-phase gauge to the phases of `executions`, as they are now, and
    /// the age of the oldest one still Starting that Kueue does not hold (a queued execution
    /// waits for quota, which `queue_wait_seconds` shows).
    pub fn count_phases(&self, executions: &[Arc<AgentExecution>], now: Timestamp) {
        self.executions.clear();
        let mut longest_starting = 0.0_f64;
        for execution in executions {
            let status = execution.status.as_ref();
            let phase = status.and_then(|s| s.phase);
            self.executions
                .get_or_create(&PhaseLabels {
                    phase: phase.map_or("None", Phase::as_str).to_owned(),
                })
                .inc();
            let queued = status
                .and_then(|s| conditions::get(&s.conditions, ConditionType::Started))
                .is_some_and(|c| c.reason == Reason::Queued.as_str());
            if let (Some(Phase::Starting), false, Some(created)) =
                (phase, queued, &execution.metadata.creation_timestamp)
            {
                let age = now.duration_since(created.0).as_secs_f64();
                longest_starting = longest_starting.max(age);
            }
        }
        self.longest_starting.set(longest_starting);
    }
}
