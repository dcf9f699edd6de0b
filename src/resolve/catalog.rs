//! What resolution may look up about other objects, and an in-memory catalog for tests and the local backend.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::rerun::RerunSource;
use crate::api::{
    AgentEnvironmentSpec, AgentExtensionSpec, AgentRuntimeSpec, AgentSpec, FilesetStatus,
    ModelCredentials,
};
use crate::archive::PathIndex;

/// Read-only lookups of the objects an execution refers to. Implementations answer from
/// caches or memory: resolution itself does no I/O. Secrets are looked up by key *names* only;
/// their values never reach resolution.
pub trait Catalog {
    /// The spec of Agent `name` in `namespace`.
    fn agent(&self, namespace: &str, name: &str) -> Option<AgentSpec>;
    /// The spec of AgentEnvironment `name` in `namespace`.
    fn environment(&self, namespace: &str, name: &str) -> Option<AgentEnvironmentSpec>;
    /// Every AgentRuntime (they are cluster-scoped), by name.
    fn runtimes(&self) -> Vec<(String, AgentRuntimeSpec)>;
    /// Every AgentExtension (they are cluster-scoped), by name.
    fn extensions(&self) -> Vec<(String, AgentExtensionSpec)>;
    /// The key names of Secret `name` in `namespace`.
    fn secret_keys(&self, namespace: &str, name: &str) -> Option<BTreeSet<String>>;
    /// The status of Fileset `name` in `namespace` (its digest once pushed).
    fn fileset(&self, namespace: &str, name: &str) -> Option<FilesetStatus>;
    /// The paths of the Fileset content at `digest` (`sha256:<hex>`) in `namespace`, from the
    /// index pushed beside it; `None` when unknown, and then a subpath is checked at staging.
    fn fileset_paths(&self, namespace: &str, digest: &str) -> Option<Arc<PathIndex>> {
        let _ = (namespace, digest);
        None
    }
    /// Whether the `kind` class `name` exists; `None` when this catalog cannot tell (the local
    /// backend, which schedules nothing, knows no classes).
    fn class_exists(&self, kind: ClassKind, name: &str) -> Option<bool>;
    /// The RuntimeClass this installation runs every agent pod under (the chart's
    /// `agentPods.runtimeClassName`), if it requires one.
    fn required_runtime_class(&self) -> Option<String> {
        None
    }
    /// How runs hold their models' keys when their environment does not say (the chart's
    /// `modelCredentials`).
    fn default_model_credentials(&self) -> ModelCredentials {
        ModelCredentials::Direct
    }
    /// What execution `name` in `namespace` left for a rerun (its snapshot, the digest it
    /// recorded, its image); `None` when there is no such execution. The cluster's caches do
    /// not hold snapshots: `cluster::catalog::resolve` reads a rerun's source live.
    fn rerun_source(&self, namespace: &str, name: &str) -> Option<RerunSource> {
        let _ = (namespace, name);
        None
    }
}

/// A cluster-scoped class a pod names in its compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClassKind {
    /// A PriorityClass (`compute.priorityClassName`).
    Priority,
    /// A RuntimeClass (`compute.runtimeClassName`).
    Runtime,
}

impl ClassKind {
    /// Both kinds.
    pub const ALL: [ClassKind; 2] = [ClassKind::Priority, ClassKind::Runtime];

    /// The kind's Kubernetes name.
    pub fn kind(self) -> &'static str {
        match self {
            ClassKind::Priority => "PriorityClass",
            ClassKind::Runtime => "RuntimeClass",
        }
    }

    /// The compute field that names one.
    pub fn field(self) -> &'static str {
        match self {
            ClassKind::Priority => "priorityClassName",
            ClassKind::Runtime => "runtimeClassName",
        }
    }

    /// The resource `kubectl get` lists them with.
    pub fn resource(self) -> &'static str {
        match self {
            ClassKind::Priority => "priorityclasses",
            ClassKind::Runtime => "runtimeclasses",
        }
    }

    /// The class of this kind that `compute` names.
    pub fn named_in(self, compute: &crate::api::Compute) -> Option<&str> {
        match self {
            ClassKind::Priority => compute.priority_class_name.as_deref(),
            ClassKind::Runtime => compute.runtime_class_name.as_deref(),
        }
    }
}

/// A catalog with the path indexes of some Fileset contents, read for one resolution.
pub struct WithFilesetPaths<'a> {
    inner: &'a dyn Catalog,
    paths: BTreeMap<Key, Arc<PathIndex>>,
}

impl<'a> WithFilesetPaths<'a> {
    /// `inner`, answering [`Catalog::fileset_paths`] from `paths` (namespace, digest, index).
    pub fn new(
        inner: &'a dyn Catalog,
        paths: impl IntoIterator<Item = (String, String, Arc<PathIndex>)>,
    ) -> Self {
        let paths = paths
            .into_iter()
            .map(|(namespace, digest, index)| ((namespace, digest), index))
            .collect();
        WithFilesetPaths { inner, paths }
    }
}

impl Catalog for WithFilesetPaths<'_> {
    fn agent(&self, namespace: &str, name: &str) -> Option<AgentSpec> {
        self.inner.agent(namespace, name)
    }

    fn environment(&self, namespace: &str, name: &str) -> Option<AgentEnvironmentSpec> {
        self.inner.environment(namespace, name)
    }

    fn runtimes(&self) -> Vec<(String, AgentRuntimeSpec)> {
        self.inner.runtimes()
    }

    fn extensions(&self) -> Vec<(String, AgentExtensionSpec)> {
        self.inner.extensions()
    }

    fn secret_keys(&self, namespace: &str, name: &str) -> Option<BTreeSet<String>> {
        self.inner.secret_keys(namespace, name)
    }

    fn fileset(&self, namespace: &str, name: &str) -> Option<FilesetStatus> {
        self.inner.fileset(namespace, name)
    }

    fn class_exists(&self, kind: ClassKind, name: &str) -> Option<bool> {
        self.inner.class_exists(kind, name)
    }

    fn required_runtime_class(&self) -> Option<String> {
        self.inner.required_runtime_class()
    }

    fn default_model_credentials(&self) -> ModelCredentials {
        self.inner.default_model_credentials()
    }

    fn fileset_paths(&self, namespace: &str, digest: &str) -> Option<Arc<PathIndex>> {
        self.paths
            .get(&key(namespace, digest))
            .cloned()
            .or_else(|| self.inner.fileset_paths(namespace, digest))
    }

    fn rerun_source(&self, namespace: &str, name: &str) -> Option<RerunSource> {
        self.inner.rerun_source(namespace, name)
    }
}

type Key = (String, String);

fn key(namespace: &str, name: &str) -> Key {
    (namespace.to_owned(), name.to_owned())
}

/// A catalog held in memory.
#[derive(Clone, Debug, Default)]
pub struct InMemoryCatalog {
    agents: BTreeMap<Key, AgentSpec>,
    environments: BTreeMap<Key, AgentEnvironmentSpec>,
    runtimes: BTreeMap<String, AgentRuntimeSpec>,
    extensions: BTreeMap<String, AgentExtensionSpec>,
    secrets: BTreeMap<Key, BTreeMap<String, String>>,
    filesets: BTreeMap<Key, FilesetStatus>,
    fileset_paths: BTreeMap<Key, Arc<PathIndex>>,
    /// The cluster's classes of each kind, once one was added (until then, unknown).
    classes: BTreeMap<ClassKind, BTreeSet<String>>,
    required_runtime_class: Option<String>,
    default_model_credentials: ModelCredentials,
    reruns: BTreeMap<Key, RerunSource>,
}

impl InMemoryCatalog {
    /// Adds (or replaces) an Agent.
    pub fn with_agent(mut self, namespace: &str, name: &str, spec: AgentSpec) -> Self {
        self.agents.insert(key(namespace, name), spec);
        self
    }

    /// Adds (or replaces) an AgentEnvironment.
    pub fn with_environment(
        mut self,
        namespace: &str,
        name: &str,
        spec: AgentEnvironmentSpec,
    ) -> Self {
        self.environments.insert(key(namespace, name), spec);
        self
    }

    /// Adds (or replaces) an AgentRuntime.
    pub fn with_runtime(mut self, name: &str, spec: AgentRuntimeSpec) -> Self {
        self.runtimes.insert(name.to_owned(), spec);
        self
    }

    /// Adds (or replaces) an AgentExtension.
    pub fn with_extension(mut self, name: &str, spec: AgentExtensionSpec) -> Self {
        self.extensions.insert(name.to_owned(), spec);
        self
    }

    /// Adds (or replaces) a Secret. Like a real Secret it has values, but only the key names
    /// are ever handed to resolution.
    pub fn with_secret(mut self, namespace: &str, name: &str, data: &[(&str, &str)]) -> Self {
        let data = data
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.secrets.insert(key(namespace, name), data);
        self
    }

    /// Adds (or replaces) a Fileset with the given status.
    pub fn with_fileset(mut self, namespace: &str, name: &str, status: FilesetStatus) -> Self {
        self.filesets.insert(key(namespace, name), status);
        self
    }

    /// Adds the path index of the Fileset content at `digest` (`sha256:<hex>`).
    pub fn with_fileset_paths(mut self, namespace: &str, digest: &str, paths: PathIndex) -> Self {
        self.fileset_paths
            .insert(key(namespace, digest), Arc::new(paths));
        self
    }

    /// Adds a `kind` class; from then on the catalog knows which of that kind exist.
    pub fn with_class(mut self, kind: ClassKind, name: &str) -> Self {
        self.classes
            .entry(kind)
            .or_default()
            .insert(name.to_owned());
        self
    }

    /// Knows the cluster's `kind` classes, and none exists (yet).
    pub fn without_classes(mut self, kind: ClassKind) -> Self {
        self.classes.entry(kind).or_default();
        self
    }

    /// Gives runs whose environment does not say `mode` for their models' keys.
    pub fn with_default_model_credentials(mut self, mode: ModelCredentials) -> Self {
        self.default_model_credentials = mode;
        self
    }

    /// Requires every run to use RuntimeClass `name`.
    pub fn with_required_runtime_class(mut self, name: &str) -> Self {
        self.required_runtime_class = Some(name.to_owned());
        self
    }

    /// Adds what execution `name` left for a rerun.
    pub fn with_rerun_source(mut self, namespace: &str, name: &str, source: RerunSource) -> Self {
        self.reruns.insert(key(namespace, name), source);
        self
    }
}

impl Catalog for InMemoryCatalog {
    fn agent(&self, namespace: &str, name: &str) -> Option<AgentSpec> {
        self.agents.get(&key(namespace, name)).cloned()
    }

    fn environment(&self, namespace: &str, name: &str) -> Option<AgentEnvironmentSpec> {
        self.environments.get(&key(namespace, name)).cloned()
    }

    fn runtimes(&self) -> Vec<(String, AgentRuntimeSpec)> {
        self.runtimes
            .iter()
            .map(|(name, spec)| (name.clone(), spec.clone()))
            .collect()
    }

    fn extensions(&self) -> Vec<(String, AgentExtensionSpec)> {
        self.extensions
            .iter()
            .map(|(name, spec)| (name.clone(), spec.clone()))
            .collect()
    }

    fn secret_keys(&self, namespace: &str, name: &str) -> Option<BTreeSet<String>> {
        self.secrets
            .get(&key(namespace, name))
            .map(|data| data.keys().cloned().collect())
    }

    fn fileset(&self, namespace: &str, name: &str) -> Option<FilesetStatus> {
        self.filesets.get(&key(namespace, name)).cloned()
    }

    fn fileset_paths(&self, namespace: &str, digest: &str) -> Option<Arc<PathIndex>> {
        self.fileset_paths.get(&key(namespace, digest)).cloned()
    }

    fn class_exists(&self, kind: ClassKind, name: &str) -> Option<bool> {
        self.classes
            .get(&kind)
            .map(|classes| classes.contains(name))
    }

    fn required_runtime_class(&self) -> Option<String> {
        self.required_runtime_class.clone()
    }

    fn default_model_credentials(&self) -> ModelCredentials {
        self.default_model_credentials
    }

    fn rerun_source(&self, namespace: &str, name: &str) -> Option<RerunSource> {
        self.reruns.get(&key(namespace, name)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::AgentExecutionSpec;
    use crate::resolve::resolve_execution;

    #[test]
    fn a_subpath_missing_from_the_path_index_names_its_field() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let status = FilesetStatus {
            digest: Some(digest.clone()),
            ..FilesetStatus::default()
        };
        let paths = PathIndex::new(vec!["docs/".into(), "docs/a.md".into()]);
        let catalog = InMemoryCatalog::default().with_fileset("team-a", "data", status);
        let spec: AgentExecutionSpec = serde_json::from_value(json!({
            "agent": {"runtime": {"image": "busybox", "command": ["sh"]},
                      "config": {"config_format": "agents-spec-v1", "name": "lister"}},
            "workdir": {"base": "data#nope/", "artifactMounts": [
                {"ref": "data#docs/", "mountPath": "docs"},
                {"ref": "data#no-such-dir/", "mountPath": "more"},
            ]},
        }))
        .unwrap();
        // Without an index the subpaths are left to staging.
        assert!(resolve_execution("team-a", &spec, &catalog).is_ok());
        let indexed =
            WithFilesetPaths::new(&catalog, [("team-a".to_owned(), digest, Arc::new(paths))]);
        let problems = resolve_execution("team-a", &spec, &indexed)
            .unwrap_err()
            .problems;
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.workdir.base", "spec.workdir.artifactMounts[1].ref"]
        );
        assert!(
            problems[1]
                .message
                .contains("Fileset \"data\" has no path \"no-such-dir/\""),
            "{}",
            problems[1].message
        );
    }
}
