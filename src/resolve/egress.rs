//! Checks of egress rules: each range parses and each port is a TCP port; an execution's list narrows its environment's, never widens it; against the controller's outbound policy, no range lies inside a denied one.

use super::outbound_policy::{Cidr, OutboundPolicy};
use super::problems::Problem;
use super::snapshot::Snapshot;
use crate::api::{Egress, EgressRule};

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

/// The egress a run gets: its environment's, or the `execution`'s own list when every
/// rule of it lies inside one of the environment's (range and ports); otherwise the
/// environment's, with a problem per rule that would widen it.
pub fn narrowed(
    environment: &Egress,
    execution: Option<&Egress>,
    field: &str,
) -> (Egress, Vec<Problem>) {
    let Some(narrowed) = execution else {
        return (environment.clone(), Vec::new());
    };
    let mut problems = egress(narrowed, field);
    if !problems.is_empty() {
        return (environment.clone(), problems);
    }
    let inside = |rule: &EgressRule| {
        let range = rule.cidr.parse::<Cidr>().ok();
        environment.allow.iter().any(|allowed| {
            let covers = match (allowed.cidr.parse::<Cidr>(), range) {
                (Ok(allowed), Some(range)) => allowed.covers(&range),
                _ => false,
            };
            let ports = allowed.ports.is_empty()
                || (!rule.ports.is_empty() && rule.ports.iter().all(|p| allowed.ports.contains(p)));
            covers && ports
        })
    };
    for (i, rule) in narrowed.allow.iter().enumerate() {
        if !inside(rule) {
            problems.push(Problem::new(
                format!("{field}.allow[{i}]"),
                format!(
                    "{:?} on {} is not inside the environment's egress: an execution narrows its \
                     environment's list, never widens it",
                    rule.cidr,
                    if rule.ports.is_empty() {
                        "every port".to_owned()
                    } else {
                        format!("ports {:?}", rule.ports)
                    }
                ),
            ));
        }
    }
    if problems.is_empty() {
        (narrowed.clone(), problems)
    } else {
        (environment.clone(), problems)
    }
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

    #[test]
    fn an_execution_narrows_its_environments_egress_and_may_not_widen_it() {
        let environment = Egress::of(&[("203.0.113.0/24", &[443, 8443]), ("198.51.100.0/24", &[])]);
        let field = "spec.egress";
        // Narrower: a part of a range on one of its ports, or any port where all are allowed.
        let narrow = Egress::of(&[("203.0.113.7/32", &[443]), ("198.51.100.0/25", &[])]);
        assert_eq!(
            narrowed(&environment, Some(&narrow), field),
            (narrow, vec![])
        );
        assert_eq!(
            narrowed(&environment, Some(&Egress::default()), field),
            (Egress::default(), vec![]),
            "an empty list allows nothing"
        );
        assert_eq!(
            narrowed(&environment, None, field),
            (environment.clone(), vec![])
        );
        // Wider: another range, another port, every port where the environment lists some.
        let wide = Egress::of(&[
            ("192.0.2.0/24", &[443]),
            ("203.0.113.0/24", &[22]),
            ("203.0.113.0/24", &[]),
        ]);
        let (kept, problems) = narrowed(&environment, Some(&wide), field);
        assert_eq!(kept, environment, "a refused list changes nothing");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.egress.allow[0]",
                "spec.egress.allow[1]",
                "spec.egress.allow[2]"
            ]
        );
        assert!(
            problems[2].message.contains("on every port is not inside")
                && problems[2]
                    .message
                    .ends_with("an execution narrows its environment's list, never widens it"),
            "{problems:?}"
        );
    }
}
