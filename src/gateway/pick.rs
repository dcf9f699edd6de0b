//! Where a request goes: the deployment its target names (404 when there is none, 503 when it is not Ready) and a ready pod of it, from the EndpointSlices of its Service.
//!
//! Pure: the caller hands in the cached deployments and slices. A pod whose endpoint is not
//! `ready` (or is terminating) is never picked.

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

use super::refusal::Refusal;
use super::route::Target;
use crate::api::contract::AGENT_SERVER_PORT_NAME as PORT_NAME;
use crate::api::{AgentDeployment, DeploymentPhase};

/// The label the EndpointSlice controller puts on the slices of a Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The deployment `target` names among `deployments` (those of the request's namespace).
pub fn deployment<'a>(
    namespace: &str,
    target: &Target,
    deployments: &'a [std::sync::Arc<AgentDeployment>],
) -> Result<&'a AgentDeployment, Refusal> {
    let phase = |d: &AgentDeployment| d.status.as_ref().and_then(|s| s.phase);
    match target {
        Target::Deployment(name) => {
            let found = deployments
                .iter()
                .find(|d| d.name_any() == *name)
                .ok_or_else(|| {
                    Refusal::new(
                        404,
                        "NotFound",
                        format!("AgentDeployment {name:?} not found in namespace {namespace:?}"),
                    )
                })?;
            match phase(found) {
                Some(DeploymentPhase::Ready) => Ok(found),
                other => Err(not_ready(found, other)),
            }
        }
        Target::Agent(agent) => {
            let of_agent: Vec<&AgentDeployment> = deployments
                .iter()
                .map(AsRef::as_ref)
                .filter(|d| d.status.as_ref().and_then(|s| s.agent.as_deref()) == Some(agent))
                .collect();
            let active = of_agent
                .iter()
                .filter(|d| phase(d) == Some(DeploymentPhase::Ready))
                .max_by_key(|d| (d.metadata.creation_timestamp.clone(), d.name_any()));
            match (active, of_agent.first()) {
                (Some(active), _) => Ok(active),
                (None, Some(first)) => Err(not_ready(first, phase(first))),
                (None, None) => Err(Refusal::new(
                    404,
                    "NotFound",
                    format!("no AgentDeployment serves agent {agent:?} in namespace {namespace:?}"),
                )),
            }
        }
    }
}

fn not_ready(deployment: &AgentDeployment, phase: Option<DeploymentPhase>) -> Refusal {
    let phase = phase.map_or("Pending", DeploymentPhase::as_str);
    let message = deployment
        .status
        .as_ref()
        .and_then(|s| s.message.as_deref())
        .unwrap_or("");
    Refusal::new(
        503,
        "NotReady",
        format!(
            "AgentDeployment {:?} is {phase}, not Ready: {message}",
            deployment.name_any()
        ),
    )
}

/// The ready pods of Service `service`, from `slices` (those of its namespace).
pub fn ready_endpoints(service: &str, slices: &[std::sync::Arc<EndpointSlice>]) -> Vec<SocketAddr> {
    let mut ready = Vec::new();
    for slice in slices {
        if slice.labels().get(SERVICE_NAME_LABEL).map(String::as_str) != Some(service) {
            continue;
        }
        let Some(port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(PORT_NAME))
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let conditions = endpoint.conditions.clone().unwrap_or_default();
            // Only an endpoint the kubelet's probe says is ready, and not on its way out.
            if conditions.ready != Some(true) || conditions.terminating == Some(true) {
                continue;
            }
            ready.extend(
                endpoint
                    .addresses
                    .iter()
                    .filter_map(|a| a.parse::<IpAddr>().ok())
                    .map(|ip| SocketAddr::new(ip, port)),
            );
        }
    }
    ready.sort();
    ready
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::AgentDeploymentStatus;

    fn deployed(
        name: &str,
        agent: &str,
        phase: DeploymentPhase,
        created: i64,
    ) -> Arc<AgentDeployment> {
        let mut deployment = AgentDeployment::test();
        deployment.metadata.name = Some(name.into());
        deployment.metadata.creation_timestamp =
            Some(Time(jiff::Timestamp::from_second(created).unwrap()));
        deployment.status = Some(AgentDeploymentStatus {
            phase: Some(phase),
            agent: Some(agent.into()),
            message: Some("0/1 pods ready".into()),
            ..AgentDeploymentStatus::default()
        });
        Arc::new(deployment)
    }

    #[test]
    fn a_deployment_by_name_must_exist_and_be_ready() {
        let all = [
            deployed("calc", "calculator", DeploymentPhase::Ready, 1),
            deployed("slow", "calculator", DeploymentPhase::Starting, 2),
        ];
        let by_name = |name: &str| deployment("team-a", &Target::Deployment(name.into()), &all);
        assert_eq!(by_name("calc").unwrap().name_any(), "calc");
        let starting = by_name("slow").unwrap_err();
        assert_eq!(starting.status, 503);
        assert!(
            starting
                .message
                .contains("is Starting, not Ready: 0/1 pods ready"),
            "{}",
            starting.message
        );
        assert_eq!(by_name("nope").unwrap_err().status, 404);
    }

    #[test]
    fn an_agent_goes_to_its_newest_ready_deployment() {
        let all = [
            deployed("old", "calculator", DeploymentPhase::Ready, 1),
            deployed("new", "calculator", DeploymentPhase::Ready, 2),
            deployed("newest", "calculator", DeploymentPhase::Starting, 3),
            deployed("other", "writer", DeploymentPhase::Failed, 1),
        ];
        let by_agent = |agent: &str| deployment("team-a", &Target::Agent(agent.into()), &all);
        assert_eq!(by_agent("calculator").unwrap().name_any(), "new");
        let failed = by_agent("writer").unwrap_err();
        assert_eq!((failed.status, failed.reason), (503, "NotReady"));
        assert!(failed.message.contains("is Failed"));
        assert_eq!(by_agent("nobody").unwrap_err().status, 404);
    }

    fn endpoint(ip: &str, ready: Option<bool>, terminating: Option<bool>) -> Endpoint {
        Endpoint {
            addresses: vec![ip.into()],
            conditions: Some(EndpointConditions {
                ready,
                serving: ready,
                terminating,
            }),
            ..Endpoint::default()
        }
    }

    #[test]
    fn only_ready_endpoints_of_the_service_are_picked() {
        let mut slice = EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: vec![
                endpoint("10.88.0.5", Some(true), None),
                endpoint("10.88.0.6", Some(false), None),
                endpoint("10.88.0.7", None, None),
                endpoint("10.88.0.8", Some(true), Some(true)),
            ],
            ports: Some(vec![EndpointPort {
                name: Some(PORT_NAME.into()),
                port: Some(8000),
                ..EndpointPort::default()
            }]),
            ..EndpointSlice::default()
        };
        slice.metadata.labels =
            Some([(SERVICE_NAME_LABEL.to_owned(), "errand-calc".to_owned())].into());
        let slices = [Arc::new(slice)];
        assert_eq!(
            ready_endpoints("errand-calc", &slices),
            ["10.88.0.5:8000".parse::<SocketAddr>().unwrap()]
        );
        assert!(ready_endpoints("errand-other", &slices).is_empty());
    }
}
