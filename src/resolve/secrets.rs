//! Secret bindings of an execution: the environment's overlay (`ENV: secret[#key]`) and the MCP servers' (`mcp.servers.<name>.secrets.<ENV>: secret[#key]`), each checked for its name, namespace, Secret and key; only references are kept.

use serde_json::{Map, Value};

use super::catalog::Catalog;
use super::problems::Problems;
use super::refs::StringRef;
use super::rules::{self, object_name};
use super::snapshot::SecretBinding;
use crate::api::AgentEnvironmentSpec;

/// The secret bindings of the environment, each checked for name, namespace and existence of
/// Secret and key.
pub(super) fn environment_secrets(
    namespace: &str,
    environment: &AgentEnvironmentSpec,
    environment_name: Option<&str>,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) -> Vec<SecretBinding> {
    let prefix = match environment_name {
        Some(name) => format!("AgentEnvironment {name:?} spec.overlay.secrets"),
        None => "spec.environment.overlay.secrets".to_owned(),
    };
    environment
        .overlay
        .secrets
        .iter()
        .filter_map(|(env, target)| {
            let field = format!("{prefix}.{env}");
            bind_secret(namespace, env, target, &field, catalog, problems)
        })
        .collect()
}

/// One `ENV: secret[#key]` binding, checked; `None` (and a problem at `field`) when it is not
/// usable.
fn bind_secret(
    namespace: &str,
    env: &str,
    target: &str,
    field: &str,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) -> Option<SecretBinding> {
    if let Err(message) = rules::env_name(env) {
        problems.push(field, message);
        return None;
    }
    let reference = StringRef::parse(target);
    if let Some(other) = reference.namespace.as_deref().filter(|ns| *ns != namespace) {
        problems.push(
            field,
            format!("{target:?} names Secret namespace {other:?}; references must stay in namespace {namespace:?}"),
        );
        return None;
    }
    let key = reference.fragment.clone().unwrap_or_else(|| env.to_owned());
    if let Err(message) = object_name(&reference.name).and(rules::secret_key(&key)) {
        problems.push(field, message);
        return None;
    }
    match catalog.secret_keys(namespace, &reference.name) {
        None => problems.push(
            field,
            format!(
                "Secret {:?} not found in namespace {namespace:?}",
                reference.name
            ),
        ),
        Some(keys) if !keys.contains(&key) => problems.push(
            field,
            format!("Secret {:?} has no key {key:?}", reference.name),
        ),
        Some(_) => {
            return Some(SecretBinding {
                env: env.to_owned(),
                secret: reference.name,
                key,
            });
        }
    }
    None
}

/// One MCP-scoped secret binding of a config: `mcp.servers.<server>.secrets.<env>: target`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpSecretRef {
    /// The MCP server.
    pub server: String,
    /// The environment variable the agent gets.
    pub env: String,
    /// The binding as written: `secret[#key]`, or a value that is not a string.
    pub target: Value,
}

impl McpSecretRef {
    /// The config field of the binding.
    pub fn field(&self) -> String {
        format!("mcp.servers.{}.secrets.{}", self.server, self.env)
    }
}

/// Every MCP-scoped secret binding of `config`, in order of server and variable.
pub fn mcp_secret_refs(config: &Map<String, Value>) -> Vec<McpSecretRef> {
    let servers = config
        .get("mcp")
        .and_then(|mcp| mcp.get("servers"))
        .and_then(Value::as_object);
    servers
        .into_iter()
        .flatten()
        .flat_map(|(server, settings)| {
            let secrets = settings.get("secrets").and_then(Value::as_object);
            secrets
                .into_iter()
                .flatten()
                .map(|(env, target)| McpSecretRef {
                    server: server.clone(),
                    env: env.clone(),
                    target: target.clone(),
                })
        })
        .collect()
}

/// `bindings` (the environment's) with the MCP-scoped bindings of the merged `config` added,
/// each checked like the environment's. A variable bound twice is refused.
pub(super) fn with_mcp_secrets(
    namespace: &str,
    mut bindings: Vec<SecretBinding>,
    config: &Map<String, Value>,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) -> Vec<SecretBinding> {
    for reference in mcp_secret_refs(config) {
        let field = format!(
            "config.{} (after merging the environment)",
            reference.field()
        );
        let Value::String(target) = &reference.target else {
            problems.push(
                field,
                format!(
                    "{} must be a Secret reference secret[#key]",
                    reference.target
                ),
            );
            continue;
        };
        if bindings.iter().any(|b| b.env == reference.env) {
            problems.push(
                field,
                format!(
                    "{:?} is bound to a Secret already (by the environment or another MCP server)",
                    reference.env
                ),
            );
            continue;
        }
        if let Some(binding) =
            bind_secret(namespace, &reference.env, target, &field, catalog, problems)
        {
            bindings.push(binding);
        }
    }
    bindings
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{InMemoryCatalog, resolve_execution};
    use crate::api::{AgentExecutionSpec, AgentSpec};
    use crate::testing::{NS, SECRET_VALUE};

    /// The calculator with MCP server `search` binding `bindings` in its config.
    fn with_mcp(bindings: serde_json::Value) -> InMemoryCatalog {
        let agent = AgentSpec::test()
            .with_config("mcp", json!({"servers": {"search": {"url": "http://search.internal/mcp", "secrets": bindings}}}));
        InMemoryCatalog::test().with_agent(NS, "calculator", agent)
    }

    #[test]
    fn an_mcp_server_secret_is_bound_like_an_overlay_secret_and_never_copied() {
        let catalog = with_mcp(json!({"SEARCH_TOKEN": "model-keys#openai"}));
        let snapshot = resolve_execution(NS, &AgentExecutionSpec::test(), &catalog).unwrap();
        let search = snapshot
            .secrets
            .iter()
            .find(|b| b.env == "SEARCH_TOKEN")
            .expect("the MCP binding");
        assert_eq!(
            (search.secret.as_str(), search.key.as_str()),
            ("model-keys", "openai")
        );
        let stored = String::from_utf8(snapshot.canonical_json()).unwrap();
        assert!(!stored.contains(SECRET_VALUE), "{stored}");
    }

    #[test]
    fn a_bad_mcp_secret_binding_is_refused_naming_its_field() {
        let field = |env: &str| {
            format!("config.mcp.servers.search.secrets.{env} (after merging the environment)")
        };
        let cases = [
            (
                json!({"TOKEN": "missing#token"}),
                field("TOKEN"),
                "Secret \"missing\" not found",
            ),
            (
                json!({"TOKEN": "model-keys#nope"}),
                field("TOKEN"),
                "has no key \"nope\"",
            ),
            (
                json!({"ERRAND_INPUT": "model-keys#openai"}),
                field("ERRAND_INPUT"),
                "reserved",
            ),
            (
                json!({"TOKEN": "other/model-keys#openai"}),
                field("TOKEN"),
                "namespace \"other\"",
            ),
            (
                json!({"TOKEN": 7}),
                field("TOKEN"),
                "must be a Secret reference",
            ),
            // The environment `prod` binds OPENAI_API_KEY already.
            (
                json!({"OPENAI_API_KEY": "model-keys#openai"}),
                field("OPENAI_API_KEY"),
                "bound to a Secret already",
            ),
        ];
        for (bindings, field, message) in cases {
            let catalog = with_mcp(bindings.clone());
            let error = resolve_execution(NS, &AgentExecutionSpec::test(), &catalog).unwrap_err();
            assert!(
                error
                    .problems
                    .iter()
                    .any(|p| p.field == field && p.message.contains(message)),
                "{bindings}: {error}"
            );
        }
    }
}
