//! Where commands act, chosen as kubectl chooses: `--kubeconfig`, `--context`, `-n/--namespace`, or `--local` for this machine.

use std::path::PathBuf;

use crate::ops::{Backend, BackendConfig, Error};

/// Options shared by the commands that touch executions or the catalog.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Target {
    /// Namespace (workspace) to work in. Against a cluster it defaults to the kube context's
    /// namespace, locally to `default`.
    #[arg(short = 'n', long, env = "ERRAND_NAMESPACE", global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig file to use (else `$KUBECONFIG`, else `~/.kube/config`, else the
    /// in-cluster config). Giving it targets a cluster.
    #[arg(long, value_name = "FILE", global = true, conflicts_with = "local")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use. Giving it targets a cluster.
    #[arg(long, global = true, conflicts_with = "local")]
    pub context: Option<String>,
    /// Object store URL for filesets and results (`file://`, `s3://`, `gs://`, `az://`).
    /// Locally it defaults to `store/` in the data directory (`$ERRAND_HOME`, else
    /// `$XDG_DATA_HOME/errand`, else `~/.local/share/errand`). Against a cluster errand reads
    /// results and pushes Filesets through the Kubernetes API (`data.errand.dev`) and needs no
    /// store; an operator may name the cluster's store here to read results from it directly.
    #[arg(long, env = "ERRAND_STORE", global = true)]
    pub store: Option<String>,
    /// Use the local backend (runs on this machine, no cluster). Without it, errand uses the
    /// cluster of the current kube context when one is configured, else the local backend;
    /// `ERRAND_BACKEND=local|cluster` decides explicitly.
    #[arg(long, global = true)]
    pub local: bool,
}

impl Target {
    /// Whether commands run against the local backend rather than a cluster.
    pub fn is_local(&self) -> bool {
        if self.local {
            return true;
        }
        if self.kubeconfig.is_some() || self.context.is_some() {
            return false;
        }
        match std::env::var("ERRAND_BACKEND").as_deref() {
            Ok("local") => return true,
            Ok("cluster") => return false,
            _ => {}
        }
        let kubeconfig = std::env::var_os("KUBECONFIG").is_some()
            || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
            || std::env::var_os("HOME")
                .is_some_and(|home| std::path::Path::new(&home).join(".kube/config").exists());
        !kubeconfig
    }

    /// What the backend is built from: these options with the environment's choice of
    /// backend worked out.
    pub fn config(&self) -> BackendConfig {
        BackendConfig {
            local: self.is_local(),
            namespace: self.namespace.clone(),
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            store: self.store.clone(),
        }
    }

    /// The backend the options choose. A cluster that cannot be reached is an error, never a
    /// reason to act locally instead.
    pub async fn backend(&self) -> Result<Box<dyn Backend>, Error> {
        crate::ops::connect(&self.config()).await
    }
}
