//! Keeps the webhook's serving certificate in place: a self-signed one shared through a Secret with its CA patched into the ValidatingWebhookConfiguration, or files that cert-manager keeps current.
//!
//! Every replica runs the same loop. The first to find no Secret creates it (the others get
//! AlreadyExists and read it), so all replicas serve one certificate and the configuration
//! trusts exactly one CA. The loop also repairs the CA bundle when something (a `helm
//! upgrade`, a person) resets it. The Secret is owned by the configuration, so uninstalling
//! the chart removes it too.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use tracing::{info, warn};

use super::certs::{self, CertError, TlsMaterial};
use super::tls::{ServingCertificate, TlsError};

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum Certificates {
    /// Generated here and shared through a Secret; the CA goes into the configuration.
    SelfSigned(SelfSigned),
    /// `tls.crt` and `tls.key` in this directory, kept current by something else
    /// (cert-manager, whose CA injector also fills the configuration's CA bundle).
    Files(PathBuf),
}

/// The objects a self-signed certificate involves.
#[derive(Clone, Debug)]
pub struct SelfSigned {
    /// Namespace of the Secret and the Service (the controller's own).
    pub namespace: String,
    /// Name of the Secret the replicas share.
    pub secret: String,
    /// Name of the Service the API server calls; the certificate is made for its DNS names.
    pub service: String,
    /// Name of the ValidatingWebhookConfiguration whose CA bundle to keep.
    pub configuration: String,
}

/// Why a round of provisioning failed.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// A call to the API server failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The configuration to patch does not exist.
    #[error("ValidatingWebhookConfiguration {0} not found (install it with the chart)")]
    NoConfiguration(String),
    /// Another replica kept changing the Secret.
    #[error("Secret {0} kept changing while this replica tried to read or renew it")]
    Contended(String),
    /// A certificate could not be generated.
    #[error(transparent)]
    Cert(#[from] CertError),
    /// The certificate could not be served.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A certificate file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn kube_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> ProvisionError {
    let action = action.into();
    move |source| ProvisionError::Kube { action, source }
}

/// How often the certificate and the CA bundle are checked once serving. Short, because it
/// bounds how long replicas can serve different certificates after the shared one changes
/// (two reads of small objects per replica are cheap).
const RECHECK: Duration = Duration::from_secs(10);
/// How soon a failed round is retried before anything is served.
const RETRY: Duration = Duration::from_secs(2);

/// Keeps the certificate current forever: one round now, then one every [`RECHECK`] (every
/// [`RETRY`] while nothing could be served yet).
pub async fn keep(client: Client, certificates: Certificates, serving: &ServingCertificate) {
    loop {
        if let Err(e) = sync(&client, &certificates, serving).await {
            warn!("webhook certificate: {e}");
        }
        let pause = if serving.chain_pem().is_some() {
            RECHECK
        } else {
            RETRY
        };
        tokio::time::sleep(pause).await;
    }
}

/// One round: make sure a valid certificate is served (and trusted).
pub async fn sync(
    client: &Client,
    certificates: &Certificates,
    serving: &ServingCertificate,
) -> Result<(), ProvisionError> {
    match certificates {
        Certificates::Files(dir) => {
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read_to_string(&path)
                    .map_err(|source| ProvisionError::Read { path, source })
            };
            serving.load_pem(&read(certs::CERT_KEY)?, &read(certs::PRIVATE_KEY_KEY)?)?;
            Ok(())
        }
        Certificates::SelfSigned(settings) => {
            let configurations = Api::<ValidatingWebhookConfiguration>::all(client.clone());
            let configuration = configurations
                .get_opt(&settings.configuration)
                .await
                .map_err(kube_error(format!(
                    "reading ValidatingWebhookConfiguration {}",
                    settings.configuration
                )))?
                .ok_or_else(|| ProvisionError::NoConfiguration(settings.configuration.clone()))?;
            let material = shared_material(client, settings, &configuration).await?;
            serving.load_pem(&material.cert_pem, &material.key_pem)?;
            trust_ca(&configurations, &configuration, &material.ca_pem).await
        }
    }
}

/// The material in the shared Secret, created or renewed first when needed.
async fn shared_material(
    client: &Client,
    settings: &SelfSigned,
    configuration: &ValidatingWebhookConfiguration,
) -> Result<TlsMaterial, ProvisionError> {
    let api = Api::<Secret>::namespaced(client.clone(), &settings.namespace);
    let names = certs::service_dns_names(&settings.service, &settings.namespace);
    let reading = format!("reading Secret {}/{}", settings.namespace, settings.secret);
    // A lost race with another replica (AlreadyExists, Conflict) means its write is there to
    // read on the next attempt.
    for _ in 0..3 {
        let now = jiff::Timestamp::now();
        let existing = api
            .get_opt(&settings.secret)
            .await
            .map_err(kube_error(&reading))?;
        let current = existing.as_ref().and_then(|secret| {
            TlsMaterial::from_secret(secret.data.as_ref()?, secret.metadata.annotations.as_ref()?)
        });
        if let Some(material) = current.filter(|m| m.serves(&names, now)) {
            return Ok(material);
        }
        let fresh = certs::generate(&names, now)?;
        let written = match existing {
            None => {
                let secret =
                    Secret {
                        metadata: ObjectMeta {
                            name: Some(settings.secret.clone()),
                            namespace: Some(settings.namespace.clone()),
                            annotations: Some(fresh.annotations()),
                            labels: Some(
                                [(
                                    "app.kubernetes.io/component".to_owned(),
                                    "webhook".to_owned(),
                                )]
                                .into(),
                            ),
                            owner_references: Some(vec![configuration.owner_ref(&()).expect(
                                "an object read from the API server has a name and a uid",
                            )]),
                            ..ObjectMeta::default()
                        },
                        type_: Some("kubernetes.io/tls".to_owned()),
                        data: Some(fresh.secret_data()),
                        ..Secret::default()
                    };
                api.create(&PostParams::default(), &secret).await
            }
            Some(mut secret) => {
                secret
                    .metadata
                    .annotations
                    .get_or_insert_default()
                    .extend(fresh.annotations());
                secret.data = Some(fresh.secret_data());
                api.replace(&settings.secret, &PostParams::default(), &secret)
                    .await
            }
        };
        match written {
            Ok(_) => {
                info!(secret = %settings.secret, not_after = %fresh.not_after, "generated the webhook certificate");
                return Ok(fresh);
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() || status.is_conflict() => {
            }
            Err(e) => {
                return Err(kube_error(format!(
                    "writing Secret {}/{}",
                    settings.namespace, settings.secret
                ))(e));
            }
        }
    }
    Err(ProvisionError::Contended(settings.secret.clone()))
}

/// Puts `ca_pem` into the CA bundle of every webhook of the configuration that lacks it.
async fn trust_ca(
    api: &Api<ValidatingWebhookConfiguration>,
    configuration: &ValidatingWebhookConfiguration,
    ca_pem: &str,
) -> Result<(), ProvisionError> {
    let stale: Vec<serde_json::Value> = configuration
        .webhooks
        .iter()
        .flatten()
        .filter(|w| {
            w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca_pem.as_bytes())
        })
        .map(|w| {
            serde_json::json!({
                "name": w.name,
                "clientConfig": {"caBundle": ByteString(ca_pem.as_bytes().to_vec())},
            })
        })
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    let name = configuration.meta().name.clone().unwrap_or_default();
    // Webhooks merge by name, so only the CA bundles of these entries change.
    let patch = serde_json::json!({"webhooks": stale});
    api.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(kube_error(format!(
            "patching the CA bundle of ValidatingWebhookConfiguration {name}"
        )))?;
    info!(configuration = %name, webhooks = stale.len(), "put the webhook CA in the configuration");
    Ok(())
}
