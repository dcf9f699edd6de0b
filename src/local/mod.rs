//! The local backend: runs executions on this machine with the same resolve and runner code as the cluster.
//!
//! A data directory holds a catalog of applied objects, one record per execution and the
//! working files of each run; results go to the store like anywhere else.

mod catalog;
mod environment;
mod files;
mod manifest;
mod paths;
mod process;
mod record;
mod supervise;

pub use catalog::{CheckedObject, LocalCatalog, ObjectKind};
pub use manifest::{
    DocumentError, MAX_MANIFEST_BYTES, ManifestObject, ReadManifestError, parse_document,
    parse_manifests, read_manifest_file,
};
pub use paths::DataDir;
pub use process::ProcessIdentity;
pub use record::{ExecutionRecord, RECORD_SCHEMA_VERSION, RecordError, Records, generate_name};
pub use supervise::{SuperviseError, prepare, run_prepared, spawn_detached};
