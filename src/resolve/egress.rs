//! Checks of an environment's egress rules: each range parses and each port is a TCP port; against the controller's outbound policy, no range lies inside a denied one.

use super::outbound_policy::{Cidr, OutboundPolicy};
use super::problems::Problem;
use super::snapshot::Snapshot;
use crate::api::Egress;

/// The problems of `egress` (at `field`) on its own.
pub fn egress(egress: &Egress, field: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (i, rule) in egress.allow.iter().enumerate() {
        if let Err(e) = rule.cidr.parse::<Cidr>() {
            problems.push(Problem::new(
                format!("{field}.allow[{i}].cidr"),
                e.to_string(),
            ));
        }
        if rule.ports.contains(&0) {
            problems.push(Problem::new(
                format!("{field}.allow[{i}].ports"),
                "0 is not a TCP port: ports are 1-65535 (leave the list out for every port)",
            ));
        }
    }
    problems
}

/// The egress ranges of `snapshot` that lie wholly inside a range `policy` denies; each
/// problem names what the range is, not its addresses.
pub fn against_policy(snapshot: &Snapshot, policy: &OutboundPolicy) -> Vec<Problem> {
    let field = match &snapshot.environment {
        Some(name) => format!("AgentEnvironment {name:?} spec.egress"),
        None => "spec.environment.egress".to_owned(),
    };
    snapshot
        .egress
        .allow
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| {
            let range = rule.cidr.parse::<Cidr>().ok()?;
            let denied = policy.carve(&range).err()?;
            Some(Problem::new(
                format!("{field}.allow[{i}].cidr"),
                format!(
                    "{:?} is inside {}, which executions may not reach; an operator allows a \
                     range back with the chart's outbound.allow (--outbound-allow)",
                    rule.cidr, denied.what
                ),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_that_does_not_parse_and_port_zero_are_refused_naming_the_field() {
        let problems = egress(
            &Egress::of(&[
                ("203.0.113.0/24", &[443]),
                ("example.com", &[]),
                ("10.0.0.0/99", &[0]),
            ]),
            "spec.environment.egress",
        );
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.environment.egress.allow[1].cidr",
                "spec.environment.egress.allow[2].cidr",
                "spec.environment.egress.allow[2].ports"
            ]
        );
        assert!(
            problems[0]
                .message
                .contains("\"example.com\" is not an address range"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_range_inside_a_denied_one_is_refused_naming_what_it_is_but_not_its_addresses() {
        let mut snapshot = Snapshot::test();
        snapshot.egress = Egress::of(&[("203.0.113.0/24", &[]), ("169.254.169.254/32", &[80])]);
        let problems = against_policy(&snapshot, &OutboundPolicy::default());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            problems[0].field,
            "AgentEnvironment \"prod\" spec.egress.allow[1].cidr"
        );
        assert!(
            problems[0].message.contains("link-local (cloud metadata)"),
            "{problems:?}"
        );
        assert!(!problems[0].message.contains("169.254.0.0"), "{problems:?}");
        // The operator's allow list lets it back.
        let allowed = OutboundPolicy::default().allow("169.254.169.254".parse().unwrap());
        assert!(against_policy(&snapshot, &allowed).is_empty());
    }
}
