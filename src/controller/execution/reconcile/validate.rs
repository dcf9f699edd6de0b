//! Validate: the resolved snapshot completed with this cluster's defaults and checked against its limits, before anything is signed or created.

use crate::controller::config::ControllerConfig;
use crate::resolve::{InvalidSpec, RunLimits, Snapshot};

/// The snapshot the execution runs from: `snapshot` with the default queue, if it fits
/// `limits` (the same check the webhook makes at submission).
pub(super) fn validate(
    mut snapshot: Snapshot,
    config: &ControllerConfig,
    limits: &RunLimits,
) -> Result<Snapshot, InvalidSpec> {
    config.apply_default_queue(&mut snapshot);
    limits.check(&snapshot)?;
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_snapshot_gets_the_default_queue_and_a_run_too_long_for_the_urls_is_refused() {
        let mut config = ControllerConfig::new("errand.local/errand:dev");
        config.default_queue_name = Some("team-default".into());
        let mut limits = RunLimits {
            allowance: config.allowance(),
            max_url_lifetime_seconds: None,
            telemetry_configured: false,
            ..RunLimits::default()
        };
        // A 600s run with a 120s start timeout: the timeout alone fits 600s URLs, the whole
        // budget does not.
        let snapshot = Snapshot {
            timeout_seconds: 600,
            start_timeout_seconds: 120,
            ..Snapshot::test()
        };
        let valid = validate(snapshot.clone(), &config, &limits).unwrap();
        assert_eq!(valid.queue_name.as_deref(), Some("team-default"));

        limits.max_url_lifetime_seconds = Some(600);
        let invalid = validate(snapshot, &config, &limits).unwrap_err();
        assert_eq!(invalid.problems[0].field, "spec.timeoutSeconds");
    }
}
