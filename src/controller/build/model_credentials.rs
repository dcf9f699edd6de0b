//! An agent pod whose models' credentials are proxied: the agent config that points those models at the egress proxy, the placeholder token each key variable holds instead of the Secret's value, and the annotation the proxy's model route reads. Executions and deployments share them.

use crate::api::contract::MODEL_ROUTES_ANNOTATION;
use crate::controller::config::ControllerConfig;
use crate::resolve::Snapshot;
use crate::resolve::model_credentials::{ProxiedModel, agent_config};

/// The proxy that carries the model calls of a pod running `snapshot`: only when it has
/// proxied models (admission refused them without a proxy).
pub fn model_proxy<'a>(snapshot: &Snapshot, config: &'a ControllerConfig) -> Option<&'a url::Url> {
    if snapshot.proxied_models.is_empty() {
        return None;
    }
    config.model_proxy().map(|(proxy, _)| proxy)
}

/// The agent config file's content: the merged config, each proxied model's `base_url` its
/// route on the proxy.
pub fn agent_config_json(snapshot: &Snapshot, config: &ControllerConfig) -> String {
    match model_proxy(snapshot, config) {
        Some(proxy) => {
            let config = agent_config(&snapshot.config, &snapshot.proxied_models, proxy);
            serde_json::to_string_pretty(&config).expect("a JSON object always serializes")
        }
        None => snapshot.agent_config_json(),
    }
}

/// The placeholder token of each proxied model's key variable, for the run with `run_uid`:
/// `(variable, token)`.
pub fn placeholder_env(
    snapshot: &Snapshot,
    config: &ControllerConfig,
    run_uid: &str,
) -> Vec<(String, String)> {
    let Some((_, tokens)) = config.model_proxy() else {
        return Vec::new();
    };
    let token = tokens.mint(&snapshot.namespace, run_uid);
    let mut env: Vec<(String, String)> = snapshot
        .proxied_models
        .iter()
        .map(|model| (model.env.clone(), token.clone()))
        .collect();
    env.dedup();
    env
}

/// Whether `env` holds a proxied model's key: the pod gets the placeholder, not the Secret.
pub fn is_proxied_key(snapshot: &Snapshot, env: &str) -> bool {
    snapshot.proxied_models.iter().any(|model| model.env == env)
}

/// The annotation the model route reads: the proxied models (references only).
pub fn model_routes_annotation(
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> Option<(String, String)> {
    model_proxy(snapshot, config)?;
    let routes: &[ProxiedModel] = &snapshot.proxied_models;
    Some((
        MODEL_ROUTES_ANNOTATION.to_owned(),
        serde_json::to_string(routes).expect("proxied models serialize"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ModelCredentials;
    use crate::api::{AgentExecutionSpec, contract};
    use crate::controller::config::ExecutionEgress;
    use crate::resolve::run_tokens::RunTokens;
    use crate::resolve::{InMemoryCatalog, resolve_execution};
    use crate::testing::NS;

    fn proxied() -> Snapshot {
        let catalog =
            InMemoryCatalog::test().with_default_model_credentials(ModelCredentials::Proxied);
        resolve_execution(NS, &AgentExecutionSpec::test(), &catalog).unwrap()
    }

    fn config() -> ControllerConfig {
        let mut config = ControllerConfig::new("errand.local/errand:dev");
        config.execution_egress = Some(ExecutionEgress::default());
        config.egress_proxy_url = Some(url::Url::parse("http://10.0.0.9:3128").unwrap());
        config.model_tokens = Some(RunTokens::models(b"0123456789abcdef0123456789abcdef"));
        config
    }

    #[test]
    fn a_proxied_model_s_pod_holds_a_placeholder_and_points_at_the_proxy() {
        let snapshot = proxied();
        let config = config();
        let env = super::super::agent_env(&snapshot, &config, "uid-1");
        let key = env.iter().find(|e| e.name == "OPENAI_API_KEY").unwrap();
        assert!(key.value_from.is_none(), "no secretKeyRef: {key:?}");
        let token = key.value.as_deref().unwrap();
        assert!(
            config
                .model_tokens
                .as_ref()
                .unwrap()
                .verify(NS, "uid-1", token),
            "the run's own placeholder"
        );
        assert!(
            env.iter().all(|e| e.value_from.is_none()),
            "the fixture binds only the model's key"
        );

        let agent_config: serde_json::Value =
            serde_json::from_str(&agent_config_json(&snapshot, &config)).unwrap();
        assert_eq!(
            agent_config["models"]["default"]["base_url"],
            "http://10.0.0.9:3128/models/default"
        );
        let annotations = super::super::egress::proxy_annotations(&snapshot, &config);
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations[0].0, contract::MODEL_ROUTES_ANNOTATION);
        let routes: Vec<ProxiedModel> = serde_json::from_str(&annotations[0].1).unwrap();
        assert_eq!(routes, snapshot.proxied_models);
        let rules = super::super::egress::egress_rules(
            &snapshot,
            &config,
            super::super::egress::ToController::No,
        )
        .unwrap();
        let to_proxy = serde_json::to_string(&rules).unwrap();
        assert!(to_proxy.contains("10.0.0.9/32"), "{to_proxy}");

        // Direct: the Secret's reference, the config as written, nothing for the proxy.
        let direct =
            resolve_execution(NS, &AgentExecutionSpec::test(), &InMemoryCatalog::test()).unwrap();
        let env = super::super::agent_env(&direct, &config, "uid-1");
        let key = env.iter().find(|e| e.name == "OPENAI_API_KEY").unwrap();
        assert!(key.value_from.is_some() && key.value.is_none());
        assert_eq!(
            agent_config_json(&direct, &config),
            direct.agent_config_json()
        );
        assert!(super::super::egress::proxy_annotations(&direct, &config).is_empty());
    }
}
