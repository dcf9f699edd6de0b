//! The local backend: runs executions on this machine with the same resolve and runner code as the cluster.
//!
//! A data directory holds a catalog of applied objects, one record per execution and the
//! working files of each run; results go to the store like anywhere else. [`gc`] collects
//! finished executions by age, count and size; [`references`] tells the store sweep what is
//! still in use. [`DeploymentRecords`] keeps AgentDeployments, which the command line's
//! deployment supervisor serves.

mod catalog;
mod deployments;
mod environment;
pub mod files;
pub mod gc;
pub mod lifecycle;
mod manifest;
pub mod notify;
mod output_watch;
mod paths;
mod process;
mod record;
pub mod references;
mod remove;
mod schedules;
mod supervise;

pub use catalog::{CatalogError, CheckedObject, LocalCatalog, ObjectKind};
pub use deployments::{
    DeploymentRecord, DeploymentRecords, DeploymentState, ServerState, admit_deployment,
};
pub use manifest::{
    DocumentError, MAX_MANIFEST_BYTES, MAX_MANIFEST_DEPTH, MAX_MANIFEST_DOCUMENTS,
    MAX_MANIFEST_VALUES, ManifestError, ManifestObject, ReadManifestError, YamlError,
    manifest_documents, parse_document, parse_manifests, read_manifest_file, yaml_document,
    yaml_documents,
};
pub use paths::DataDir;
pub use process::ProcessIdentity;
pub use record::{ExecutionRecord, RECORD_SCHEMA_VERSION, RecordError, Records, generate_name};
pub use remove::{RemoveError, remove_execution, results_of};
pub use schedules::{ScheduleRecords, ScheduleState, admit_schedule};
pub use supervise::{SuperviseError, agent_env, prepare, run_prepared, spawn_detached};
