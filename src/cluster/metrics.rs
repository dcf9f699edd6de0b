//! The one Prometheus registry of the cluster process: each component registers its own metrics on it, and `/metrics` renders them together.

use prometheus_client::registry::{Metric, Registry};

/// The prefix of every metric name the process exports.
const PREFIX: &str = "errand_controller";

/// The registry every component's metrics are registered on, each named `errand_controller_*`.
pub struct MetricsRegistry {
    registry: Registry,
}

impl Default for MetricsRegistry {
    fn default() -> Self {
        Self {
            registry: Registry::with_prefix(PREFIX),
        }
    }
}

impl MetricsRegistry {
    /// Registers `metric` as `errand_controller_<name>` with its help text.
    pub fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        self.registry.register(name, help, metric);
    }

    /// Every registered metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[test]
    fn metrics_render_with_the_common_prefix() {
        let mut registry = MetricsRegistry::default();
        let counter = Counter::<u64>::default();
        registry.register("things", "Things counted", counter.clone());
        counter.inc();
        let text = registry.render();
        assert!(
            text.contains("# HELP errand_controller_things Things counted"),
            "{text}"
        );
        assert!(text.contains("errand_controller_things_total 1"), "{text}");
    }
}
