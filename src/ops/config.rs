//! Where the commands act, once the command line has worked it out: this machine or a cluster, the namespace and the store; and the backend that config builds.

use std::path::PathBuf;

use super::Error;
use super::backend::Backend;
use super::cluster::Cluster;
use super::local::Local;

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
        crate::resolve::object_name(namespace)
            .map_err(|e| Error::argument(format!("--namespace: {e}")))?;
    }
    if config.local {
        Ok(Box::new(Local::new(config)?))
    } else {
        Ok(Box::new(Cluster::connect(config).await?))
    }
}
