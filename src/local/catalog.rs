//! The local catalog: applied Agents, AgentEnvironments, AgentRuntimes, AgentExtensions, Filesets and Secrets, one owner-only JSON file each.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::files::write_private;
use super::manifest::ManifestObject;
use super::paths::DataDir;
use super::record::Records;
use crate::api::{
    Agent, AgentEnvironment, AgentEnvironmentSpec, AgentExtension, AgentExtensionSpec,
    AgentRuntime, AgentRuntimeSpec, AgentSpec, Fileset, FilesetStatus,
};
use crate::resolve::{
    Catalog, ClassKind, ImageRun, InvalidValue, RerunSource, namespace_name, object_name,
};

/// The kinds of object the local catalog keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// `Agent`
    Agent,
    /// `AgentEnvironment`
    Environment,
    /// `AgentRuntime` (cluster-scoped)
    Runtime,
    /// `AgentExtension` (cluster-scoped)
    Extension,
    /// `Fileset`
    Fileset,
    /// `v1/Secret`
    Secret,
}

impl ObjectKind {
    /// The directory (and plural resource name) of the kind.
    pub fn plural(self) -> &'static str {
        match self {
            ObjectKind::Agent => "agents",
            ObjectKind::Environment => "agentenvironments",
            ObjectKind::Runtime => "agentruntimes",
            ObjectKind::Extension => "agentextensions",
            ObjectKind::Fileset => "filesets",
            ObjectKind::Secret => "secrets",
        }
    }

    /// The kind as manifests spell it.
    pub fn kind(self) -> &'static str {
        match self {
            ObjectKind::Agent => "Agent",
            ObjectKind::Environment => "AgentEnvironment",
            ObjectKind::Runtime => "AgentRuntime",
            ObjectKind::Extension => "AgentExtension",
            ObjectKind::Fileset => "Fileset",
            ObjectKind::Secret => "Secret",
        }
    }
}

impl ObjectKind {
    /// Whether objects of this kind belong to no namespace (AgentRuntimes, AgentExtensions).
    pub fn is_cluster_scoped(self) -> bool {
        matches!(self, ObjectKind::Runtime | ObjectKind::Extension)
    }
}

/// The directory of cluster-scoped objects, beside the namespaces' (no namespace can be named
/// so: a namespace name has no `_`).
const CLUSTER_SCOPE: &str = "_cluster";

/// The namespace an object of `kind` is kept under: its own, or none for a cluster-scoped kind.
fn scope(namespace: &str, kind: ObjectKind) -> &str {
    match kind {
        kind if kind.is_cluster_scoped() => CLUSTER_SCOPE,
        _ => namespace,
    }
}

/// Applied objects on local disk, one directory per object (`<plural>/<name>/object.json`, so
/// that every valid Kubernetes name fits the file system), readable by the owner only. Secret
/// values are read back only to start an agent.
#[derive(Clone, Debug)]
pub struct LocalCatalog {
    data: DataDir,
}

/// One object `apply` checked and will store.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedObject {
    /// Its kind.
    pub kind: ObjectKind,
    /// The namespace it goes to.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// What is stored: the spec (Agent, AgentEnvironment), the status kept from earlier pushes
    /// (Fileset), or the values (Secret).
    content: Value,
}

/// The file an object is stored in.
const OBJECT_FILE: &str = "object.json";

/// Why the local catalog refused or failed to keep an object.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// AgentExecutions are run, not applied.
    #[error("an AgentExecution is run with `errand execute --spec-file`, not applied")]
    ExecutionApplied,
    /// The object has no `metadata.name`.
    #[error("{kind}: metadata.name is required")]
    NoName { kind: &'static str },
    /// A name or namespace that is not a valid object name.
    #[error("{what} {field}: {reason}")]
    BadName {
        what: &'static str,
        field: &'static str,
        reason: InvalidValue,
    },
    /// An Agent applied again with another spec.
    #[error(
        "Agent {name:?}: spec is immutable; delete it (`errand agents delete {name}`) and apply again"
    )]
    ImmutableAgent { name: String },
    /// The object could not be encoded.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    /// The object could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl LocalCatalog {
    /// The catalog in `data`.
    pub fn new(data: DataDir) -> Self {
        Self { data }
    }

    fn dir(&self, namespace: &str, kind: ObjectKind, name: &str) -> PathBuf {
        self.data
            .catalog(scope(namespace, kind), kind.plural())
            .join(name)
    }

    /// Where catalogs before one directory per object kept it: `<plural>/<name>.json`.
    fn legacy_file(&self, namespace: &str, kind: ObjectKind, name: &str) -> PathBuf {
        self.data
            .catalog(scope(namespace, kind), kind.plural())
            .join(format!("{name}.json"))
    }

    fn read<T: DeserializeOwned>(
        &self,
        namespace: &str,
        kind: ObjectKind,
        name: &str,
    ) -> Option<T> {
        let bytes = std::fs::read(self.dir(namespace, kind, name).join(OBJECT_FILE))
            .or_else(|_| std::fs::read(self.legacy_file(namespace, kind, name)))
            .ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn write(
        &self,
        namespace: &str,
        kind: ObjectKind,
        name: &str,
        value: &Value,
    ) -> Result<(), CatalogError> {
        let path = self.dir(namespace, kind, name).join(OBJECT_FILE);
        let bytes = serde_json::to_vec_pretty(value)?;
        write_private(&path, &bytes).map_err(|source| CatalogError::Write { path, source })?;
        let _ = std::fs::remove_file(self.legacy_file(namespace, kind, name));
        Ok(())
    }

    /// Checks one object (not an AgentExecution) for `apply` in `default_namespace` unless it
    /// names its own: its name, and that an Agent keeps the spec it was applied with (also
    /// against the objects checked before it, in `earlier`). Nothing is written.
    pub fn check_apply(
        &self,
        manifest: &ManifestObject,
        default_namespace: &str,
        earlier: &[CheckedObject],
    ) -> Result<CheckedObject, CatalogError> {
        let (kind, metadata_name, namespace) = match manifest {
            ManifestObject::Agent(o) => (
                ObjectKind::Agent,
                o.metadata.name.clone(),
                o.metadata.namespace.clone(),
            ),
            ManifestObject::Environment(o) => (
                ObjectKind::Environment,
                o.metadata.name.clone(),
                o.metadata.namespace.clone(),
            ),
            // Cluster-scoped: a namespace in the manifest is ignored, as the API server does.
            ManifestObject::Runtime(o) => (ObjectKind::Runtime, o.metadata.name.clone(), None),
            ManifestObject::Extension(o) => (ObjectKind::Extension, o.metadata.name.clone(), None),
            ManifestObject::Fileset(o) => (
                ObjectKind::Fileset,
                o.metadata.name.clone(),
                o.metadata.namespace.clone(),
            ),
            ManifestObject::Secret {
                name, namespace, ..
            } => (ObjectKind::Secret, Some(name.clone()), namespace.clone()),
            ManifestObject::Execution(_) => return Err(CatalogError::ExecutionApplied),
        };
        let bad_name = |field: &'static str| {
            move |reason| CatalogError::BadName {
                what: kind.kind(),
                field,
                reason,
            }
        };
        let name = metadata_name.ok_or(CatalogError::NoName { kind: kind.kind() })?;
        object_name(&name).map_err(bad_name("metadata.name"))?;
        let namespace = namespace.unwrap_or_else(|| default_namespace.to_owned());
        namespace_name(&namespace).map_err(bad_name("metadata.namespace"))?;
        let content = match manifest {
            ManifestObject::Agent(agent) => serde_json::to_value(&agent.spec),
            ManifestObject::Environment(environment) => serde_json::to_value(&environment.spec),
            ManifestObject::Runtime(runtime) => serde_json::to_value(&runtime.spec),
            ManifestObject::Extension(extension) => serde_json::to_value(&extension.spec),
            // A Fileset's content comes from `filesets push`; applying it keeps what was pushed.
            ManifestObject::Fileset(_) => {
                serde_json::to_value(self.fileset(&namespace, &name).unwrap_or_default())
            }
            ManifestObject::Secret { data, .. } => serde_json::to_value(data),
            ManifestObject::Execution(_) => unreachable!("refused above"),
        }?;
        let checked = CheckedObject {
            kind,
            namespace,
            name,
            content,
        };
        if kind == ObjectKind::Agent {
            let stored = self
                .read::<Value>(&checked.namespace, kind, &checked.name)
                .into_iter();
            let pending = earlier
                .iter()
                .filter(|o| {
                    o.kind == kind && o.namespace == checked.namespace && o.name == checked.name
                })
                .map(|o| o.content.clone());
            if stored.chain(pending).any(|spec| spec != checked.content) {
                return Err(CatalogError::ImmutableAgent {
                    name: checked.name.clone(),
                });
            }
        }
        Ok(checked)
    }

    /// Stores objects checked with [`LocalCatalog::check_apply`].
    pub fn store(&self, object: &CheckedObject) -> Result<(), CatalogError> {
        self.write(
            &object.namespace,
            object.kind,
            &object.name,
            &object.content,
        )
    }

    /// Records a pushed Fileset's content.
    pub fn set_fileset(
        &self,
        namespace: &str,
        name: &str,
        status: &FilesetStatus,
    ) -> Result<(), CatalogError> {
        object_name(name).map_err(|reason| CatalogError::BadName {
            what: "fileset",
            field: "name",
            reason,
        })?;
        let status = serde_json::to_value(status)?;
        self.write(namespace, ObjectKind::Fileset, name, &status)
    }

    /// Every namespace that has applied objects, sorted.
    pub fn namespaces(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.data.all_catalogs()) else {
            return Vec::new();
        };
        let mut namespaces: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().to_str().map(str::to_owned))
            .filter(|name| object_name(name).is_ok())
            .collect();
        namespaces.sort();
        namespaces
    }

    /// Names of the objects of `kind` in `namespace`, sorted.
    pub fn list(&self, namespace: &str, kind: ObjectKind) -> Vec<String> {
        let directory = self.data.catalog(scope(namespace, kind), kind.plural());
        let Ok(entries) = std::fs::read_dir(directory) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                let file_name = e.file_name().to_str()?.to_owned();
                if e.path().join(OBJECT_FILE).is_file() {
                    Some(file_name)
                } else if e.path().is_file() {
                    file_name.strip_suffix(".json").map(str::to_owned)
                } else {
                    None
                }
            })
            .filter(|name| object_name(name).is_ok())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Removes an object; false when there was none.
    pub fn delete(&self, namespace: &str, kind: ObjectKind, name: &str) -> bool {
        let current = std::fs::remove_dir_all(self.dir(namespace, kind, name)).is_ok();
        let legacy = std::fs::remove_file(self.legacy_file(namespace, kind, name)).is_ok();
        current || legacy
    }

    /// The values of a Secret, to hand to an agent's environment when it starts.
    pub fn secret_values(&self, namespace: &str, name: &str) -> Option<BTreeMap<String, String>> {
        self.read(namespace, ObjectKind::Secret, name)
    }

    /// A stored Agent as a full object, for listings.
    pub fn agent_object(&self, namespace: &str, name: &str) -> Option<Agent> {
        let spec = self.agent(namespace, name)?;
        let mut agent = Agent::new(name, spec);
        agent.metadata.namespace = Some(namespace.to_owned());
        Some(agent)
    }

    /// A stored AgentEnvironment as a full object, for listings.
    pub fn environment_object(&self, namespace: &str, name: &str) -> Option<AgentEnvironment> {
        let spec = self.environment(namespace, name)?;
        let mut environment = AgentEnvironment::new(name, spec);
        environment.metadata.namespace = Some(namespace.to_owned());
        Some(environment)
    }

    /// The name and spec of every stored object of a cluster-scoped `kind`, sorted by name.
    fn cluster_scoped<T: DeserializeOwned>(&self, kind: ObjectKind) -> Vec<(String, T)> {
        self.list(CLUSTER_SCOPE, kind)
            .into_iter()
            .filter_map(|name| Some((name.clone(), self.read(CLUSTER_SCOPE, kind, &name)?)))
            .collect()
    }

    /// Every stored AgentRuntime as a full object, for listings, sorted by name.
    pub fn runtime_objects(&self) -> Vec<AgentRuntime> {
        self.runtimes()
            .into_iter()
            .map(|(name, spec)| AgentRuntime::new(&name, spec))
            .collect()
    }

    /// Every stored AgentExtension as a full object, for listings, sorted by name.
    pub fn extension_objects(&self) -> Vec<AgentExtension> {
        self.extensions()
            .into_iter()
            .map(|(name, spec)| AgentExtension::new(&name, spec))
            .collect()
    }

    /// A stored Fileset as a full object, for listings.
    pub fn fileset_object(&self, namespace: &str, name: &str) -> Option<Fileset> {
        let status = self.fileset(namespace, name)?;
        let mut fileset = Fileset::new(name, Default::default());
        fileset.metadata.namespace = Some(namespace.to_owned());
        fileset.status = Some(status);
        Some(fileset)
    }
}

impl Catalog for LocalCatalog {
    fn agent(&self, namespace: &str, name: &str) -> Option<AgentSpec> {
        self.read(namespace, ObjectKind::Agent, name)
    }

    fn environment(&self, namespace: &str, name: &str) -> Option<AgentEnvironmentSpec> {
        self.read(namespace, ObjectKind::Environment, name)
    }

    fn runtimes(&self) -> Vec<(String, AgentRuntimeSpec)> {
        self.cluster_scoped(ObjectKind::Runtime)
    }

    fn extensions(&self) -> Vec<(String, AgentExtensionSpec)> {
        self.cluster_scoped(ObjectKind::Extension)
    }

    fn secret_keys(&self, namespace: &str, name: &str) -> Option<BTreeSet<String>> {
        self.secret_values(namespace, name)
            .map(|data| data.into_keys().collect())
    }

    fn fileset(&self, namespace: &str, name: &str) -> Option<FilesetStatus> {
        self.read(namespace, ObjectKind::Fileset, name)
    }

    /// A local run has no scheduler or container runtime choice, so no class is known.
    fn class_exists(&self, _kind: ClassKind, _name: &str) -> Option<bool> {
        None
    }

    /// The record of execution `name` and the snapshot beside it; a local run has no image.
    fn rerun_source(&self, namespace: &str, name: &str) -> Option<RerunSource> {
        let records = Records::new(self.data.clone());
        let record = records.read(namespace, name).ok()?;
        let path = records.snapshot_file(namespace, name);
        Some(RerunSource {
            digest: Some(record.snapshot_digest),
            snapshot: std::fs::read(&path).ok(),
            location: path.display().to_string(),
            image: ImageRun::NoImage,
        })
    }
}
