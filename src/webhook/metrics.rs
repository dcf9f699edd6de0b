//! Prometheus metrics of the admission webhook: reviews answered by verdict, and how long they took.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::cluster::metrics::MetricsRegistry;

/// Label of the admission review counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    /// `allowed`, `invalid`, `malformed`, `unavailable` or `unreadable`.
    pub verdict: String,
}

/// Every metric the webhook exports; they are exported once [`AdmissionMetrics::register`] has
/// put them on the process's registry.
pub struct AdmissionMetrics {
    admissions: Family<VerdictLabels, Counter>,
    admission_duration: Histogram,
}

impl Default for AdmissionMetrics {
    fn default() -> Self {
        Self {
            admissions: Family::default(),
            admission_duration: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
        }
    }
}

impl AdmissionMetrics {
    /// Registers every metric on `registry`.
    pub fn register(&self, registry: &mut MetricsRegistry) {
        registry.register(
            "admission_reviews",
            "AgentExecution admission reviews answered by the webhook, by verdict",
            self.admissions.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "How long the webhook took to answer an admission review",
            self.admission_duration.clone(),
        );
    }

    /// Counts and times one admission review.
    pub fn reviewed(&self, verdict: &str, seconds: f64) {
        self.admissions
            .get_or_create(&VerdictLabels {
                verdict: verdict.to_owned(),
            })
            .inc();
        self.admission_duration.observe(seconds.max(0.0));
    }
}
