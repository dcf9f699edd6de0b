//! Keeps the serving certificate in place: a self-signed one shared through a Secret with its CA patched into every object the API server calls errand through (the ValidatingWebhookConfiguration, the data API's APIService), or files that cert-manager keeps current.
//!
//! Every replica runs the same loop. The first to find no Secret creates it (the others get
//! AlreadyExists and read it), so all replicas serve one certificate and every caller trusts
//! exactly one CA. The loop also repairs a CA bundle when something (a `helm upgrade`, a
//! person) resets it. The Secret is owned by those objects, so uninstalling the chart removes
//! it too.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use tracing::{info, warn};

use super::certs::{self, CertError, TlsMaterial};
use super::tls::{ServingCertificate, TlsError};

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum Certificates {
    /// Generated here and shared through a Secret; the CA goes into the objects that call
    /// errand.
    SelfSigned(SelfSigned),
    /// `tls.crt` and `tls.key` in this directory, kept current by something else
    /// (cert-manager, whose CA injector also fills the CA bundles).
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
    /// The objects whose CA bundle to keep (at least one).
    pub trusted_by: Vec<CaBundleHolder>,
    /// The token the webhook configuration's paths end with ([`super::caller`]); `None`
    /// leaves the paths as they are.
    pub webhook_path_token: Option<String>,
}

/// A cluster-scoped object through which the API server calls errand, with the CA bundle it
/// checks errand's certificate against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaBundleHolder {
    /// A ValidatingWebhookConfiguration, by name: the CA goes into each of its webhooks.
    WebhookConfiguration(String),
    /// An APIService (`v1alpha1.data.errand.dev`), by name.
    ApiService(String),
}

impl std::fmt::Display for CaBundleHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaBundleHolder::WebhookConfiguration(name) => {
                write!(f, "ValidatingWebhookConfiguration {name}")
            }
            CaBundleHolder::ApiService(name) => write!(f, "APIService {name}"),
        }
    }
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
    /// An object whose CA bundle to keep does not exist.
    #[error("{0} not found (install it with the chart)")]
    NoHolder(CaBundleHolder),
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
            warn!("serving certificate: {e}");
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
            let holders = read_holders(client, &settings.trusted_by).await?;
            let owners = holders.iter().map(Holder::owner_ref).collect();
            let material = shared_material(client, settings, owners).await?;
            serving.load_pem(&material.cert_pem, &material.key_pem)?;
            for holder in &holders {
                holder
                    .trust_ca(
                        client,
                        &material.ca_pem,
                        settings.webhook_path_token.as_deref(),
                    )
                    .await?;
            }
            Ok(())
        }
    }
}

/// An object whose CA bundle is kept, as read.
enum Holder {
    WebhookConfiguration(ValidatingWebhookConfiguration),
    ApiService(APIService),
}

async fn read_holders(
    client: &Client,
    holders: &[CaBundleHolder],
) -> Result<Vec<Holder>, ProvisionError> {
    let mut read = Vec::with_capacity(holders.len());
    for holder in holders {
        let action = format!("reading {holder}");
        let found = match holder {
            CaBundleHolder::WebhookConfiguration(name) => {
                Api::<ValidatingWebhookConfiguration>::all(client.clone())
                    .get_opt(name)
                    .await
                    .map_err(kube_error(action))?
                    .map(Holder::WebhookConfiguration)
            }
            CaBundleHolder::ApiService(name) => Api::<APIService>::all(client.clone())
                .get_opt(name)
                .await
                .map_err(kube_error(action))?
                .map(Holder::ApiService),
        };
        read.push(found.ok_or_else(|| ProvisionError::NoHolder(holder.clone()))?);
    }
    Ok(read)
}

impl Holder {
    fn owner_ref(&self) -> OwnerReference {
        let owner = match self {
            Holder::WebhookConfiguration(object) => object.owner_ref(&()),
            Holder::ApiService(object) => object.owner_ref(&()),
        };
        owner.expect("an object read from the API server has a name and a uid")
    }

    /// Puts `ca_pem` into the object's CA bundle where it is missing, and `path_token` into
    /// a webhook configuration's paths.
    async fn trust_ca(
        &self,
        client: &Client,
        ca_pem: &str,
        path_token: Option<&str>,
    ) -> Result<(), ProvisionError> {
        match self {
            Holder::WebhookConfiguration(configuration) => {
                let api = Api::<ValidatingWebhookConfiguration>::all(client.clone());
                trust_ca_in_webhooks(&api, configuration, ca_pem, path_token).await
            }
            Holder::ApiService(service) => {
                let current = service.spec.as_ref().and_then(|s| s.ca_bundle.as_ref());
                if current.map(|b| b.0.as_slice()) == Some(ca_pem.as_bytes()) {
                    return Ok(());
                }
                let name = service.meta().name.clone().unwrap_or_default();
                let patch = serde_json::json!({
                    "spec": {"caBundle": ByteString(ca_pem.as_bytes().to_vec())},
                });
                Api::<APIService>::all(client.clone())
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(kube_error(format!(
                        "patching the CA bundle of APIService {name}"
                    )))?;
                info!(apiservice = %name, "put the serving CA in the APIService");
                Ok(())
            }
        }
    }
}

/// The material in the shared Secret, created or renewed first when needed.
async fn shared_material(
    client: &Client,
    settings: &SelfSigned,
    owners: Vec<OwnerReference>,
) -> Result<TlsMaterial, ProvisionError> {
    let api = Api::<Secret>::namespaced(client.clone(), &settings.namespace);
    let names = certs::serving_names(&settings.service, &settings.namespace);
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
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(settings.secret.clone()),
                        namespace: Some(settings.namespace.clone()),
                        annotations: Some(fresh.annotations()),
                        labels: Some(
                            [(
                                "app.kubernetes.io/component".to_owned(),
                                "controller".to_owned(),
                            )]
                            .into(),
                        ),
                        owner_references: Some(owners.clone()),
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
                info!(secret = %settings.secret, not_after = %fresh.not_after, "generated the serving certificate");
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

/// Puts `ca_pem` into the CA bundle of every webhook of the configuration that lacks it, and
/// `path_token` at the end of each webhook's path where it is not.
async fn trust_ca_in_webhooks(
    api: &Api<ValidatingWebhookConfiguration>,
    configuration: &ValidatingWebhookConfiguration,
    ca_pem: &str,
    path_token: Option<&str>,
) -> Result<(), ProvisionError> {
    let stale: Vec<serde_json::Value> = configuration
        .webhooks
        .iter()
        .flatten()
        .filter_map(|w| {
            let mut client_config = serde_json::Map::new();
            if w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(ca_pem.as_bytes())
            {
                client_config.insert(
                    "caBundle".to_owned(),
                    serde_json::json!(ByteString(ca_pem.as_bytes().to_vec())),
                );
            }
            let path = w
                .client_config
                .service
                .as_ref()
                .and_then(|s| s.path.as_deref());
            if let (Some(token), Some(path)) = (path_token, path) {
                let wanted = super::caller::authenticated_path(path, token);
                if path != wanted {
                    client_config.insert("service".to_owned(), serde_json::json!({"path": wanted}));
                }
            }
            (!client_config.is_empty())
                .then(|| serde_json::json!({"name": w.name, "clientConfig": client_config}))
        })
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    let name = configuration.meta().name.clone().unwrap_or_default();
    // Webhooks merge by name, so only the CA bundles and paths of these entries change.
    let patch = serde_json::json!({"webhooks": stale});
    api.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(kube_error(format!(
            "patching the CA bundle of ValidatingWebhookConfiguration {name}"
        )))?;
    info!(configuration = %name, webhooks = stale.len(), "put the webhook CA and path in the configuration");
    Ok(())
}
