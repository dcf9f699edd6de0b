//! `errand controller`: runs the cluster controller in this process with JSON logs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::controller::config::ControllerConfig;
use crate::controller::leader::LeaseSettings;
use crate::controller::{ControllerOptions, run};
use crate::store::Store;
use crate::store::grants::HmacSigner;
use crate::webhook::{Certificates, SelfSigned, WebhookOptions};

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
    /// The controller's own namespace: of the leader Lease and the webhook's Secret.
    #[arg(long, env = "POD_NAMESPACE", default_value = "errand-system")]
    pub lease_namespace: String,
    /// Create the leader Lease when it is missing (off when an installer owns the Lease).
    #[arg(long, env = "ERRAND_CREATE_LEASE", default_value_t = true, action = clap::ArgAction::Set)]
    pub create_lease: bool,
    /// This replica's identity in the Lease and in events.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Seconds added to each Job's deadline for staging and uploading results.
    #[arg(long, default_value_t = 900)]
    pub staging_budget_seconds: i64,
    /// Seconds a cancelled pod gets to save its partial results.
    #[arg(long, default_value_t = 120)]
    pub termination_grace_seconds: i64,
    /// Kueue LocalQueue for executions that name none.
    #[arg(long, env = "ERRAND_DEFAULT_QUEUE_NAME")]
    pub default_queue_name: Option<String>,
    /// Serve the validating admission webhook over HTTPS at this address.
    #[arg(long, env = "ERRAND_WEBHOOK_LISTEN")]
    pub webhook_listen: Option<SocketAddr>,
    /// Directory holding `tls.crt` and `tls.key` kept current by cert-manager; without it the
    /// controller generates a self-signed certificate and puts its CA into the webhook
    /// configuration itself.
    #[arg(long, env = "ERRAND_WEBHOOK_CERT_DIR")]
    pub webhook_cert_dir: Option<PathBuf>,
    /// The Service the API server calls the webhook through (its DNS names go into the
    /// self-signed certificate).
    #[arg(long, env = "ERRAND_WEBHOOK_SERVICE")]
    pub webhook_service: Option<String>,
    /// The ValidatingWebhookConfiguration whose CA bundle the controller keeps.
    #[arg(long, env = "ERRAND_WEBHOOK_CONFIGURATION")]
    pub webhook_configuration: Option<String>,
    /// The Secret in the controller's namespace that shares the self-signed certificate
    /// between replicas.
    #[arg(
        long,
        env = "ERRAND_WEBHOOK_SECRET",
        default_value = "errand-webhook-tls"
    )]
    pub webhook_secret: String,
}

impl ControllerArgs {
    /// How the webhook is served, if it is.
    fn webhook(&self) -> Result<Option<WebhookOptions>, CliError> {
        let Some(listen) = self.webhook_listen else {
            return Ok(None);
        };
        let certificates = match (
            &self.webhook_cert_dir,
            &self.webhook_service,
            &self.webhook_configuration,
        ) {
            (Some(dir), _, _) => Certificates::Files(dir.clone()),
            (None, Some(service), Some(configuration)) => Certificates::SelfSigned(SelfSigned {
                namespace: self.lease_namespace.clone(),
                secret: self.webhook_secret.clone(),
                service: service.clone(),
                configuration: configuration.clone(),
            }),
            _ => {
                return Err(CliError::new(
                    "invalid_config",
                    "--webhook-listen needs either --webhook-cert-dir (cert-manager) or both \
                     --webhook-service and --webhook-configuration (self-signed)",
                ));
            }
        };
        Ok(Some(WebhookOptions {
            listen,
            certificates,
        }))
    }
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
    let webhook = args.webhook()?;
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
    config.default_queue_name = args.default_queue_name;
    let signer = Arc::new(HmacSigner::new(&args.blob_url, signing_key.as_bytes()));
    let options = ControllerOptions {
        config,
        namespace: args.watch_namespace,
        results,
        signer: signer.clone(),
        serve_blobs: Some(signer),
        listen: Some(args.listen),
        webhook,
        leader_election: args.leader_elect.then(|| {
            (
                args.lease_namespace,
                LeaseSettings {
                    create_lease: args.create_lease,
                    ..LeaseSettings::new("errand-controller", identity.clone())
                },
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
