//! `errand controller`: runs the cluster controller in this process with JSON logs.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::controller::config::ControllerConfig;
use crate::controller::leader::LeaseSettings;
use crate::controller::{ControllerOptions, run};
use crate::store::Store;
use crate::store::grants::HmacSigner;

use super::CliError;

/// Options of `errand controller`.
#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// The errand image whose binary the `errand-stage` init container installs in each pod.
    #[arg(long, env = "ERRAND_IMAGE")]
    pub errand_image: String,
    /// Path of the errand binary inside the errand image.
    #[arg(long, env = "ERRAND_BINARY", default_value = "/usr/local/bin/errand")]
    pub errand_binary: String,
    /// Pull policy of the errand image.
    #[arg(long, env = "ERRAND_IMAGE_PULL_POLICY")]
    pub errand_image_pull_policy: Option<String>,
    /// Store URL (`file://`, `s3://`, `gs://`, `az://`) where results are kept.
    #[arg(long, env = "ERRAND_STORE")]
    pub store: String,
    /// Base URL of this controller's blob endpoint as pods reach it (for example its Service).
    #[arg(long, env = "ERRAND_BLOB_URL")]
    pub blob_url: String,
    /// Reconcile only this namespace (all namespaces when unset).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "ERRAND_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Hold a Lease before reconciling, so only one replica acts.
    #[arg(long, env = "ERRAND_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (the controller's own).
    #[arg(long, env = "POD_NAMESPACE", default_value = "errand-system")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease and in events.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Seconds added to each Job's deadline for staging and uploading results.
    #[arg(long, default_value_t = 900)]
    pub staging_budget_seconds: i64,
    /// Seconds a cancelled pod gets to save its partial results.
    #[arg(long, default_value_t = 120)]
    pub termination_grace_seconds: i64,
}

/// Runs the controller until SIGTERM or Ctrl-C.
pub async fn controller(args: ControllerArgs) -> Result<(), CliError> {
    init_json_logs();
    let signing_key = std::env::var("ERRAND_SIGNING_KEY")
        .ok()
        .filter(|k| k.len() >= 32)
        .ok_or_else(|| {
            CliError::new(
                "invalid_config",
                "ERRAND_SIGNING_KEY must hold at least 32 characters (mount it from a Secret)",
            )
        })?;
    let results = Store::open(&args.store)
        .map_err(|e| CliError::new("invalid_config", format!("opening the store: {e}")))?;
    let client = kube::Client::try_default()
        .await
        .map_err(|e| CliError::new("cluster_unreachable", format!("connecting: {e}")))?;
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "errand-controller".to_owned());
    let mut config = ControllerConfig::new(args.errand_image);
    config.errand_binary = args.errand_binary;
    config.errand_image_pull_policy = args.errand_image_pull_policy;
    config.staging_budget_seconds = args.staging_budget_seconds;
    config.termination_grace_seconds = args.termination_grace_seconds;
    let signer = Arc::new(HmacSigner::new(&args.blob_url, signing_key.as_bytes()));
    let options = ControllerOptions {
        config,
        namespace: args.watch_namespace,
        results,
        signer: signer.clone(),
        serve_blobs: Some(signer),
        listen: Some(args.listen),
        leader_election: args.leader_elect.then(|| {
            (
                args.lease_namespace,
                LeaseSettings::new("errand-controller", identity.clone()),
            )
        }),
        instance: identity,
    };
    run(client, options, shutdown_signal())
        .await
        .map_err(|e| CliError::new("controller_stopped", e.to_string()))
}

fn init_json_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second initialization (tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .try_init();
}

async fn shutdown_signal() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = async {
            match terminate.as_mut() {
                Some(signal) => { signal.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}
