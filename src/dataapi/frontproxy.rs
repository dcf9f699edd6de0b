//! The cluster's front proxy as this server knows it: its request-header settings, read from `kube-system/extension-apiserver-authentication` and kept current, and the TLS client-certificate check built from its CA.
//!
//! Client certificates are optional in the handshake, so a caller without one still gets an
//! HTTP answer (401 with a `Status`) rather than a failed handshake; a certificate that is
//! offered must chain to the front-proxy CA or the handshake fails. The CA can change while
//! the server runs (the API server rotates it); new handshakes use the current one.

use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::crypto::{
    WebPkiSupportedAlgorithms, ring, verify_tls12_signature, verify_tls13_signature,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, UnixTime};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{
    DigitallySignedStruct, DistinguishedName, Error as TlsError, RootCertStore, SignatureScheme,
};
use tracing::{info, warn};

use super::authn::{FRONT_PROXY_CONFIG_MAP, FRONT_PROXY_NAMESPACE, FrontProxyConfig};

/// How often the ConfigMap is read again once loaded (the CA rotates rarely; a rotation is
/// picked up within this).
const RECHECK: Duration = Duration::from_secs(30);
/// How soon a failed read is retried before anything is loaded.
const RETRY: Duration = Duration::from_secs(2);

/// Why the front proxy's settings could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FrontProxyError {
    /// The ConfigMap could not be read.
    #[error("reading {FRONT_PROXY_NAMESPACE}/{FRONT_PROXY_CONFIG_MAP}: {0}")]
    Read(#[source] kube::Error),
    /// The ConfigMap does not exist.
    #[error("{FRONT_PROXY_NAMESPACE}/{FRONT_PROXY_CONFIG_MAP} does not exist")]
    Missing,
    /// The ConfigMap's settings are unusable.
    #[error(transparent)]
    Config(#[from] super::authn::ConfigError),
    /// The CA is not a PEM certificate rustls accepts.
    #[error("the front-proxy CA (requestheader-client-ca-file) is unusable: {0}")]
    Ca(String),
}

/// Settings in use and the client-certificate check built from them.
type Loaded = (Arc<FrontProxyConfig>, Arc<dyn ClientCertVerifier>);

/// The current settings and the client-certificate check built from them.
pub struct FrontProxy {
    current: RwLock<Option<Loaded>>,
    algorithms: WebPkiSupportedAlgorithms,
    loaded: watch::Sender<bool>,
}

impl fmt::Debug for FrontProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrontProxy")
            .field("loaded", &self.config().is_some())
            .finish()
    }
}

impl Default for FrontProxy {
    fn default() -> Self {
        FrontProxy {
            current: RwLock::new(None),
            algorithms: ring::default_provider().signature_verification_algorithms,
            loaded: watch::Sender::new(false),
        }
    }
}

impl FrontProxy {
    /// The settings in use; `None` until first loaded.
    pub fn config(&self) -> Option<Arc<FrontProxyConfig>> {
        self.current
            .read()
            .expect("no panics while holding the lock")
            .as_ref()
            .map(|(config, _)| Arc::clone(config))
    }

    /// Uses `config` from the next handshake and request on; loading the settings in use
    /// changes nothing.
    pub fn load(&self, config: FrontProxyConfig) -> Result<(), FrontProxyError> {
        if self.config().is_some_and(|current| *current == config) {
            return Ok(());
        }
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(config.client_ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| FrontProxyError::Ca(e.to_string()))?;
            roots
                .add(cert)
                .map_err(|e| FrontProxyError::Ca(e.to_string()))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(ring::default_provider()),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| FrontProxyError::Ca(e.to_string()))?;
        *self
            .current
            .write()
            .expect("no panics while holding the lock") = Some((Arc::new(config), verifier));
        self.loaded.send_replace(true);
        Ok(())
    }

    /// Waits until settings are loaded.
    pub async fn wait_loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = loaded.wait_for(|loaded| *loaded).await;
    }

    fn verifier(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.current
            .read()
            .expect("no panics while holding the lock")
            .as_ref()
            .map(|(_, verifier)| Arc::clone(verifier))
    }
}

impl ClientCertVerifier for FrontProxy {
    fn offer_client_auth(&self) -> bool {
        true
    }

    /// Optional, so that a request without a certificate is answered with a 401 `Status`.
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No hints: a client with a certificate then always offers it.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, TlsError> {
        match self.verifier() {
            Some(verifier) => verifier.verify_client_cert(end_entity, intermediates, now),
            None => Err(TlsError::General(
                "the front-proxy CA is not loaded yet".into(),
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The common name of a certificate's subject, if it has one.
pub fn common_name(certificate: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    let name = parsed.subject().iter_common_name().next()?;
    name.as_str().ok().map(str::to_owned)
}

/// Reads the ConfigMap once and loads what it says.
pub async fn sync(client: &Client, front_proxy: &FrontProxy) -> Result<(), FrontProxyError> {
    let map = Api::<ConfigMap>::namespaced(client.clone(), FRONT_PROXY_NAMESPACE)
        .get_opt(FRONT_PROXY_CONFIG_MAP)
        .await
        .map_err(FrontProxyError::Read)?
        .ok_or(FrontProxyError::Missing)?;
    let config = FrontProxyConfig::from_config_map(&map.data.unwrap_or_default())?;
    let first = front_proxy.config().is_none();
    front_proxy.load(config)?;
    if first {
        info!("loaded the front proxy's CA and request headers");
    }
    Ok(())
}

/// Keeps the settings current forever: one read now, then one every [`RECHECK`] (every
/// [`RETRY`] until the first load).
pub async fn keep(client: Client, front_proxy: Arc<FrontProxy>) {
    loop {
        if let Err(e) = sync(&client, &front_proxy).await {
            warn!("data API front proxy: {e}");
        }
        let pause = if front_proxy.config().is_some() {
            RECHECK
        } else {
            RETRY
        };
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};

    use super::*;

    /// A CA and a client certificate with `common_name` it signed, PEM.
    pub fn ca_and_client(common_name: &str) -> (String, CertificateDer<'static>) {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
        client
            .distinguished_name
            .push(DnType::CommonName, common_name);
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client
            .signed_by(&KeyPair::generate().unwrap(), &issuer)
            .unwrap();
        (ca_cert.pem(), client_cert.der().clone())
    }

    #[test]
    fn a_certificate_is_trusted_only_once_the_ca_that_signed_it_is_loaded() {
        let (ca_pem, client) = ca_and_client("front-proxy-client");
        let (_, stranger) = ca_and_client("front-proxy-client");
        assert_eq!(common_name(&client).as_deref(), Some("front-proxy-client"));
        let front_proxy = FrontProxy::default();
        let now = UnixTime::now();
        assert!(front_proxy.verify_client_cert(&client, &[], now).is_err());
        assert!(!front_proxy.client_auth_mandatory());
        front_proxy
            .load(FrontProxyConfig {
                client_ca_pem: ca_pem,
                ..FrontProxyConfig::default()
            })
            .unwrap();
        assert!(front_proxy.verify_client_cert(&client, &[], now).is_ok());
        assert!(front_proxy.verify_client_cert(&stranger, &[], now).is_err());
        let bad = front_proxy.load(FrontProxyConfig {
            client_ca_pem: "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
                .into(),
            ..FrontProxyConfig::default()
        });
        assert!(bad.is_err());
        assert!(
            front_proxy.verify_client_cert(&client, &[], now).is_ok(),
            "a bad update keeps the CA in use"
        );
    }
}
