//! Pure builders of an AgentDeployment's children: the snapshot ConfigMap, the Deployment of its agent server, the ClusterIP Service in front of it and the NetworkPolicy that admits only the gateway to its pods (and, when egress is denied by default, lets them reach only DNS and their environment's ranges).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, EnvVar, HTTPGetAction, PodSpec, PodTemplateSpec, Probe,
    Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::AgentDeploymentSpec;
use crate::api::contract::{
    AGENT_CONTAINER, AGENT_SERVER_PORT_NAME as PORT_NAME, ENV_PORT, SNAPSHOT_DIGEST_ANNOTATION,
    SNAPSHOT_VOLUME, WORKSPACE_VOLUME,
};
use crate::controller::build::egress::{ToController, egress_rules, proxy_annotations};
use crate::controller::build::{
    ExecutionOwner, SNAPSHOT_DIR, WORKSPACE_DIR, agent_env, agent_pod, empty_dir, mount, resources,
    security, snapshot_holder, snapshot_volume,
};
use crate::controller::config::{AgentIngress, ControllerConfig};
use crate::controller::names;
use crate::resolve::Snapshot;

/// The Service's port: clients (and the gateway) reach the agent at `http://<service>`.
pub const SERVICE_PORT: i32 = 80;
/// Seconds between readiness probes: a pod is seen ready within this of its server answering.
pub const PROBE_PERIOD_SECONDS: i32 = 5;

/// The children of one deployment at one snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Children {
    /// The immutable snapshot ConfigMap (one per snapshot).
    pub snapshot: ConfigMap,
    /// The agent server's Deployment.
    pub deployment: Deployment,
    /// The ClusterIP Service in front of its ready pods.
    pub service: Service,
    /// Who may reach the pods (`None` when the controller is configured to create none).
    pub network_policy: Option<NetworkPolicy>,
}

/// The children of `owner` (an AgentDeployment) running `snapshot` with `spec`'s replicas,
/// port and readiness.
pub fn children(
    owner: &ExecutionOwner,
    spec: &AgentDeploymentSpec,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> Children {
    let labels = names::deployment_labels(&owner.name, &owner.uid, &snapshot.agent.name);
    let meta = |name: String| ObjectMeta {
        name: Some(name),
        namespace: Some(owner.namespace.clone()),
        labels: Some(labels.clone()),
        owner_references: Some(vec![owner.owner.clone()]),
        ..ObjectMeta::default()
    };
    let workload = names::deployment_workload_name(&owner.name);
    let snapshot_name = names::deployment_snapshot_name(&owner.name, &snapshot.digest());
    let mut annotations =
        BTreeMap::from([(SNAPSHOT_DIGEST_ANNOTATION.to_owned(), snapshot.digest())]);
    annotations.extend(proxy_annotations(snapshot, config));
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            // A new snapshot changes the template, which rolls the Deployment.
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![agent_server(spec, snapshot, config, &owner.uid)],
            volumes: Some(vec![
                snapshot_volume(snapshot_name.clone()),
                empty_dir(WORKSPACE_VOLUME, config.workspace_size_limit.as_ref()),
            ]),
            ..agent_pod(snapshot, config)
        }),
    };
    let deployment = Deployment {
        metadata: meta(workload.clone()),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas),
            selector: LabelSelector {
                match_labels: Some(names::deployment_selector(&owner.uid)),
                ..LabelSelector::default()
            },
            // A new pod must be ready before an old one goes: requests are served throughout
            // a redeploy.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template,
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };
    let service = Service {
        metadata: meta(workload),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(names::deployment_selector(&owner.uid)),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_owned()),
                port: SERVICE_PORT,
                target_port: Some(IntOrString::String(PORT_NAME.to_owned())),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let egress = egress_rules(snapshot, config, ToController::No);
    let network_policy =
        network_policy(&owner.uid, spec.port, config.agent_ingress.as_ref(), egress).map(
            |policy| NetworkPolicy {
                metadata: meta(names::deployment_workload_name(&owner.name)),
                spec: Some(policy),
            },
        );
    Children {
        snapshot: snapshot_holder(meta(snapshot_name), snapshot, config),
        deployment,
        service,
        network_policy,
    }
}

/// The deployment's pods (by its uid label) take connections only on the agent server's
/// port, and only from the gateway (the controller's pods, by namespace and labels) and
/// `ingress`'s CIDRs. Every other pod, of this namespace or another, is refused: the gateway's
/// authorization cannot be bypassed by calling the Service directly. The kubelet's probes come
/// from the pod's own node, which NetworkPolicies do not filter. With `egress`, the pods
/// connect only as those rules allow. `None` when neither is asked for.
fn network_policy(
    uid: &str,
    port: i32,
    ingress: Option<&AgentIngress>,
    egress: Option<Vec<NetworkPolicyEgressRule>>,
) -> Option<NetworkPolicySpec> {
    if ingress.is_none() && egress.is_none() {
        return None;
    }
    let mut types = Vec::new();
    if ingress.is_some() {
        types.push("Ingress".to_owned());
    }
    if egress.is_some() {
        types.push("Egress".to_owned());
    }
    Some(NetworkPolicySpec {
        pod_selector: Some(LabelSelector {
            match_labels: Some(names::deployment_selector(uid)),
            ..LabelSelector::default()
        }),
        policy_types: Some(types),
        ingress: ingress.map(|ingress| vec![gateway_only(port, ingress)]),
        egress,
    })
}

/// Connections to `port` from the gateway and `ingress`'s CIDRs.
fn gateway_only(port: i32, ingress: &AgentIngress) -> NetworkPolicyIngressRule {
    let gateway = NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_owned(),
                ingress.gateway_namespace.clone(),
            )])),
            ..LabelSelector::default()
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(ingress.gateway_pod_labels.clone()),
            ..LabelSelector::default()
        }),
        ..NetworkPolicyPeer::default()
    };
    let ranges = ingress.cidrs.iter().map(|cidr| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.clone(),
            except: None,
        }),
        ..NetworkPolicyPeer::default()
    });
    NetworkPolicyIngressRule {
        from: Some(std::iter::once(gateway).chain(ranges).collect()),
        ports: Some(vec![NetworkPolicyPort {
            port: Some(IntOrString::Int(port)),
            protocol: Some("TCP".to_owned()),
            end_port: None,
        }]),
    }
}

/// The agent server's container: the agent's image and command as they are (no runner: it
/// serves until stopped), its environment with secrets by `secretKeyRef`, the compute's
/// resources, restricted security and the readiness probe.
fn agent_server(
    spec: &AgentDeploymentSpec,
    snapshot: &Snapshot,
    config: &ControllerConfig,
    run_uid: &str,
) -> Container {
    let runtime = &snapshot.agent.runtime;
    let mut env = agent_env(snapshot, config, run_uid);
    env.push(EnvVar {
        name: ENV_PORT.to_owned(),
        value: Some(spec.port.to_string()),
        ..EnvVar::default()
    });
    let readiness = &spec.readiness;
    Container {
        name: AGENT_CONTAINER.to_owned(),
        image: Some(runtime.image.clone()),
        image_pull_policy: runtime.image_pull_policy.clone(),
        command: Some(snapshot.command()),
        working_dir: Some(WORKSPACE_DIR.to_owned()),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.to_owned()),
            container_port: spec.port,
            protocol: Some("TCP".to_owned()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some(readiness.path.clone()),
                port: IntOrString::String(PORT_NAME.to_owned()),
                ..HTTPGetAction::default()
            }),
            timeout_seconds: Some(readiness.timeout_seconds),
            failure_threshold: Some(readiness.failure_threshold),
            period_seconds: Some(PROBE_PERIOD_SECONDS),
            ..Probe::default()
        }),
        volume_mounts: Some(vec![
            mount(SNAPSHOT_VOLUME, SNAPSHOT_DIR, true),
            mount(WORKSPACE_VOLUME, WORKSPACE_DIR, false),
        ]),
        resources: resources::agent_resources(&snapshot.compute),
        security_context: Some(security::container_security(false)),
        ..Container::default()
    }
}

/// The in-cluster address of a deployment's Service.
pub fn address(owner: &ExecutionOwner) -> String {
    format!(
        "http://{}.{}.svc",
        names::deployment_workload_name(&owner.name),
        owner.namespace
    )
}

#[cfg(test)]
mod tests;
