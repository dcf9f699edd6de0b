//! Tests of a deployment's children: what issue 17 §1 asks of them, on the built objects.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::api::{AgentDeployment, AgentEnvironmentSpec, Compute, ComputeResources};
use crate::resolve::{InMemoryCatalog, resolve_deployment};
use crate::testing::{NS, SECRET_VALUE, UID};

/// [`AgentDeployment::test`] with a GPU in its environment, resolved and built.
fn built() -> (Snapshot, Children) {
    let gpu = AgentEnvironmentSpec::test().with_compute(Compute {
        resources: Some(ComputeResources {
            limits: [
                ("cpu".into(), Quantity("2".into())),
                ("nvidia.com/gpu".into(), Quantity("1".into())),
            ]
            .into(),
            requests: [("cpu".into(), Quantity("1".into()))].into(),
        }),
        ..Compute::default()
    });
    let catalog = InMemoryCatalog::test().with_environment(NS, "prod", gpu);
    let deployment = AgentDeployment::test();
    let snapshot =
        resolve_deployment(NS, &deployment.spec, &catalog).expect("the fixture resolves");
    let owner = ExecutionOwner::of_object(&deployment).unwrap();
    let config = ControllerConfig::new("errand.local/errand:dev");
    let children = children(&owner, &deployment.spec, &snapshot, &config);
    (snapshot, children)
}

fn pod(children: &Children) -> &PodSpec {
    children
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

#[test]
fn every_child_is_owned_by_the_deployment_and_the_service_selects_its_pods() {
    let (snapshot, children) = built();
    for meta in [
        &children.snapshot.metadata,
        &children.deployment.metadata,
        &children.service.metadata,
    ] {
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("AgentDeployment", UID)
        );
        assert_eq!(owner.controller, Some(true));
    }
    assert_eq!(
        children.deployment.metadata.name.as_deref(),
        Some("errand-calc")
    );
    let service = children.service.spec.as_ref().unwrap();
    assert_eq!(service.type_.as_deref(), Some("ClusterIP"));
    let selector = service.selector.as_ref().unwrap();
    let template_labels = children
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert!(
        selector
            .iter()
            .all(|(k, v)| template_labels.get(k) == Some(v))
    );
    assert_eq!(
        children.snapshot.metadata.name.as_deref(),
        Some(names::deployment_snapshot_name("calc", &snapshot.digest()).as_str())
    );
    assert_eq!(children.snapshot.immutable, Some(true));
    assert_eq!(
        children.snapshot.metadata.finalizers, None,
        "a deployment keeps no results"
    );
}

#[test]
fn the_pod_is_restricted_with_no_token_and_gpu_limits() {
    let (_, children) = built();
    let pod = pod(&children);
    assert_eq!(pod.automount_service_account_token, Some(false));
    let security = pod.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    let container = &pod.containers[0];
    let container_security = container.security_context.as_ref().unwrap();
    assert_eq!(container_security.allow_privilege_escalation, Some(false));
    assert_eq!(
        container_security.capabilities.as_ref().unwrap().drop,
        Some(vec!["ALL".to_owned()])
    );
    let resources = container.resources.as_ref().unwrap();
    let gpu = Quantity("1".into());
    assert_eq!(
        resources.limits.as_ref().unwrap().get("nvidia.com/gpu"),
        Some(&gpu)
    );
    assert_eq!(
        resources.requests.as_ref().unwrap().get("nvidia.com/gpu"),
        Some(&gpu)
    );
}

#[test]
fn the_agent_server_runs_its_command_with_secret_refs_and_a_readiness_probe() {
    let (snapshot, children) = built();
    let container = &pod(&children).containers[0];
    assert_eq!(container.command.as_ref(), Some(&snapshot.command()));
    let env = container.env.as_ref().unwrap();
    let key = env.iter().find(|e| e.name == "OPENAI_API_KEY").unwrap();
    assert_eq!(key.value, None);
    let selector = key
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (selector.name.as_str(), selector.key.as_str()),
        ("model-keys", "openai")
    );
    let port = env.iter().find(|e| e.name == ENV_PORT).unwrap();
    assert_eq!(port.value.as_deref(), Some("8000"));
    assert_eq!(container.ports.as_ref().unwrap()[0].container_port, 8000);
    let probe = container.readiness_probe.as_ref().unwrap();
    assert_eq!(
        probe.http_get.as_ref().unwrap().path.as_deref(),
        Some("/health")
    );
    assert_eq!(probe.timeout_seconds, Some(1));
    assert_eq!(probe.failure_threshold, Some(12));
    for text in [
        serde_json::to_string(&children.deployment).unwrap(),
        serde_json::to_string(&children.snapshot).unwrap(),
    ] {
        assert!(!text.contains(SECRET_VALUE));
    }
}

#[test]
fn a_new_snapshot_rolls_the_pods_without_taking_one_away_first() {
    let (snapshot, children) = built();
    let spec = children.deployment.spec.as_ref().unwrap();
    let rolling = spec
        .strategy
        .as_ref()
        .unwrap()
        .rolling_update
        .as_ref()
        .unwrap();
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
    let annotations = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .as_ref()
        .unwrap();
    assert_eq!(
        annotations.get(SNAPSHOT_DIGEST_ANNOTATION),
        Some(&snapshot.digest())
    );
}

#[test]
fn the_network_policy_admits_only_the_gateway_to_the_agent_port_of_these_pods() {
    let (_, children) = built();
    let policy = children.network_policy.expect("a policy by default");
    let owner = &policy.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("AgentDeployment", UID)
    );
    let spec = policy.spec.unwrap();
    assert_eq!(
        spec.pod_selector.unwrap().match_labels,
        Some(crate::controller::names::deployment_selector(UID)),
        "the pods of this deployment, by uid"
    );
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
    let rules = spec.ingress.unwrap();
    assert_eq!(rules.len(), 1, "one rule: everything else is refused");
    let ports = rules[0].ports.as_ref().unwrap();
    assert_eq!(
        ports[0].port,
        Some(IntOrString::Int(AgentDeployment::test().spec.port))
    );
    let from = rules[0].from.as_ref().unwrap();
    assert_eq!(from.len(), 1, "only the gateway");
    let gateway = &from[0];
    let namespace = gateway
        .namespace_selector
        .as_ref()
        .unwrap()
        .match_labels
        .as_ref()
        .unwrap();
    assert_eq!(namespace["kubernetes.io/metadata.name"], "errand-system");
    let pods = gateway
        .pod_selector
        .as_ref()
        .unwrap()
        .match_labels
        .as_ref()
        .unwrap();
    assert_eq!(pods["app.kubernetes.io/component"], "controller");
    assert!(gateway.ip_block.is_none());
}

#[test]
fn extra_cidrs_are_admitted_beside_the_gateway_and_no_policy_when_turned_off() {
    let deployment = AgentDeployment::test();
    let snapshot = resolve_deployment(NS, &deployment.spec, &InMemoryCatalog::test()).unwrap();
    let owner = ExecutionOwner::of_object(&deployment).unwrap();
    let mut config = ControllerConfig::new("errand.local/errand:dev");
    let mut ingress = crate::controller::config::AgentIngress::chart_default();
    ingress.cidrs = vec!["10.0.0.0/24".to_owned()];
    config.agent_ingress = Some(ingress);
    let policy = children(&owner, &deployment.spec, &snapshot, &config)
        .network_policy
        .unwrap();
    let from = policy.spec.unwrap().ingress.unwrap()[0]
        .from
        .clone()
        .unwrap();
    assert_eq!(
        from[1].ip_block.as_ref().map(|b| b.cidr.as_str()),
        Some("10.0.0.0/24")
    );
    config.agent_ingress = None;
    assert_eq!(
        children(&owner, &deployment.spec, &snapshot, &config).network_policy,
        None
    );
}

#[test]
fn with_egress_denied_the_pods_reach_dns_and_their_environments_ranges_but_not_the_controller() {
    let deployment = AgentDeployment::test();
    let mut snapshot = resolve_deployment(NS, &deployment.spec, &InMemoryCatalog::test()).unwrap();
    snapshot.egress = crate::api::Egress::of(&[("203.0.113.0/24", &[443])]);
    let owner = ExecutionOwner::of_object(&deployment).unwrap();
    let mut config = ControllerConfig::new("errand.local/errand:dev");
    config.controller_url = "http://10.88.0.1:8080".to_owned();
    config.execution_egress = Some(crate::controller::config::ExecutionEgress::default());
    let spec = children(&owner, &deployment.spec, &snapshot, &config)
        .network_policy
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(
        spec.policy_types,
        Some(vec!["Ingress".to_owned(), "Egress".to_owned()])
    );
    let egress = serde_json::to_value(spec.egress.unwrap()).unwrap();
    assert_eq!(
        egress.as_array().unwrap().len(),
        2,
        "DNS and the range: {egress}"
    );
    assert_eq!(
        egress[0]["to"][0]["podSelector"]["matchLabels"]["k8s-app"],
        "kube-dns"
    );
    assert_eq!(egress[1]["to"][0]["ipBlock"]["cidr"], "203.0.113.0/24");
    // Egress alone, without the gateway's ingress rule.
    config.agent_ingress = None;
    let spec = children(&owner, &deployment.spec, &snapshot, &config)
        .network_policy
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(spec.policy_types, Some(vec!["Egress".to_owned()]));
    assert_eq!(spec.ingress, None);
}
