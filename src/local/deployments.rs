//! The local backend's AgentDeployments on disk: the object as the commands wrote it, the state its supervisor writes, and the snapshots it serves.
//!
//! One directory per deployment, `deployments/<namespace>/<name>/`, with two writers kept apart:
//! `deployment.json` (metadata, spec and the snapshot the spec resolved to) is written by the
//! commands, `state.json` (status, supervisor, agent servers) only by the deployment's
//! supervisor. Every write replaces its file whole.

use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::catalog::LocalCatalog;
use super::files::{ObjectFilesError, names_holding, read_record, remove_record, write_record};
use super::paths::DataDir;
use super::process::ProcessIdentity;
use crate::api::{AgentDeployment, AgentDeploymentStatus};
use crate::resolve::{InvalidSpec, Problem, Snapshot, check_deployment, resolve_deployment};

/// A deployment as the commands wrote it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeploymentRecord {
    /// The AgentDeployment (metadata and spec; its status is in the state).
    pub object: AgentDeployment,
    /// The digest of the snapshot its spec resolved to (`snapshots/<hex>.json`).
    pub snapshot_digest: String,
    /// Set by `undeploy`: the supervisor stops the servers and leaves.
    #[serde(default)]
    pub deleting: bool,
}

/// One agent server a supervisor runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerState {
    /// The process (its own process group).
    pub process: ProcessIdentity,
    /// The loopback port it was assigned (`ERRAND_PORT`).
    pub port: u16,
    /// The snapshot it serves.
    pub snapshot_digest: String,
    /// Whether its readiness probe passes.
    pub ready: bool,
}

/// What a deployment's supervisor writes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DeploymentState {
    /// The status, decided as the controller decides it.
    pub status: AgentDeploymentStatus,
    /// The supervisor.
    pub supervisor: Option<ProcessIdentity>,
    /// Its agent servers.
    pub servers: Vec<ServerState>,
}

/// The deployments in a data directory.
#[derive(Clone, Debug)]
pub struct DeploymentRecords {
    data: DataDir,
}

impl DeploymentRecords {
    /// The deployments of `data`.
    pub fn new(data: DataDir) -> Self {
        Self { data }
    }

    /// The data directory.
    pub fn data(&self) -> &DataDir {
        &self.data
    }

    fn namespace_dir(&self, namespace: &str) -> PathBuf {
        self.data.root().join("deployments").join(namespace)
    }

    /// The directory of one deployment: its files, its servers' workspace and logs.
    pub fn dir(&self, namespace: &str, name: &str) -> PathBuf {
        self.namespace_dir(namespace).join(name)
    }

    /// The log both output streams of its agent servers go to.
    pub fn server_log(&self, namespace: &str, name: &str) -> PathBuf {
        self.dir(namespace, name).join("server.log")
    }

    /// The agent config a snapshot's servers read (`AGENT_CONFIG_PATH`).
    pub fn agent_config(&self, namespace: &str, name: &str, digest: &str) -> PathBuf {
        self.dir(namespace, name)
            .join("snapshots")
            .join(format!("{}.config.json", hex_of(digest)))
    }

    fn snapshot_file(&self, namespace: &str, name: &str, digest: &str) -> PathBuf {
        self.dir(namespace, name)
            .join("snapshots")
            .join(format!("{}.json", hex_of(digest)))
    }

    /// Keeps a snapshot (and its agent config) for deployment `name`.
    pub fn write_snapshot(
        &self,
        namespace: &str,
        name: &str,
        snapshot: &Snapshot,
    ) -> Result<(), ObjectFilesError> {
        let digest = snapshot.digest();
        write_record(
            &self.snapshot_file(namespace, name, &digest),
            &snapshot.canonical_json(),
        )?;
        let config = serde_json::to_vec_pretty(&snapshot.config).expect("a config serializes");
        write_record(&self.agent_config(namespace, name, &digest), &config)
    }

    /// The snapshot `digest` of deployment `name`.
    pub fn snapshot(
        &self,
        namespace: &str,
        name: &str,
        digest: &str,
    ) -> Result<Snapshot, ObjectFilesError> {
        read_record(&self.snapshot_file(namespace, name, digest))
    }

    /// Records a new deployment (generation 1, a new uid, created now); refused when one of
    /// that name exists.
    pub fn create(&self, record: &mut DeploymentRecord) -> Result<(), ObjectFilesError> {
        let (namespace, name) = names(&record.object);
        let metadata = &mut record.object.metadata;
        metadata.generation = Some(1);
        metadata.uid = Some(super::record::generate_uid(&name));
        metadata.creation_timestamp = Some(Time(jiff::Timestamp::now()));
        let dir = self.dir(&namespace, &name);
        if dir.join("deployment.json").exists() {
            return Err(ObjectFilesError::AlreadyExists {
                kind: "AgentDeployment",
                name,
                namespace,
            });
        }
        self.write(record)
    }

    /// Replaces a deployment's record.
    pub fn write(&self, record: &DeploymentRecord) -> Result<(), ObjectFilesError> {
        let (namespace, name) = names(&record.object);
        let bytes = serde_json::to_vec_pretty(record).expect("a record serializes");
        write_record(&self.dir(&namespace, &name).join("deployment.json"), &bytes)
    }

    /// The record of deployment `name`.
    pub fn read(&self, namespace: &str, name: &str) -> Result<DeploymentRecord, ObjectFilesError> {
        let path = self.dir(namespace, name).join("deployment.json");
        if !path.exists() {
            return Err(ObjectFilesError::NotFound {
                kind: "AgentDeployment",
                name: name.to_owned(),
                namespace: namespace.to_owned(),
            });
        }
        read_record(&path)
    }

    /// What the supervisor of deployment `name` last wrote (nothing before it started).
    pub fn state(&self, namespace: &str, name: &str) -> DeploymentState {
        read_record(&self.dir(namespace, name).join("state.json")).unwrap_or_default()
    }

    /// Replaces what the supervisor of deployment `name` wrote.
    pub fn write_state(
        &self,
        namespace: &str,
        name: &str,
        state: &DeploymentState,
    ) -> Result<(), ObjectFilesError> {
        let bytes = serde_json::to_vec_pretty(state).expect("a state serializes");
        write_record(&self.dir(namespace, name).join("state.json"), &bytes)
    }

    /// The deployment `name` with the status its supervisor wrote.
    pub fn deployment(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<AgentDeployment, ObjectFilesError> {
        let mut object = self.read(namespace, name)?.object;
        object.status = Some(self.state(namespace, name).status);
        Ok(object)
    }

    /// The namespaces that have a deployment directory, sorted.
    pub fn namespaces(&self) -> Vec<String> {
        let mut namespaces: Vec<String> = std::fs::read_dir(self.data.root().join("deployments"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        namespaces.sort();
        namespaces
    }

    /// The names of the deployments of `namespace`, sorted.
    pub fn names(&self, namespace: &str) -> Vec<String> {
        names_holding(&self.namespace_dir(namespace), "deployment.json")
    }

    /// Removes deployment `name`'s files.
    pub fn remove(&self, namespace: &str, name: &str) -> Result<(), ObjectFilesError> {
        let dir = self.dir(namespace, name);
        remove_record(&dir)
    }
}

/// Admits `deployment` as the API server and the webhook would: its schema and CEL rules,
/// then its agent and environment resolved against the local catalog with the execution
/// rules. Every problem names its field.
pub fn admit_deployment(
    data: &DataDir,
    deployment: &AgentDeployment,
) -> Result<Snapshot, InvalidSpec> {
    let object = serde_json::to_value(deployment).expect("a deployment serializes");
    let problems = check_deployment(&object);
    if !problems.is_empty() {
        return Err(InvalidSpec { problems });
    }
    let namespace = deployment.metadata.namespace.clone().unwrap_or_default();
    if namespace.is_empty() {
        return Err(InvalidSpec {
            problems: vec![Problem::new("metadata.namespace", "Required value")],
        });
    }
    resolve_deployment(
        &namespace,
        &deployment.spec,
        &LocalCatalog::new(data.clone()),
    )
}

fn names(object: &AgentDeployment) -> (String, String) {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// `sha256:<hex>` → `<hex>`.
fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}
