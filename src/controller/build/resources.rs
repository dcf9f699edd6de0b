//! Container resources from the snapshot's compute, with GPU requests always equal to limits.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::Compute;

/// The extended resource of NVIDIA GPUs.
pub const GPU: &str = "nvidia.com/gpu";

/// The agent container's resources. Extended resources such as GPUs cannot be overcommitted:
/// Kubernetes requires their request to equal their limit, so whichever one is given is
/// copied to the other.
pub fn agent_resources(compute: &Compute) -> Option<ResourceRequirements> {
    let resources = compute.resources.as_ref()?;
    let mut limits = resources.limits.clone();
    let mut requests = resources.requests.clone();
    match (limits.get(GPU).cloned(), requests.get(GPU).cloned()) {
        (Some(limit), _) => {
            requests.insert(GPU.to_owned(), limit);
        }
        (None, Some(request)) => {
            limits.insert(GPU.to_owned(), request);
        }
        (None, None) => {}
    }
    requirements(limits, requests)
}

/// The stage and extension containers' resources: the agent's cpu and memory, so the init container neither
/// raises the pod's effective request nor escapes a quota that requires limits. It gets no GPU.
pub fn stage_resources(compute: &Compute) -> Option<ResourceRequirements> {
    let resources = compute.resources.as_ref()?;
    let without_gpu = |map: &BTreeMap<String, Quantity>| {
        map.iter()
            .filter(|(k, _)| k.as_str() != GPU)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    requirements(
        without_gpu(&resources.limits),
        without_gpu(&resources.requests),
    )
}

fn requirements(
    limits: BTreeMap<String, Quantity>,
    requests: BTreeMap<String, Quantity>,
) -> Option<ResourceRequirements> {
    if limits.is_empty() && requests.is_empty() {
        return None;
    }
    Some(ResourceRequirements {
        limits: (!limits.is_empty()).then_some(limits),
        requests: (!requests.is_empty()).then_some(requests),
        ..ResourceRequirements::default()
    })
}
