//! Where the commands act, once the command line has worked it out: this machine or a cluster, the namespace and the store; the backend that config builds, and the store sweep over either backend's store.

use std::path::PathBuf;

use jiff::{SignedDuration, Timestamp};

use super::backend::Backend;
use super::cluster::Cluster;
use super::local::Local;
use super::{Error, ErrorCode};
use crate::local::references::{ReferencesError, references};
use crate::retention::sweep_store::SweepReport;

/// What a backend is built from. The command line (`cli/target.rs`) works it out from its flags
/// and the environment; no backend sees the flags themselves.
#[derive(Clone, Debug, Default)]
pub struct BackendConfig {
    /// Act on this machine (the local backend) rather than through a cluster's API server.
    pub local: bool,
    /// The namespace to work in; by default the kube context's (cluster) or `default` (local).
    pub namespace: Option<String>,
    /// The kubeconfig file to use (cluster).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (cluster).
    pub context: Option<String>,
    /// The object store URL (local: by default `store/` in the data directory; cluster: an
    /// operator's store to read results from directly).
    pub store: Option<String>,
}

/// The backend `config` chooses. A cluster that cannot be reached is an error, never a reason
/// to act locally instead.
pub async fn connect(config: &BackendConfig) -> Result<Box<dyn Backend>, Error> {
    if let Some(namespace) = &config.namespace {
        crate::resolve::namespace_name(namespace)
            .map_err(|e| Error::argument(format!("--namespace: {e}")))?;
    }
    if config.local {
        Ok(Box::new(Local::new(config)?))
    } else {
        Ok(Box::new(Cluster::connect(config).await?))
    }
}

/// `admin sweep-store`: removes from the store of `config`'s backend what nothing references
/// any more and is older than `grace` (with `dry_run`, reports it and removes nothing). Only a
/// namespace named explicitly narrows the sweep (never a kube context's default).
pub async fn sweep_store(
    config: &BackendConfig,
    grace: SignedDuration,
    dry_run: bool,
) -> Result<SweepReport, Error> {
    // The references are read whole before the store is listed.
    let (store, references) = if config.local {
        let local = Local::new(config)?;
        let references = references(&local.data).map_err(|e| match e {
            ReferencesError::Record(e) => Error::from(e),
            unreadable @ ReferencesError::Unreadable { .. } => {
                Error::new(ErrorCode::IoError, unreadable.to_string())
            }
        })?;
        (local.store()?, references)
    } else {
        super::cluster::store_references(config).await?
    };
    crate::retention::sweep_store::sweep_store(
        &store,
        config.namespace.as_ref().map(std::slice::from_ref),
        &references,
        grace,
        dry_run,
        Timestamp::now(),
    )
    .await
    .map_err(Error::from)
}
