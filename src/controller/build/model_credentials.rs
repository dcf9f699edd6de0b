//! An agent pod whose models' credentials are proxied: the agent config that points those models at the egress proxy, the placeholder token each key variable holds instead of the Secret's value, and the annotation the proxy's model route reads. Executions and deployments share them.

use crate::api::contract::MODEL_ROUTES_ANNOTATION;
use crate::controller::config::ControllerConfig;
use crate::resolve::Snapshot;
use crate::resolve::model_credentials::{agent_config, ProxiedModel};

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
