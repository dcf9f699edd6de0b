//! The NetworkPolicy that closes an execution's pod to everything but DNS, errand's own endpoints and its environment's ranges (with what the controller denies cut out of them).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::child_meta;
use crate::api::contract;
use crate::controller::build::ExecutionOwner;
use crate::controller::config::ControllerConfig;
use crate::controller::names;
use crate::outbound::{Cidr, OutboundPolicy};
use crate::resolve::Snapshot;

/// The execution's egress NetworkPolicy, or `None` when the controller leaves egress open.
/// Admission refused ranges inside a denied one, so every range here has a rule.
pub fn network_policy(
    execution: &ExecutionOwner,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> Option<NetworkPolicy> {
    let egress = config.execution_egress.as_ref()?;
    let mut rules = vec![dns_rule()];
    rules.extend(controller_rule(&config.controller_url));
    rules.extend(egress.errand.iter().cloned());
    rules.extend(environment_rules(snapshot, &config.outbound));
    Some(NetworkPolicy {
        metadata: child_meta(
            execution,
            names::job_name(&execution.name),
            &snapshot.agent.name,
        ),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    contract::EXECUTION_UID_LABEL.to_owned(),
                    execution.uid.clone(),
                )])),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Egress".to_owned()]),
            egress: Some(rules),
            ingress: None,
        }),
    })
}

/// DNS: the cluster's `kube-dns` pods in kube-system, UDP and TCP 53.
fn dns_rule() -> NetworkPolicyEgressRule {
    let selector = |key: &str, value: &str| LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
        ..LabelSelector::default()
    };
    NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(selector("kubernetes.io/metadata.name", "kube-system")),
            pod_selector: Some(selector("k8s-app", "kube-dns")),
            ip_block: None,
        }]),
        ports: Some(
            ["UDP", "TCP"]
                .map(|protocol| NetworkPolicyPort {
                    port: Some(IntOrString::Int(53)),
                    protocol: Some(protocol.to_owned()),
                    end_port: None,
                })
                .into(),
        ),
    }
}

/// The controller's grant and blob endpoint, when its URL names an address (a name, such as
/// the chart's Service, is the operator's rule to give: a NetworkPolicy cannot select by name).
fn controller_rule(controller_url: &str) -> Option<NetworkPolicyEgressRule> {
    let url = url::Url::parse(controller_url).ok()?;
    let ip: IpAddr = match url.host()? {
        url::Host::Ipv4(v4) => v4.into(),
        url::Host::Ipv6(v6) => v6.into(),
        url::Host::Domain(_) => return None,
    };
    let host = Cidr::new(ip, if ip.is_ipv4() { 32 } else { 128 })?;
    Some(rule(host, Vec::new(), &[url.port_or_known_default()?]))
}

/// One rule per range of the run's environment, with what `outbound` denies inside it cut out.
fn environment_rules(
    snapshot: &Snapshot,
    outbound: &OutboundPolicy,
) -> Vec<NetworkPolicyEgressRule> {
    snapshot
        .egress
        .allow
        .iter()
        .filter_map(|allowed| {
            let range = allowed.cidr.parse::<Cidr>().ok()?;
            let cut = outbound.carve(&range).ok()?;
            Some(rule(range.network(), cut, &allowed.ports))
        })
        .collect()
}

/// TCP to `range` but `except`, on `ports` (every port when empty).
fn rule(range: Cidr, except: Vec<Cidr>, ports: &[u16]) -> NetworkPolicyEgressRule {
    NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: range.to_string(),
                except: (!except.is_empty())
                    .then(|| except.iter().map(ToString::to_string).collect()),
            }),
            ..NetworkPolicyPeer::default()
        }]),
        ports: (!ports.is_empty()).then(|| {
            ports
                .iter()
                .map(|port| NetworkPolicyPort {
                    port: Some(IntOrString::Int(i32::from(*port))),
                    protocol: Some("TCP".to_owned()),
                    end_port: None,
                })
                .collect()
        }),
    }
}
