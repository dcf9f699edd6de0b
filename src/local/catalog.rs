//! The local catalog: applied Agents, AgentEnvironments, Filesets and Secrets, one JSON file each.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::manifest::ManifestObject;
use super::paths::DataDir;
use crate::api::{
    Agent, AgentEnvironment, AgentEnvironmentSpec, AgentSpec, Fileset, FilesetStatus,
};
use crate::resolve::{Catalog, object_name};

/// The kinds of object the local catalog keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// `Agent`
    Agent,
    /// `AgentEnvironment`
    Environment,
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
            ObjectKind::Fileset => "filesets",
            ObjectKind::Secret => "secrets",
        }
    }

    /// The kind as manifests spell it.
    pub fn kind(self) -> &'static str {
        match self {
            ObjectKind::Agent => "Agent",
            ObjectKind::Environment => "AgentEnvironment",
            ObjectKind::Fileset => "Fileset",
            ObjectKind::Secret => "Secret",
        }
    }
}

/// Applied objects on local disk. Secret values are kept in files only the owner can read,
/// and are read back only to start an agent.
#[derive(Clone, Debug)]
pub struct LocalCatalog {
    data: DataDir,
}

impl LocalCatalog {
    /// The catalog in `data`.
    pub fn new(data: DataDir) -> Self {
        Self { data }
    }

    fn path(&self, namespace: &str, kind: ObjectKind, name: &str) -> PathBuf {
        self.data
            .catalog(namespace, kind.plural())
            .join(format!("{name}.json"))
    }

    fn read<T: DeserializeOwned>(
        &self,
        namespace: &str,
        kind: ObjectKind,
        name: &str,
    ) -> Option<T> {
        let bytes = std::fs::read(self.path(namespace, kind, name)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn write<T: Serialize>(
        &self,
        namespace: &str,
        kind: ObjectKind,
        name: &str,
        value: &T,
    ) -> Result<(), String> {
        let path = self.path(namespace, kind, name);
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| e.to_string())?;
        let private = kind == ObjectKind::Secret;
        write_atomic(&path, &bytes, private)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Stores one applied object (not an AgentExecution) in `default_namespace` unless it names
    /// its own. Returns its kind, namespace and name.
    pub fn apply(
        &self,
        manifest: &ManifestObject,
        default_namespace: &str,
    ) -> Result<(ObjectKind, String, String), String> {
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
            ManifestObject::Fileset(o) => (
                ObjectKind::Fileset,
                o.metadata.name.clone(),
                o.metadata.namespace.clone(),
            ),
            ManifestObject::Secret {
                name, namespace, ..
            } => (ObjectKind::Secret, Some(name.clone()), namespace.clone()),
            ManifestObject::Execution(_) => {
                return Err(
                    "an AgentExecution is run with `errand execute --spec-file`, not applied"
                        .into(),
                );
            }
        };
        let name =
            metadata_name.ok_or_else(|| format!("{}: metadata.name is required", kind.kind()))?;
        object_name(&name).map_err(|e| format!("{} metadata.name: {e}", kind.kind()))?;
        let namespace = namespace.unwrap_or_else(|| default_namespace.to_owned());
        object_name(&namespace).map_err(|e| format!("{} metadata.namespace: {e}", kind.kind()))?;
        match manifest {
            ManifestObject::Agent(agent) => {
                if self
                    .agent(&namespace, &name)
                    .is_some_and(|spec| spec != agent.spec)
                {
                    return Err(format!(
                        "Agent {name:?}: spec is immutable; delete it (`errand agents delete {name}`) and apply again"
                    ));
                }
                self.write(&namespace, kind, &name, &agent.spec)?;
            }
            ManifestObject::Environment(environment) => {
                self.write(&namespace, kind, &name, &environment.spec)?
            }
            ManifestObject::Fileset(_) => {
                // A Fileset's content comes from `filesets push`; applying it keeps what was pushed.
                let status = self.fileset(&namespace, &name).unwrap_or_default();
                self.write(&namespace, kind, &name, &status)?;
            }
            ManifestObject::Secret { data, .. } => self.write(&namespace, kind, &name, data)?,
            ManifestObject::Execution(_) => unreachable!("rejected above"),
        }
        Ok((kind, namespace, name))
    }

    /// Records a pushed Fileset's content.
    pub fn set_fileset(
        &self,
        namespace: &str,
        name: &str,
        status: &FilesetStatus,
    ) -> Result<(), String> {
        object_name(name).map_err(|e| format!("fileset name: {e}"))?;
        self.write(namespace, ObjectKind::Fileset, name, status)
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
        let Ok(entries) = std::fs::read_dir(self.data.catalog(namespace, kind.plural())) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_suffix(".json")
                    .map(str::to_owned)
            })
            .collect();
        names.sort();
        names
    }

    /// Removes an object; false when there was none.
    pub fn delete(&self, namespace: &str, kind: ObjectKind, name: &str) -> bool {
        std::fs::remove_file(self.path(namespace, kind, name)).is_ok()
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

    fn secret_keys(&self, namespace: &str, name: &str) -> Option<BTreeSet<String>> {
        self.secret_values(namespace, name)
            .map(|data| data.into_keys().collect())
    }

    fn fileset(&self, namespace: &str, name: &str) -> Option<FilesetStatus> {
        self.read(namespace, ObjectKind::Fileset, name)
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, so readers never see half a
/// file; `private` files are readable by the owner only. There is no fsync: records are
/// rewritten several times per run and a lost update after a power cut costs nothing that the
/// stored results do not also hold.
pub(super) fn write_atomic(path: &Path, bytes: &[u8], private: bool) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("path has no parent"))?;
    std::fs::create_dir_all(dir)?;
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(&tmp)?;
    file.write_all(bytes)?;
    std::fs::rename(&tmp, path)
}
