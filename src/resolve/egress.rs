//! Checks of egress rules: each range parses, each host is a DNS name and each port is a TCP port; an execution's list narrows its environment's, never widens it; against the controller's outbound policy, no range lies inside a denied one; host names need the egress proxy. [`host_allowed`] is the proxy's match.

use std::net::IpAddr;

use super::outbound_policy::{Cidr, OutboundPolicy};
use super::problems::Problem;
use super::snapshot::Snapshot;
use crate::api::{Egress, EgressHost, EgressRule};

/// Why `host` is not a host rule's name, if it is not.
fn host_problem(host: &str) -> Option<String> {
    let name = host.strip_prefix("*.").unwrap_or(host);
    if name.parse::<IpAddr>().is_ok() || name.trim_matches(['[', ']']).parse::<IpAddr>().is_ok() {
        return Some(format!(
            "{host:?} is an address: list it as a range in allow[].cidr (hosts are names)"
        ));
    }
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if host.len() > 253 || !name.contains('.') || !name.split('.').all(label_ok) {
        return Some(format!(
            "{host:?} is not a host name: lowercase letters, digits and '-' in dot-separated \
             labels, with at least one dot (api.example.com), or *. and one for every name \
             below it"
        ));
    }
    None
}

/// Whether `rule` lets a caller reach `host` (lowercase, without a trailing dot) on `port`:
/// the same name, or a name below a `*.` rule's.
fn host_matches(rule: &EgressHost, host: &str, port: u16) -> bool {
    let name = match rule.host.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .is_some_and(|below| below.len() > 1 && below.ends_with('.')),
        None => rule.host == host,
    };
    name && rule.allowed_ports().contains(&port)
}

/// Whether `hosts` let a caller reach `host` on `port` (the egress proxy's decision; the
/// name is compared in lowercase, without a trailing dot).
pub fn host_allowed(hosts: &[EgressHost], host: &str, port: u16) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    hosts.iter().any(|rule| host_matches(rule, &host, port))
}

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
    for (i, rule) in egress.hosts.iter().enumerate() {
        if let Some(problem) = host_problem(&rule.host) {
            problems.push(Problem::new(format!("{field}.hosts[{i}].host"), problem));
        }
        if rule.ports.contains(&0) {
            problems.push(Problem::new(
                format!("{field}.hosts[{i}].ports"),
                "0 is not a TCP port: ports are 1-65535 (leave the list out for 443 and 80)",
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
    for (i, rule) in narrowed.hosts.iter().enumerate() {
        // A rule is inside when every name it covers and every port is: a plain name by its
        // own match, a `*.` rule by a `*.` rule of the environment at or above it.
        let covered_name = match rule.host.strip_prefix("*.") {
            Some(suffix) => format!("x.{suffix}"),
            None => rule.host.clone(),
        };
        let inside = environment.hosts.iter().any(|allowed| {
            let wildcard_ok = !rule.host.starts_with("*.") || allowed.host.starts_with("*.");
            wildcard_ok
                && rule
                    .allowed_ports()
                    .iter()
                    .all(|port| host_matches(allowed, &covered_name, *port))
        });
        if !inside {
            problems.push(Problem::new(
                format!("{field}.hosts[{i}]"),
                format!(
                    "{:?} on ports {:?} is not inside the environment's egress hosts: an \
                     execution narrows its environment's list, never widens it",
                    rule.host,
                    rule.allowed_ports()
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

/// A problem when `snapshot` lists host names but no egress proxy serves them (egress is
/// open, or the installation runs no proxy).
pub fn hosts_without_proxy(snapshot: &Snapshot, proxy_serves: bool) -> Option<Problem> {
    if snapshot.egress.hosts.is_empty() || proxy_serves {
        return None;
    }
    let field = snapshot.environment_field("egress.hosts");
    Some(Problem::new(
        field,
        "host names are reached through errand's egress proxy, which this installation does \
         not run with egress denied by default (the chart's egressProxy.enabled with \
         networkPolicy.executionEgress deny); list address ranges in allow[] instead",
    ))
}

/// The egress ranges of `snapshot` that lie wholly inside a range `policy` denies; each
/// problem names what the range is, not its addresses.
pub fn against_policy(snapshot: &Snapshot, policy: &OutboundPolicy) -> Vec<Problem> {
    let field = snapshot.environment_field("egress");
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
    fn host_rules_take_lowercase_names_with_a_dot_and_refuse_addresses_naming_the_field() {
        let rules = Egress::default().with_hosts(&[
            ("api.example.com", &[443]),
            ("*.example.org", &[]),
            ("203.0.113.7", &[]),
            ("Example.com", &[]),
            ("intranet", &[0]),
            ("*.", &[]),
        ]);
        let problems = egress(&rules, "spec.egress");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.egress.hosts[2].host",
                "spec.egress.hosts[3].host",
                "spec.egress.hosts[4].host",
                "spec.egress.hosts[4].ports",
                "spec.egress.hosts[5].host",
            ]
        );
        assert!(problems[0].message.contains("allow[].cidr"), "{problems:?}");
    }

    #[test]
    fn a_host_matches_its_own_name_or_a_name_below_a_wildcard_on_an_allowed_port() {
        let hosts = Egress::default()
            .with_hosts(&[("api.example.com", &[443]), ("*.example.org", &[])])
            .hosts;
        for (host, port, allowed) in [
            ("api.example.com", 443, true),
            ("API.example.com.", 443, true),
            ("api.example.com", 80, false),
            ("example.com", 443, false),
            ("evilapi.example.com", 443, false),
            ("a.example.org", 80, true),
            ("a.b.example.org", 443, true),
            ("example.org", 443, false),
            ("a.example.org", 22, false),
            ("aexample.org", 443, false),
            ("a.example.org.evil.net", 443, false),
        ] {
            assert_eq!(host_allowed(&hosts, host, port), allowed, "{host}:{port}");
        }
    }

    #[test]
    fn an_execution_narrows_host_rules_and_a_widening_one_is_refused_naming_it() {
        let environment =
            Egress::default().with_hosts(&[("api.example.com", &[443]), ("*.example.org", &[])]);
        let field = "spec.egress";
        let narrow =
            Egress::default().with_hosts(&[("a.example.org", &[443]), ("*.b.example.org", &[80])]);
        assert_eq!(
            narrowed(&environment, Some(&narrow), field),
            (narrow, vec![])
        );
        let wide = Egress::default().with_hosts(&[
            ("api.example.com", &[]),
            ("*.example.com", &[443]),
            ("example.org", &[443]),
            ("*.example.org", &[22]),
        ]);
        let (kept, problems) = narrowed(&environment, Some(&wide), field);
        assert_eq!(kept, environment);
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.egress.hosts[0]",
                "spec.egress.hosts[1]",
                "spec.egress.hosts[2]",
                "spec.egress.hosts[3]"
            ]
        );
    }

    #[test]
    fn host_names_without_a_proxy_are_refused_naming_the_environment() {
        let mut snapshot = Snapshot::test();
        assert_eq!(hosts_without_proxy(&snapshot, false), None);
        snapshot.egress = Egress::default().with_hosts(&[("api.example.com", &[])]);
        assert_eq!(hosts_without_proxy(&snapshot, true), None);
        let problem = hosts_without_proxy(&snapshot, false).unwrap();
        assert_eq!(problem.field, "AgentEnvironment \"prod\" spec.egress.hosts");
        assert!(
            problem.message.contains("egressProxy.enabled"),
            "{problem:?}"
        );
    }

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
