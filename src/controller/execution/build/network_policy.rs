//! The NetworkPolicy that closes an execution's pod to everything but DNS, errand's own endpoints and its environment's ranges (with what the controller denies cut out of them).

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::child_meta;
use crate::api::contract;
use crate::controller::build::ExecutionOwner;
use crate::controller::build::egress::{ToController, egress_rules};
use crate::controller::config::ControllerConfig;
use crate::controller::names;
use crate::resolve::Snapshot;

/// The execution's egress NetworkPolicy ([`egress_rules`]), or `None` when the controller
/// leaves egress open.
pub fn network_policy(
    execution: &ExecutionOwner,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> Option<NetworkPolicy> {
    let rules = egress_rules(snapshot, config, ToController::Yes)?;
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
