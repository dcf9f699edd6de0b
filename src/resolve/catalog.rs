//! What resolution may look up about other objects, and an in-memory catalog for tests and the local backend.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::{AgentEnvironmentSpec, AgentSpec, FilesetStatus};

/// Read-only lookups of the objects an execution refers to. Implementations answer from
/// caches or memory: resolution itself does no I/O. Secrets are looked up by key *names* only;
/// their values never reach resolution.
pub trait Catalog {
    /// The spec of Agent `name` in `namespace`.
    fn agent(&self, namespace: &str, name: &str) -> Option<AgentSpec>;
    /// The spec of AgentEnvironment `name` in `namespace`.
    fn environment(&self, namespace: &str, name: &str) -> Option<AgentEnvironmentSpec>;
    /// The key names of Secret `name` in `namespace`.
    fn secret_keys(&self, namespace: &str, name: &str) -> Option<BTreeSet<String>>;
    /// The status of Fileset `name` in `namespace` (its digest once pushed).
    fn fileset(&self, namespace: &str, name: &str) -> Option<FilesetStatus>;
    /// Whether PriorityClass `name` exists; `None` when this catalog cannot tell (the local
    /// backend, which schedules nothing, knows no PriorityClasses).
    fn priority_class_exists(&self, name: &str) -> Option<bool>;
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
    secrets: BTreeMap<Key, BTreeMap<String, String>>,
    filesets: BTreeMap<Key, FilesetStatus>,
    /// The cluster's PriorityClasses, once one was added (until then, unknown).
    priority_classes: Option<BTreeSet<String>>,
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

    /// Adds a PriorityClass; from then on the catalog knows which exist.
    pub fn with_priority_class(mut self, name: &str) -> Self {
        self.priority_classes
            .get_or_insert_with(BTreeSet::new)
            .insert(name.to_owned());
        self
    }

    /// Knows the cluster's PriorityClasses, and none exists (yet).
    pub fn without_priority_classes(mut self) -> Self {
        self.priority_classes.get_or_insert_with(BTreeSet::new);
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

    fn secret_keys(&self, namespace: &str, name: &str) -> Option<BTreeSet<String>> {
        self.secrets
            .get(&key(namespace, name))
            .map(|data| data.keys().cloned().collect())
    }

    fn fileset(&self, namespace: &str, name: &str) -> Option<FilesetStatus> {
        self.filesets.get(&key(namespace, name)).cloned()
    }

    fn priority_class_exists(&self, name: &str) -> Option<bool> {
        self.priority_classes
            .as_ref()
            .map(|classes| classes.contains(name))
    }
}
