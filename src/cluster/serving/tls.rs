//! The TLS of errand's HTTPS endpoints: a serving certificate that can be swapped while connections are served, and the acceptor built on it.
//!
//! The certificate changes under a running server when another replica renews the shared one
//! or cert-manager rotates its Secret; new handshakes use the new one at once.

use std::sync::{Arc, RwLock};

use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, ServerConfig};

/// Why a certificate could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate chain is not PEM or is empty.
    #[error("the serving certificate is not a PEM certificate chain: {0}")]
    Certificate(String),
    /// The key is not a PEM private key of a supported type.
    #[error("the serving key is not a usable PEM private key: {0}")]
    Key(String),
    /// rustls refused the configuration.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The certificate errand serves; empty until the first one is loaded.
#[derive(Debug)]
pub struct ServingCertificate {
    current: RwLock<Option<(String, Arc<CertifiedKey>)>>,
    loaded: watch::Sender<bool>,
}

impl Default for ServingCertificate {
    fn default() -> Self {
        Self {
            current: RwLock::new(None),
            loaded: watch::Sender::new(false),
        }
    }
}

impl ServingCertificate {
    /// Serves this certificate chain and key from the next handshake on. Loading the chain
    /// already served changes nothing.
    pub fn load_pem(&self, chain_pem: &str, key_pem: &str) -> Result<(), TlsError> {
        if self
            .current
            .read()
            .expect("no panics while holding the lock")
            .as_ref()
            .is_some_and(|(chain, _)| chain == chain_pem)
        {
            return Ok(());
        }
        let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Certificate(e.to_string()))?;
        if chain.is_empty() {
            return Err(TlsError::Certificate("no certificate found".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| TlsError::Key(e.to_string()))?;
        let signing_key =
            ring::sign::any_supported_type(&key).map_err(|e| TlsError::Key(e.to_string()))?;
        let certified = Arc::new(CertifiedKey::new(chain, signing_key));
        *self
            .current
            .write()
            .expect("no panics while holding the lock") = Some((chain_pem.to_owned(), certified));
        self.loaded.send_replace(true);
        Ok(())
    }

    /// The PEM chain served now, if any.
    pub fn chain_pem(&self) -> Option<String> {
        self.current
            .read()
            .expect("no panics while holding the lock")
            .as_ref()
            .map(|(chain, _)| chain.clone())
    }

    /// Waits until a certificate is loaded.
    pub async fn wait_loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = loaded.wait_for(|loaded| *loaded).await;
    }
}

impl ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .expect("no panics while holding the lock")
            .as_ref()
            .map(|(_, key)| Arc::clone(key))
    }
}

/// A TLS acceptor that serves whatever `certificate` holds at each handshake, over HTTP/1.1.
pub fn acceptor(certificate: Arc<ServingCertificate>) -> Result<TlsAcceptor, TlsError> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::serving::certs;

    #[tokio::test]
    async fn a_generated_certificate_loads_and_a_bad_one_is_refused() {
        let names = certs::service_dns_names("errand-webhook", "errand-system");
        let material = certs::generate(&names, jiff::Timestamp::now()).unwrap();
        let serving = ServingCertificate::default();
        assert_eq!(serving.chain_pem(), None);
        assert!(matches!(
            serving.load_pem("not pem", &material.key_pem),
            Err(TlsError::Certificate(_))
        ));
        assert!(matches!(
            serving.load_pem(&material.cert_pem, "not a key"),
            Err(TlsError::Key(_))
        ));
        serving
            .load_pem(&material.cert_pem, &material.key_pem)
            .unwrap();
        serving.wait_loaded().await;
        assert_eq!(serving.chain_pem(), Some(material.cert_pem.clone()));
        acceptor(Arc::new(serving)).unwrap();
    }
}
