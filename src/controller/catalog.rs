//! The resolution [`Catalog`] of the controller: reflector caches of Agents, AgentEnvironments, Filesets and Secret key names.
//!
//! Secrets are cached without their values ([`keep_key_names_only`] runs before an object
//! reaches the cache). A failed resolution is confirmed against the API server
//! ([`live_catalog`]) before it becomes a terminal `InvalidSpec`, because an execution created
//! right after the objects it names can reach the controller before they do.

use std::collections::BTreeSet;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use super::error::{Error, Result};
use crate::api::{
    Agent, AgentEnvironment, AgentEnvironmentSpec, AgentExecutionSpec, AgentSpec, Fileset,
    FilesetStatus,
};
use crate::resolve::{Catalog, InMemoryCatalog, StringRef};

/// Reflector caches of everything an execution can refer to.
#[derive(Clone)]
pub struct ClusterCatalog {
    /// Agents.
    pub agents: Store<Agent>,
    /// AgentEnvironments.
    pub environments: Store<AgentEnvironment>,
    /// Filesets.
    pub filesets: Store<Fileset>,
    /// Secrets, key names only.
    pub secrets: Store<Secret>,
}

impl Catalog for ClusterCatalog {
    fn agent(&self, namespace: &str, name: &str) -> Option<AgentSpec> {
        let key = ObjectRef::new(name).within(namespace);
        self.agents.get(&key).map(|a| a.spec.clone())
    }

    fn environment(&self, namespace: &str, name: &str) -> Option<AgentEnvironmentSpec> {
        let key = ObjectRef::new(name).within(namespace);
        self.environments.get(&key).map(|e| e.spec.clone())
    }

    fn secret_keys(&self, namespace: &str, name: &str) -> Option<BTreeSet<String>> {
        let key = ObjectRef::new(name).within(namespace);
        self.secrets.get(&key).map(|s| secret_key_names(&s))
    }

    fn fileset(&self, namespace: &str, name: &str) -> Option<FilesetStatus> {
        let key = ObjectRef::new(name).within(namespace);
        self.filesets
            .get(&key)
            .map(|f| f.status.clone().unwrap_or_default())
    }
}

fn secret_key_names(secret: &Secret) -> BTreeSet<String> {
    let data = secret.data.iter().flat_map(|d| d.keys());
    let string_data = secret.string_data.iter().flat_map(|d| d.keys());
    data.chain(string_data).cloned().collect()
}

/// Replaces every value of a Secret with an empty one and drops what resolution never needs,
/// so the controller's cache holds key names only.
pub fn keep_key_names_only(secret: &mut Secret) {
    let keys = secret_key_names(secret);
    secret.data = Some(
        keys.into_iter()
            .map(|k| (k, ByteString(Vec::new())))
            .collect(),
    );
    secret.string_data = None;
    secret.metadata.managed_fields = None;
    secret.metadata.annotations = None;
}

/// A catalog of exactly the objects `spec` names in `namespace`, read from the API server.
/// Secret values are dropped as they arrive.
pub async fn live_catalog(
    client: &Client,
    namespace: &str,
    spec: &AgentExecutionSpec,
) -> Result<InMemoryCatalog> {
    let mut catalog = InMemoryCatalog::default();
    if let Some(reference) = &spec.agent_ref
        && let Some(agent) = get(
            Api::<Agent>::namespaced(client.clone(), namespace),
            &reference.name,
        )
        .await?
    {
        catalog = catalog.with_agent(namespace, &reference.name, agent.spec);
    }
    let environment = match &spec.environment_ref {
        Some(reference) => {
            let api = Api::<AgentEnvironment>::namespaced(client.clone(), namespace);
            let found = get(api, &reference.name).await?;
            if let Some(environment) = &found {
                catalog =
                    catalog.with_environment(namespace, &reference.name, environment.spec.clone());
            }
            found.map(|e| e.spec)
        }
        None => spec.environment.clone(),
    };
    let secret_names: BTreeSet<String> = environment
        .iter()
        .flat_map(|e| e.overlay.secrets.values())
        .map(|target| StringRef::parse(target).name)
        .collect();
    for name in secret_names {
        if let Some(mut secret) =
            get(Api::<Secret>::namespaced(client.clone(), namespace), &name).await?
        {
            keep_key_names_only(&mut secret);
            let keys: Vec<(String, String)> = secret_key_names(&secret)
                .into_iter()
                .map(|k| (k, String::new()))
                .collect();
            let pairs: Vec<(&str, &str)> =
                keys.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            catalog = catalog.with_secret(namespace, &name, &pairs);
        }
    }
    let workdir = spec.workdir.iter();
    let fileset_refs = workdir.flat_map(|w| {
        w.base
            .iter()
            .cloned()
            .chain(w.artifact_mounts.iter().map(|m| m.fileset_ref.clone()))
    });
    let fileset_names: BTreeSet<String> = fileset_refs.map(|r| StringRef::parse(&r).name).collect();
    for name in fileset_names {
        if let Some(fileset) =
            get(Api::<Fileset>::namespaced(client.clone(), namespace), &name).await?
        {
            catalog = catalog.with_fileset(namespace, &name, fileset.status.unwrap_or_default());
        }
    }
    Ok(catalog)
}

async fn get<K>(api: Api<K>, name: &str) -> Result<Option<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if crate::resolve::object_name(name).is_err() {
        return Ok(None);
    }
    api.get_opt(name).await.map_err(Error::kube(format!(
        "reading {name} to confirm a failed resolution"
    )))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn a_cached_secret_keeps_key_names_and_no_values() {
        let mut secret = Secret {
            metadata: ObjectMeta {
                name: Some("model-keys".into()),
                annotations: Some(BTreeMap::from([(
                    "kubectl.kubernetes.io/last-applied-configuration".into(),
                    "{\"data\":{\"openai\":\"c2stc2VjcmV0\"}}".into(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                "openai".into(),
                ByteString(b"sk-secret".to_vec()),
            )])),
            string_data: Some(BTreeMap::from([("anthropic".into(), "sk-ant".into())])),
            ..Default::default()
        };
        keep_key_names_only(&mut secret);
        assert_eq!(
            secret_key_names(&secret),
            BTreeSet::from(["anthropic".to_owned(), "openai".to_owned()])
        );
        let text = serde_json::to_string(&secret).unwrap();
        assert!(!text.contains("sk-"), "{text}");
        assert!(!text.contains("c2stc2VjcmV0"), "{text}");
    }
}
