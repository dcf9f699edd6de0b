//! The egress NetworkPolicy of an execution's pod: none while egress is open; with egress denied, DNS, the controller's address, the operator's rules and the environment's ranges with the denied ranges cut out, for this execution's pod only.

use k8s_openapi::api::networking::v1::NetworkPolicyEgressRule;
use serde_json::json;

use super::*;
use crate::api::Egress;
use crate::api::contract;
use crate::controller::config::ExecutionEgress;
use crate::outbound::OutboundPolicy;

fn denying(config: &mut ControllerConfig) {
    config.controller_url = "http://10.88.0.1:8080".to_owned();
    config.outbound =
        std::sync::Arc::new(OutboundPolicy::default().allow("10.88.0.1".parse().unwrap()));
    config.execution_egress = Some(ExecutionEgress {
        errand: vec![
            serde_json::from_value(
                json!({"to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}], "ports": [{"port": 9000}]}),
            )
            .unwrap(),
        ],
    });
}

fn with_egress(rules: &[(&str, &[u16])]) -> Snapshot {
    let mut environment = gpu_environment();
    environment.egress = Egress::of(rules);
    resolve_in(&spec(None), None, environment)
}

#[test]
fn open_egress_builds_no_policy() {
    let config = ControllerConfig::new("errand.local/errand:dev");
    assert!(network_policy(&identity(), &snapshot(), &config).is_none());
}

#[test]
fn denied_egress_lets_the_pod_reach_dns_errand_and_its_environments_ranges_only() {
    let mut config = ControllerConfig::new("errand.local/errand:dev");
    denying(&mut config);
    let snapshot = with_egress(&[("0.0.0.0/0", &[443]), ("10.88.0.1/32", &[])]);
    let policy = network_policy(&identity(), &snapshot, &config).expect("a policy");
    let spec = policy.spec.unwrap();
    assert_eq!(spec.policy_types, Some(vec!["Egress".to_owned()]));
    assert_eq!(
        spec.pod_selector.unwrap().match_labels.unwrap()[contract::EXECUTION_UID_LABEL],
        identity().uid,
        "this execution's pod only"
    );
    let rules: Vec<serde_json::Value> = spec
        .egress
        .unwrap()
        .iter()
        .map(|r: &NetworkPolicyEgressRule| serde_json::to_value(r).unwrap())
        .collect();
    assert_eq!(rules.len(), 5, "{rules:#?}");
    assert_eq!(
        rules[0]["to"][0]["podSelector"]["matchLabels"]["k8s-app"],
        "kube-dns"
    );
    assert_eq!(
        rules[0]["ports"],
        json!([{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}])
    );
    assert_eq!(
        rules[1],
        json!({"to": [{"ipBlock": {"cidr": "10.88.0.1/32"}}], "ports": [{"port": 8080, "protocol": "TCP"}]})
    );
    assert_eq!(rules[2]["to"][0]["ipBlock"]["cidr"], "192.0.2.10/32");
    // Everything on 443, but what the controller denies: metadata, private ranges, loopback.
    assert_eq!(rules[3]["to"][0]["ipBlock"]["cidr"], "0.0.0.0/0");
    let except = rules[3]["to"][0]["ipBlock"]["except"].as_array().unwrap();
    for denied in [
        "169.254.0.0/16",
        "10.0.0.0/8",
        "127.0.0.0/8",
        "192.168.0.0/16",
    ] {
        assert!(except.contains(&json!(denied)), "{denied}: {except:?}");
    }
    assert_eq!(rules[3]["ports"], json!([{"port": 443, "protocol": "TCP"}]));
    // What the operator allowed back, whole and on every port.
    assert_eq!(
        rules[4],
        json!({"to": [{"ipBlock": {"cidr": "10.88.0.1/32"}}]})
    );
    // The policy goes with its execution.
    assert_eq!(
        policy.metadata.owner_references.unwrap()[0].uid,
        identity().uid
    );
}

#[test]
fn a_run_with_host_names_reaches_the_proxy_and_its_agent_is_sent_through_it() {
    let mut config = ControllerConfig::new("errand.local/errand:dev");
    denying(&mut config);
    config.egress_proxy_url = Some("http://10.88.0.1:3128".parse().unwrap());
    let mut snapshot = with_egress(&[("203.0.113.0/24", &[443])]);
    snapshot.egress = snapshot
        .egress
        .clone()
        .with_hosts(&[("api.example.com", &[443])]);
    let policy = network_policy(&identity(), &snapshot, &config).unwrap();
    let rules = serde_json::to_value(policy.spec.unwrap().egress.unwrap()).unwrap();
    assert!(
        rules.as_array().unwrap().contains(&json!(
            {"to": [{"ipBlock": {"cidr": "10.88.0.1/32"}}], "ports": [{"port": 3128, "protocol": "TCP"}]}
        )),
        "{rules:#}"
    );
    let built = job(&identity(), &snapshot, &config);
    let template = built
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap();
    assert_eq!(
        template.annotations.as_ref().unwrap()[contract::EGRESS_HOSTS_ANNOTATION],
        r#"[{"host":"api.example.com","ports":[443]}]"#
    );
    let agent = container(&built, contract::AGENT_CONTAINER);
    let env: std::collections::BTreeMap<&str, &str> = agent
        .env
        .iter()
        .flatten()
        .filter_map(|v| Some((v.name.as_str(), v.value.as_deref()?)))
        .collect();
    assert_eq!(env["HTTPS_PROXY"], "http://10.88.0.1:3128");
    assert_eq!(env["http_proxy"], "http://10.88.0.1:3128");
    assert_eq!(env["NO_PROXY"], "localhost,127.0.0.1,::1,203.0.113.0/24");

    // Without host names, or with egress open, nothing of the proxy.
    let plain = with_egress(&[("203.0.113.0/24", &[443])]);
    let mut open = config.clone();
    open.execution_egress = None;
    for (snapshot, config) in [(&plain, &config), (&snapshot, &open)] {
        let built = job(&identity(), snapshot, config);
        let agent = container(&built, contract::AGENT_CONTAINER);
        assert!(
            !agent.env.iter().flatten().any(|v| v.name.contains("PROXY")),
            "{:?}",
            agent.env
        );
    }
}
