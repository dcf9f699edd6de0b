//! The live-object resolution [`Catalog`] the controller and the webhook share: reflector caches of Agents, AgentEnvironments, AgentRuntimes, AgentExtensions and Filesets, and Secret key names read on demand.
//!
//! Secrets are never cached or listed: the controller may only `get` them, and only the key
//! names survive the read ([`secret_key_names`] runs on arrival), so a Secret value is never
//! kept, logged or stored. A failed resolution is confirmed against the API server
//! ([`live_catalog`]) before it becomes a terminal `InvalidSpec` or a rejected create, because
//! an execution created right after the objects it names can arrive before they reach a cache.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::core::object::HasSpec;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use super::ApiError;
use crate::api::contract::SNAPSHOT_KEY;
use crate::api::{
    Agent, AgentEnvironment, AgentEnvironmentSpec, AgentExecution, AgentExecutionSpec,
    AgentExtension, AgentExtensionSpec, AgentRuntime, AgentRuntimeSpec, AgentSpec, Fileset,
    FilesetStatus, ModelCredentials,
};
use crate::archive::PathIndex;
use crate::resolve::{
    Catalog, ClassKind, ImageRun, InMemoryCatalog, InvalidSpec, RerunSource, Snapshot, StringRef,
    WithFilesetPaths, mcp_secret_refs, merge_environment, subpath_digests,
};

/// Path indexes kept in memory; the cache starts over when it is full.
const PATH_INDEXES_CACHED: usize = 256;
/// How long reading one resolution's path indexes may take; past it subpaths are checked at
/// staging only, so that admission answers within its budget.
const PATH_INDEX_BUDGET: Duration = Duration::from_secs(1);

/// Reflector caches of the objects an execution can refer to, Secrets aside.
#[derive(Clone)]
pub struct ClusterCatalog {
    /// Agents.
    pub agents: Store<Agent>,
    /// AgentEnvironments.
    pub environments: Store<AgentEnvironment>,
    /// AgentRuntimes (cluster-scoped).
    pub runtimes: Store<AgentRuntime>,
    /// AgentExtensions (cluster-scoped).
    pub extensions: Store<AgentExtension>,
    /// Filesets.
    pub filesets: Store<Fileset>,
    /// The path indexes pushed beside Fileset blobs.
    pub fileset_paths: FilesetPaths,
    /// The RuntimeClass every agent pod runs under (`--execution-runtime-class`), if required.
    pub required_runtime_class: Option<String>,
    /// How runs hold their models' keys when their environment does not say
    /// (`--model-credentials`).
    pub default_model_credentials: ModelCredentials,
}

/// Path indexes by namespace and digest.
type PathIndexCache = HashMap<(String, String), Arc<PathIndex>>;

/// The path indexes of Fileset contents, read from the store and kept by digest (a content
/// never changes, nor do its paths).
#[derive(Clone, Default)]
pub struct FilesetPaths {
    store: Option<crate::store::Store>,
    cache: Arc<Mutex<PathIndexCache>>,
}

impl FilesetPaths {
    /// Indexes read from `store`.
    pub fn from_store(store: crate::store::Store) -> Self {
        FilesetPaths {
            store: Some(store),
            cache: Arc::default(),
        }
    }

    /// The indexes of `digests` in `namespace`, from the cache or the store, within
    /// [`PATH_INDEX_BUDGET`].
    async fn load(
        &self,
        namespace: &str,
        digests: BTreeSet<String>,
    ) -> Vec<(String, String, Arc<PathIndex>)> {
        let Some(store) = &self.store else {
            return Vec::new();
        };
        let mut found = Vec::new();
        let mut missing = Vec::new();
        {
            let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            for digest in digests {
                match cache.get(&(namespace.to_owned(), digest.clone())) {
                    Some(index) => found.push((namespace.to_owned(), digest, Arc::clone(index))),
                    None => missing.push(digest),
                }
            }
        }
        if missing.is_empty() {
            return found;
        }
        let read = store.fileset_path_indexes(namespace, missing);
        match tokio::time::timeout(PATH_INDEX_BUDGET, read).await {
            Ok(read) => {
                let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
                if cache.len() + read.len() > PATH_INDEXES_CACHED {
                    cache.clear();
                }
                for (namespace, digest, index) in &read {
                    cache.insert((namespace.clone(), digest.clone()), Arc::clone(index));
                }
                found.extend(read);
            }
            Err(_) => tracing::warn!(
                namespace,
                "reading Fileset path indexes took longer than {PATH_INDEX_BUDGET:?}; subpaths are checked at staging"
            ),
        }
        found
    }
}

impl ClusterCatalog {
    /// Waits until every cache has been filled once; `false` if one stopped first.
    pub async fn wait_until_ready(&self) -> bool {
        self.agents.wait_until_ready().await.is_ok()
            && self.environments.wait_until_ready().await.is_ok()
            && self.runtimes.wait_until_ready().await.is_ok()
            && self.extensions.wait_until_ready().await.is_ok()
            && self.filesets.wait_until_ready().await.is_ok()
    }
}

/// The caches plus what one execution names outside them, read for it: the key names of the
/// Secrets it binds and whether the classes it may run under exist.
struct WithSecrets<'a> {
    caches: &'a ClusterCatalog,
    namespace: &'a str,
    secrets: BTreeMap<String, BTreeSet<String>>,
    classes: BTreeMap<(ClassKind, String), bool>,
}

impl Catalog for WithSecrets<'_> {
    fn agent(&self, namespace: &str, name: &str) -> Option<AgentSpec> {
        let key = ObjectRef::new(name).within(namespace);
        self.caches.agents.get(&key).map(|a| a.spec.clone())
    }

    fn environment(&self, namespace: &str, name: &str) -> Option<AgentEnvironmentSpec> {
        let key = ObjectRef::new(name).within(namespace);
        self.caches.environments.get(&key).map(|e| e.spec.clone())
    }

    fn runtimes(&self) -> Vec<(String, AgentRuntimeSpec)> {
        named_specs(self.caches.runtimes.state().iter().map(|r| r.as_ref()))
    }

    fn extensions(&self) -> Vec<(String, AgentExtensionSpec)> {
        named_specs(self.caches.extensions.state().iter().map(|r| r.as_ref()))
    }

    fn secret_keys(&self, namespace: &str, name: &str) -> Option<BTreeSet<String>> {
        (namespace == self.namespace)
            .then(|| self.secrets.get(name).cloned())
            .flatten()
    }

    fn fileset(&self, namespace: &str, name: &str) -> Option<FilesetStatus> {
        let key = ObjectRef::new(name).within(namespace);
        self.caches
            .filesets
            .get(&key)
            .map(|f| f.status.clone().unwrap_or_default())
    }

    fn class_exists(&self, kind: ClassKind, name: &str) -> Option<bool> {
        self.classes.get(&(kind, name.to_owned())).copied()
    }

    fn required_runtime_class(&self) -> Option<String> {
        self.caches.required_runtime_class.clone()
    }

    fn default_model_credentials(&self) -> ModelCredentials {
        self.caches.default_model_credentials
    }
}

/// Resolves `spec` submitted in `namespace`: from the caches and live reads of the Secrets it
/// binds, and when that fails, once more from fresh reads of everything it names. The outer
/// error is an API failure; the inner one is the spec's own problems.
pub async fn resolve(
    client: &Client,
    caches: &ClusterCatalog,
    namespace: &str,
    spec: &AgentExecutionSpec,
) -> Result<Result<Snapshot, InvalidSpec>, ApiError> {
    if let Some(rerun) = &spec.rerun_of {
        let mut catalog = InMemoryCatalog::default();
        if let Some(class) = &caches.required_runtime_class {
            catalog = catalog.with_required_runtime_class(class);
        }
        if let Some(source) = read_rerun_source(client, namespace, &rerun.name).await? {
            catalog = catalog.with_rerun_source(namespace, &rerun.name, source);
        }
        return Ok(crate::resolve::resolve_execution(namespace, spec, &catalog));
    }
    let cached_environment = match &spec.environment_ref {
        Some(reference) => caches
            .environments
            .get(&ObjectRef::new(&reference.name).within(namespace))
            .map(|e| e.spec.clone()),
        None => spec.environment.clone(),
    };
    let cached_agent = match &spec.agent_ref {
        Some(reference) => caches
            .agents
            .get(&ObjectRef::new(&reference.name).within(namespace))
            .map(|a| a.spec.clone()),
        None => spec.agent.clone(),
    };
    let mut secrets = BTreeMap::new();
    let names = bound_secret_names(cached_agent.as_ref(), cached_environment.as_ref());
    for name in names.into_iter().chain(signing_secret_name(spec)) {
        if let Some(keys) = read_secret_keys(client, namespace, &name).await? {
            secrets.insert(name, keys);
        }
    }
    let runtimes = named_specs(caches.runtimes.state().iter().map(|r| r.as_ref()));
    let named = named_classes(
        cached_environment.as_ref(),
        &runtimes,
        caches.required_runtime_class.as_deref(),
    );
    let mut classes = BTreeMap::new();
    for (kind, name) in named {
        let exists = class_exists(client, kind, &name).await?;
        classes.insert((kind, name), exists);
    }
    let catalog = WithSecrets {
        caches,
        namespace,
        secrets,
        classes,
    };
    let paths = caches
        .fileset_paths
        .load(namespace, subpath_digests(namespace, spec, &catalog))
        .await;
    let cached = {
        let catalog = WithFilesetPaths::new(&catalog, paths);
        crate::resolve::resolve_execution(namespace, spec, &catalog)
    };
    if let Ok(snapshot) = cached {
        return Ok(Ok(snapshot));
    }
    let live = live_catalog(
        client,
        namespace,
        spec,
        caches.required_runtime_class.as_deref(),
    )
    .await?
    .with_default_model_credentials(caches.default_model_credentials);
    let paths = caches
        .fileset_paths
        .load(namespace, subpath_digests(namespace, spec, &live))
        .await;
    let live = WithFilesetPaths::new(&live, paths);
    Ok(crate::resolve::resolve_execution(namespace, spec, &live))
}

/// What execution `name` left for a rerun, read from the API server (snapshots are not
/// cached): its status and its snapshot ConfigMap's document; `None` when it does not exist.
async fn read_rerun_source(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<RerunSource>, ApiError> {
    let executions = Api::<AgentExecution>::namespaced(client.clone(), namespace);
    let Some(execution) = get(executions, name).await? else {
        return Ok(None);
    };
    let status = execution.status.unwrap_or_default();
    let image = status
        .image_id
        .map_or(ImageRun::NotReported, ImageRun::Reported);
    let Some(snapshot) = status.snapshot else {
        return Ok(Some(RerunSource {
            image,
            ..RerunSource::default()
        }));
    };
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let document = get(config_maps, &snapshot.config_map)
        .await?
        .and_then(|config_map| config_map.data)
        .and_then(|mut data| data.remove(SNAPSHOT_KEY));
    Ok(Some(RerunSource {
        digest: Some(snapshot.digest),
        snapshot: document.map(String::into_bytes),
        location: format!("ConfigMap {:?}", snapshot.config_map),
        image,
    }))
}

/// The name and spec of each cluster-scoped object (AgentRuntimes, AgentExtensions), sorted by
/// name.
fn named_specs<'a, K>(objects: impl Iterator<Item = &'a K>) -> Vec<(String, K::Spec)>
where
    K: kube::Resource + HasSpec + 'a,
    K::Spec: Clone,
{
    let mut specs: Vec<(String, K::Spec)> = objects
        .filter_map(|o| Some((o.meta().name.clone()?, o.spec().clone())))
        .collect();
    specs.sort_by(|a, b| a.0.cmp(&b.0));
    specs
}

/// The names of the Secrets an execution binds: its environment's, and its MCP servers' in the
/// agent config with the environment merged in.
fn bound_secret_names(
    agent: Option<&AgentSpec>,
    environment: Option<&AgentEnvironmentSpec>,
) -> BTreeSet<String> {
    let overlay = environment.iter().flat_map(|e| e.overlay.secrets.values());
    let mut names: BTreeSet<String> = overlay
        .map(|target| StringRef::parse(target).name)
        .collect();
    if let Some(agent) = agent {
        let default = AgentEnvironmentSpec::default();
        let overlay = &environment.unwrap_or(&default).overlay;
        let config = merge_environment(&agent.config.0, overlay);
        let mcp = mcp_secret_refs(&config).into_iter();
        names.extend(mcp.filter_map(|r| Some(StringRef::parse(r.target.as_str()?).name)));
    }
    names
}

/// The Secret the execution's webhook signs its deliveries with, if it names one: admission
/// checks that it exists and holds the key.
fn signing_secret_name(spec: &AgentExecutionSpec) -> Option<String> {
    let webhook = spec.notify.as_ref()?.webhook.as_ref()?;
    Some(webhook.signing_secret_ref.name.clone())
}

/// The classes a run's pod may name: the environment's, those of the AgentRuntimes its agent
/// may pick, and the one the installation requires.
fn named_classes(
    environment: Option<&AgentEnvironmentSpec>,
    runtimes: &[(String, AgentRuntimeSpec)],
    required_runtime_class: Option<&str>,
) -> BTreeSet<(ClassKind, String)> {
    let computes = environment
        .map(|e| &e.compute)
        .into_iter()
        .chain(runtimes.iter().filter_map(|(_, r)| r.compute.as_ref()));
    let mut named: BTreeSet<(ClassKind, String)> = computes
        .flat_map(|compute| {
            ClassKind::ALL
                .into_iter()
                .filter_map(|kind| Some((kind, kind.named_in(compute)?.to_owned())))
        })
        .collect();
    named.extend(required_runtime_class.map(|class| (ClassKind::Runtime, class.to_owned())));
    named.retain(|(_, name)| crate::resolve::object_name(name).is_ok());
    named
}

/// Whether the `kind` class `name` exists (classes are cluster-scoped).
async fn class_exists(client: &Client, kind: ClassKind, name: &str) -> Result<bool, ApiError> {
    Ok(match kind {
        ClassKind::Priority => get(Api::<PriorityClass>::all(client.clone()), name)
            .await?
            .is_some(),
        ClassKind::Runtime => get(Api::<RuntimeClass>::all(client.clone()), name)
            .await?
            .is_some(),
    })
}

/// The key names of a Secret (its values are dropped here, as the object arrives).
pub fn secret_key_names(secret: Secret) -> BTreeSet<String> {
    let data = secret.data.into_iter().flat_map(BTreeMap::into_keys);
    let string_data = secret.string_data.into_iter().flat_map(BTreeMap::into_keys);
    data.chain(string_data).collect()
}

/// The key names of Secret `name` in `namespace`, or `None` when it does not exist.
async fn read_secret_keys(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeSet<String>>, ApiError> {
    let secret = get(Api::<Secret>::namespaced(client.clone(), namespace), name).await?;
    Ok(secret.map(secret_key_names))
}

/// A catalog of exactly the objects `spec` names in `namespace`, read from the API server.
/// Secrets contribute their key names only.
pub async fn live_catalog(
    client: &Client,
    namespace: &str,
    spec: &AgentExecutionSpec,
    required_runtime_class: Option<&str>,
) -> Result<InMemoryCatalog, ApiError> {
    let mut catalog = InMemoryCatalog::default();
    if let Some(class) = required_runtime_class {
        catalog = catalog.with_required_runtime_class(class);
    }
    let mut agent = spec.agent.clone();
    if let Some(reference) = &spec.agent_ref
        && let Some(found) = get(
            Api::<Agent>::namespaced(client.clone(), namespace),
            &reference.name,
        )
        .await?
    {
        agent = Some(found.spec.clone());
        catalog = catalog.with_agent(namespace, &reference.name, found.spec);
    }
    // Only an agent without its own runtime needs the AgentRuntimes.
    if agent.as_ref().is_some_and(|a| a.runtime.is_none()) {
        let runtimes = Api::<AgentRuntime>::all(client.clone())
            .list(&Default::default())
            .await
            .map_err(ApiError::during(
                "listing AgentRuntimes to resolve an execution",
            ))?;
        for (name, runtime) in named_specs(runtimes.items.iter()) {
            catalog = catalog.with_runtime(&name, runtime);
        }
    }
    if spec.extension.is_some() {
        let extensions = Api::<AgentExtension>::all(client.clone())
            .list(&Default::default())
            .await
            .map_err(ApiError::during(
                "listing AgentExtensions to resolve an execution",
            ))?;
        for (name, extension) in named_specs(extensions.items.iter()) {
            catalog = catalog.with_extension(&name, extension);
        }
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
    let names = bound_secret_names(agent.as_ref(), environment.as_ref());
    for name in names.into_iter().chain(signing_secret_name(spec)) {
        if let Some(keys) = read_secret_keys(client, namespace, &name).await? {
            // The in-memory catalog models a whole Secret; empty values stand in for the real ones.
            let pairs: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "")).collect();
            catalog = catalog.with_secret(namespace, &name, &pairs);
        }
    }
    let runtimes = catalog.runtimes();
    for (kind, name) in named_classes(environment.as_ref(), &runtimes, required_runtime_class) {
        catalog = if class_exists(client, kind, &name).await? {
            catalog.with_class(kind, &name)
        } else {
            catalog.without_classes(kind)
        };
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

async fn get<K>(api: Api<K>, name: &str) -> Result<Option<K>, ApiError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if crate::resolve::object_name(name).is_err() {
        return Ok(None);
    }
    api.get_opt(name).await.map_err(ApiError::during(format!(
        "reading {name} to resolve an execution"
    )))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn a_read_secret_yields_its_key_names_and_nothing_of_its_values() {
        let secret = Secret {
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
        let keys = secret_key_names(secret);
        assert_eq!(
            keys,
            BTreeSet::from(["anthropic".to_owned(), "openai".to_owned()])
        );
        let text = format!("{keys:?}");
        assert!(!text.contains("sk-"), "{text}");
    }

    #[test]
    fn the_secrets_an_environment_binds_are_named_once_each() {
        let environment: AgentEnvironmentSpec = serde_json::from_value(serde_json::json!({
            "overlay": {"secrets": {
                "OPENAI_API_KEY": "model-keys#openai",
                "ANTHROPIC_API_KEY": "model-keys#anthropic",
                "GITHUB_TOKEN": "github",
            }},
        }))
        .unwrap();
        assert_eq!(
            bound_secret_names(None, Some(&environment)),
            BTreeSet::from(["github".to_owned(), "model-keys".to_owned()])
        );
        assert!(bound_secret_names(None, None).is_empty());
        // MCP servers bind Secrets too, in the agent config and in the environment's overlay.
        let agent: AgentSpec = serde_json::from_value(serde_json::json!({
            "config": {"config_format": "nemo-agents-spec-v1", "mcp": {"servers": {
                "search": {"secrets": {"SEARCH_TOKEN": "search-creds#token"}},
            }}},
        }))
        .unwrap();
        let environment: AgentEnvironmentSpec = serde_json::from_value(serde_json::json!({
            "overlay": {"mcp": {"servers": {"calculator": {"secrets": {"CALC_KEY": "calc"}}}}},
        }))
        .unwrap();
        assert_eq!(
            bound_secret_names(Some(&agent), Some(&environment)),
            BTreeSet::from(["calc".to_owned(), "search-creds".to_owned()])
        );
    }
}
