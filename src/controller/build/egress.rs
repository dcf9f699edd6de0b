//! The egress of an agent pod when the controller denies egress by default: the NetworkPolicy rules (DNS, errand's own endpoints, the egress proxy (for host names or model calls), the operator's rules and the environment's ranges with what the controller denies cut out of them), and, for a run with host names, the proxy settings its agent gets. Executions and deployments share them.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::model_credentials::model_proxy;
use crate::controller::config::{ControllerConfig, ExecutionEgress};
use crate::outbound::{Cidr, OutboundPolicy};
use crate::resolve::Snapshot;

/// Whether the pod talks to the controller (an execution's runner does: grants and blobs; a
/// deployment's agent server does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToController {
    /// Add the controller's URL when its host is an address.
    Yes,
    /// Leave it out.
    No,
}

/// The egress rules of a pod running `snapshot`, or `None` when the controller leaves egress
/// open. Admission refused ranges inside a denied one, so every range here has a rule.
pub fn egress_rules(
    snapshot: &Snapshot,
    config: &ControllerConfig,
    to_controller: ToController,
) -> Option<Vec<NetworkPolicyEgressRule>> {
    let ExecutionEgress { errand } = config.execution_egress.as_ref()?;
    let mut rules = vec![dns_rule()];
    if to_controller == ToController::Yes {
        rules.extend(address_rule(&config.controller_url));
    }
    let proxy = egress_proxy(snapshot, config).or(model_proxy(snapshot, config));
    if let Some(proxy) = proxy {
        rules.extend(address_rule(proxy.as_str()));
    }
    rules.extend(errand.iter().cloned());
    rules.extend(environment_rules(snapshot, &config.outbound));
    Some(rules)
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

/// errand's endpoint at `url` (the controller's grants and blobs, the egress proxy), when the
/// URL names an address (a name, such as the chart's Service, is the operator's rule to give:
/// a NetworkPolicy cannot select by name).
fn address_rule(url: &str) -> Option<NetworkPolicyEgressRule> {
    let url = url::Url::parse(url).ok()?;
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

/// The egress proxy a pod running `snapshot` reaches its host names through: only with egress
/// denied by default, a proxy configured and host names listed.
pub fn egress_proxy<'a>(snapshot: &Snapshot, config: &'a ControllerConfig) -> Option<&'a url::Url> {
    config.execution_egress.as_ref()?;
    let proxy = config.egress_proxy_url.as_ref()?;
    (!snapshot.egress.hosts.is_empty()).then_some(proxy)
}

/// The variables that send the agent's HTTP clients through `proxy`: `HTTPS_PROXY` and
/// `HTTP_PROXY` (and their lowercase forms, which some clients read instead), and `NO_PROXY`
/// with the loopback names and the environment's ranges, which the pod reaches directly, and
/// the proxy itself when it carries the run's model calls (its model route is no target).
pub fn proxy_env(
    snapshot: &Snapshot,
    config: &ControllerConfig,
    proxy: &url::Url,
) -> Vec<(String, String)> {
    let model_route = model_proxy(snapshot, config).and_then(url::Url::host_str);
    let proxy = proxy.as_str().trim_end_matches('/').to_owned();
    let direct: Vec<&str> = ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .chain(snapshot.egress.allow.iter().map(|rule| rule.cidr.as_str()))
        .chain(model_route)
        .collect();
    let direct = direct.join(",");
    [
        ("HTTPS_PROXY", &proxy),
        ("HTTP_PROXY", &proxy),
        ("https_proxy", &proxy),
        ("http_proxy", &proxy),
        ("NO_PROXY", &direct),
        ("no_proxy", &direct),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.clone()))
    .collect()
}

/// The annotations of a pod running `snapshot` that the egress proxy reads: its host names
/// and its proxied models (each only when the proxy serves it).
pub fn proxy_annotations(snapshot: &Snapshot, config: &ControllerConfig) -> Vec<(String, String)> {
    let hosts = egress_proxy(snapshot, config).map(|_| {
        let hosts = serde_json::to_string(&snapshot.egress.hosts).expect("host rules serialize");
        (
            crate::api::contract::EGRESS_HOSTS_ANNOTATION.to_owned(),
            hosts,
        )
    });
    hosts
        .into_iter()
        .chain(super::model_credentials::model_routes_annotation(
            snapshot, config,
        ))
        .collect()
}
