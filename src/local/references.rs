//! What the local backend still references in its store, for the store sweep: the uids of its executions and deployments, and the Fileset blobs its catalog and its executions' snapshots pin.

use super::catalog::{LocalCatalog, ObjectKind};
use super::deployments::DeploymentRecords;
use super::paths::DataDir;
use super::record::{RecordError, Records};
use crate::resolve::{Catalog, Snapshot};
use crate::retention::sweep::References;

/// Why the references could not be read whole (a sweep must not run on part of them).
#[derive(Debug, thiserror::Error)]
pub enum ReferencesError {
    /// An execution's record could not be read.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A file that pins content could not be read.
    #[error("{path}: {message}; nothing was swept")]
    Unreadable {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// Every execution and deployment in `data` and every blob its catalog and snapshots pin.
pub fn references(data: &DataDir) -> Result<References, ReferencesError> {
    let mut references = References::default();
    let catalog = LocalCatalog::new(data.clone());
    for namespace in catalog.namespaces() {
        for name in catalog.list(&namespace, ObjectKind::Fileset) {
            let status =
                catalog
                    .fileset(&namespace, &name)
                    .ok_or_else(|| ReferencesError::Unreadable {
                        path: data
                            .catalog(&namespace, ObjectKind::Fileset.plural())
                            .join(format!("{name}.json")),
                        message: "not a Fileset".to_owned(),
                    })?;
            if let Some(digest) = status.digest {
                references.pin(&namespace, &digest);
            }
        }
    }
    let deployments = DeploymentRecords::new(data.clone());
    for namespace in deployments.namespaces() {
        for name in deployments.names(&namespace) {
            let uid = deployments
                .read(&namespace, &name)
                .map_err(|e| ReferencesError::Unreadable {
                    path: deployments.dir(&namespace, &name),
                    message: e.to_string(),
                })?
                .object
                .metadata
                .uid;
            references.deployments.extend(uid);
        }
    }
    let records = Records::new(data.clone());
    for namespace in records.namespaces() {
        for name in records.names(&namespace) {
            let record = records.read(&namespace, &name)?;
            references.executions.insert(record.uid);
            let path = records.snapshot_file(&namespace, &name);
            let bytes = match std::fs::read(&path) {
                Ok(bytes) => bytes,
                // Written right after the record: an execution being prepared pins only what
                // its Fileset (read above) already pins.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(ReferencesError::Unreadable {
                        path,
                        message: e.to_string(),
                    });
                }
            };
            let snapshot: Snapshot =
                serde_json::from_slice(&bytes).map_err(|e| ReferencesError::Unreadable {
                    path,
                    message: e.to_string(),
                })?;
            references.pin_snapshot(&snapshot);
        }
    }
    Ok(references)
}
