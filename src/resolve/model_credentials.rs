//! Model credentials the agent never holds, pure: which models of a run are proxied (an OpenAI-compatible model whose `api_key_env` is bound to a Secret), the agent config that points them at errand's egress proxy, and the per-run placeholder token that stands in for their keys.

use serde_json::{Map, Value};

use super::problems::{Problem, Problems};
pub use super::snapshot::ProxiedModel;
use super::snapshot::{SecretBinding, Snapshot};

/// The path on errand's egress proxy under which a run's proxied models are served: a model
/// aliased `a` has `base_url` `<proxy>/models/a`.
pub const MODEL_ROUTE_PREFIX: &str = "/models/";

/// The providers whose calls the model route carries: those that speak the OpenAI API with a
/// bearer key, and the `base_url` each has when the model names none.
const PROXIED_PROVIDERS: [(&str, Option<&str>); 3] = [
    ("openai", Some("https://api.openai.com/v1")),
    ("nvidia", Some("https://integrate.api.nvidia.com/v1")),
    ("openai_compatible", None),
];

/// The models of `config` whose keys are proxied: each whose `api_key_env` one of `secrets`
/// binds. One the route cannot carry (another provider, no `https` base URL, an alias that is
/// no path segment) is a problem naming it.
pub(super) fn proxied_models(
    config: &Map<String, Value>,
    secrets: &[SecretBinding],
    problems: &mut Problems,
) -> Vec<ProxiedModel> {
    let default_provider = config.get("provider").and_then(Value::as_str);
    let models: Vec<(String, String, &Map<String, Value>)> = match config.get("models") {
        Some(Value::Object(models)) => models
            .iter()
            .filter_map(|(alias, m)| {
                Some((
                    alias.clone(),
                    format!("config.models.{alias}"),
                    m.as_object()?,
                ))
            })
            .collect(),
        Some(Value::Array(models)) => models
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                Some((i.to_string(), format!("config.models[{i}]"), m.as_object()?))
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut proxied = Vec::new();
    for (alias, field, model) in models {
        let Some(env) = model.get("api_key_env").and_then(Value::as_str) else {
            continue;
        };
        let Some(binding) = secrets.iter().find(|b| b.env == env) else {
            continue;
        };
        match proxied_model(&alias, model, default_provider) {
            Ok(base_url) => proxied.push(ProxiedModel {
                alias,
                base_url,
                env: env.to_owned(),
                secret: binding.secret.clone(),
                key: binding.key.clone(),
            }),
            Err((at, message)) => problems.push(format!("{field}{at}"), message),
        }
    }
    proxied
}

/// The `base_url` the proxy sends a model's calls to, or the field (below the model) and why
/// it cannot be proxied.
fn proxied_model(
    alias: &str,
    model: &Map<String, Value>,
    default_provider: Option<&str>,
) -> Result<String, (&'static str, String)> {
    const DIRECT: &str = "or set the environment's modelCredentials to Direct";
    if alias.is_empty()
        || !alias
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || alias.starts_with('.')
    {
        return Err((
            "",
            format!(
                "alias {alias:?} of a model with proxied credentials becomes a URL path segment: \
                 use letters, digits, '-', '_' and '.' only, {DIRECT}"
            ),
        ));
    }
    let provider = model
        .get("provider")
        .and_then(Value::as_str)
        .or(default_provider)
        .unwrap_or("openai");
    let Some((_, default_url)) = PROXIED_PROVIDERS.iter().find(|(p, _)| *p == provider) else {
        let served: Vec<&str> = PROXIED_PROVIDERS.iter().map(|(p, _)| *p).collect();
        return Err((
            ".provider",
            format!(
                "{provider:?} models cannot have proxied credentials: errand's model route \
                 speaks the OpenAI API ({}); {DIRECT}",
                served.join(", ")
            ),
        ));
    };
    let base_url = match (model.get("base_url").and_then(Value::as_str), default_url) {
        (Some(url), _) => url,
        (None, Some(url)) => url,
        (None, None) => {
            return Err((
                ".base_url",
                format!("a {provider} model with proxied credentials needs its https base_url"),
            ));
        }
    };
    check_base_url(base_url).map_err(|message| (".base_url", message))?;
    Ok(base_url.trim_end_matches('/').to_owned())
}

/// Why `base_url` cannot receive a proxied key, if it cannot: only `https`, without user
/// information, query or fragment.
fn check_base_url(base_url: &str) -> Result<(), String> {
    let url = url::Url::parse(base_url).map_err(|e| format!("{base_url:?} is not a URL: {e}"))?;
    if url.scheme() != "https" {
        return Err(format!(
            "{base_url:?}: the proxy adds the real key only over TLS; use an https URL"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{base_url:?} carries user information; remove it"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{base_url:?} has a query or fragment; remove it"));
    }
    if url.host_str().is_none() {
        return Err(format!("{base_url:?} names no host"));
    }
    Ok(())
}

/// A problem when `snapshot` has proxied models and no proxy carries them.
pub fn models_without_proxy(snapshot: &Snapshot, proxy_serves: bool) -> Option<Problem> {
    if snapshot.proxied_models.is_empty() || proxy_serves {
        return None;
    }
    Some(Problem::new(
        snapshot.environment_field("modelCredentials"),
        "Proxied credentials are added by errand's egress proxy, which this installation does          not run with a signing key (the chart's egressProxy.enabled; the local backend has          none); set Direct",
    ))
}

/// The agent config of a run whose `models` are proxied through `proxy`: each proxied model's
/// `base_url` becomes its route on the proxy. `config` is returned as it is when none are.
pub fn agent_config(
    config: &Map<String, Value>,
    models: &[ProxiedModel],
    proxy: &url::Url,
) -> Map<String, Value> {
    let mut config = config.clone();
    let proxy = proxy.as_str().trim_end_matches('/');
    for model in models {
        let entry = match config.get_mut("models") {
            Some(Value::Object(by_alias)) => by_alias.get_mut(&model.alias),
            Some(Value::Array(list)) => model
                .alias
                .parse::<usize>()
                .ok()
                .and_then(|i| list.get_mut(i)),
            _ => None,
        };
        if let Some(Value::Object(entry)) = entry {
            entry.insert(
                "base_url".to_owned(),
                Value::String(format!("{proxy}{MODEL_ROUTE_PREFIX}{}", model.alias)),
            );
        }
    }
    config
}

/// A request's path on the model route: the alias, and the rest of the path (with the query)
/// to append to the model's `base_url`. `None` for a path that is not on the route, or that
/// steps out of its model's base (`.` and `..` segments, raw or encoded).
pub fn model_path(path_and_query: &str) -> Option<(&str, &str)> {
    let rest = path_and_query.strip_prefix(MODEL_ROUTE_PREFIX)?;
    let (alias, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let path = rest.split(['?', '#']).next().unwrap_or_default();
    let escapes = path.split('/').any(|segment| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".." || segment.to_ascii_lowercase().contains("%2f")
    });
    (!alias.is_empty() && !escapes).then_some((alias, rest))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn binding(env: &str, secret: &str) -> SecretBinding {
        SecretBinding {
            env: env.into(),
            secret: secret.into(),
            key: env.into(),
        }
    }

    fn proxied(config: Value, secrets: &[SecretBinding]) -> (Vec<ProxiedModel>, Vec<String>) {
        let mut problems = Problems::default();
        let models = proxied_models(config.as_object().unwrap(), secrets, &mut problems);
        let problems = problems
            .into_error()
            .problems
            .iter()
            .map(ToString::to_string)
            .collect();
        (models, problems)
    }

    #[test]
    fn a_model_is_proxied_when_its_key_variable_is_bound_to_a_secret() {
        let config = json!({"models": {
            "default": {"provider": "openai", "model": "gpt-4o", "api_key_env": "OPENAI_API_KEY"},
            "local": {"provider": "openai_compatible", "base_url": "https://llm.example.com/v1/",
                      "api_key_env": "LLM_KEY"},
            "plain": {"provider": "openai", "api_key_env": "NOT_BOUND"},
            "keyless": {"provider": "ollama"},
        }});
        let (models, problems) = proxied(
            config,
            &[
                binding("OPENAI_API_KEY", "openai"),
                binding("LLM_KEY", "llm"),
            ],
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            models,
            [
                ProxiedModel {
                    alias: "default".into(),
                    base_url: "https://api.openai.com/v1".into(),
                    env: "OPENAI_API_KEY".into(),
                    secret: "openai".into(),
                    key: "OPENAI_API_KEY".into(),
                },
                ProxiedModel {
                    alias: "local".into(),
                    base_url: "https://llm.example.com/v1".into(),
                    env: "LLM_KEY".into(),
                    secret: "llm".into(),
                    key: "LLM_KEY".into(),
                },
            ]
        );
        let (listed, _) = proxied(
            json!({"provider": "nvidia", "models": [{"api_key_env": "K"}]}),
            &[binding("K", "k")],
        );
        assert_eq!(listed[0].alias, "0");
        assert_eq!(listed[0].base_url, "https://integrate.api.nvidia.com/v1");
    }

    #[test]
    fn a_model_the_route_cannot_carry_is_refused_naming_its_field() {
        let secrets = [binding("K", "k")];
        for (model, says) in [
            (
                json!({"provider": "anthropic", "api_key_env": "K"}),
                "config.models.m.provider: \"anthropic\" models cannot have proxied credentials",
            ),
            (
                json!({"provider": "openai_compatible", "api_key_env": "K"}),
                "config.models.m.base_url: a openai_compatible model with proxied credentials needs its https base_url",
            ),
            (
                json!({"provider": "openai", "base_url": "http://llm.example.com/v1", "api_key_env": "K"}),
                "config.models.m.base_url: \"http://llm.example.com/v1\": the proxy adds the real key only over TLS",
            ),
            (
                json!({"provider": "openai", "base_url": "https://u:p@llm.example.com/", "api_key_env": "K"}),
                "carries user information",
            ),
        ] {
            let (models, problems) = proxied(json!({"models": {"m": model}}), &secrets);
            assert!(models.is_empty());
            assert!(problems[0].contains(says), "{problems:?}");
            assert!(
                problems[0].contains("modelCredentials to Direct") || !says.contains("provider")
            );
        }
        let (_, problems) = proxied(json!({"models": {"a/b": {"api_key_env": "K"}}}), &secrets);
        assert!(
            problems[0].starts_with("config.models.a/b: alias \"a/b\""),
            "{problems:?}"
        );
    }

    #[test]
    fn the_agent_config_points_proxied_models_at_their_route() {
        let config = json!({"name": "a", "models": {
            "default": {"provider": "openai", "api_key_env": "K"},
            "other": {"provider": "anthropic", "api_key_env": "A"},
        }});
        let models = [ProxiedModel {
            alias: "default".into(),
            base_url: "https://api.openai.com/v1".into(),
            env: "K".into(),
            secret: "k".into(),
            key: "K".into(),
        }];
        let proxy = url::Url::parse("http://10.0.0.1:3128/").unwrap();
        let rewritten = agent_config(config.as_object().unwrap(), &models, &proxy);
        assert_eq!(
            rewritten["models"]["default"]["base_url"],
            "http://10.0.0.1:3128/models/default"
        );
        assert_eq!(rewritten["models"]["other"], config["models"]["other"]);
    }

    #[test]
    fn a_path_on_the_route_names_its_model_and_never_steps_out_of_its_base() {
        assert_eq!(
            model_path("/models/default/chat/completions?x=1"),
            Some(("default", "chat/completions?x=1"))
        );
        assert_eq!(model_path("/models/default"), Some(("default", "")));
        for path in [
            "/other",
            "/models/",
            "/models/d/../../x",
            "/models/d/%2E%2e/x",
            "/models/d/a%2Fb",
            "/models/d/./x",
        ] {
            assert_eq!(model_path(path), None, "{path}");
        }
    }
}
