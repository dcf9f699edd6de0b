//! The self-signed serving certificate of errand's HTTPS endpoints (the admission webhook, the data API): generated with its own CA, kept in a Secret all replicas share, renewed before it expires or when the Service is renamed.
//!
//! Pure: no client. The CA's key is thrown away after signing, because renewal makes a new CA
//! as well; nothing else is ever signed with it.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// Key of the CA certificate in the Secret (the bundle the API server trusts).
pub const CA_KEY: &str = "ca.crt";
/// Key of the serving certificate in the Secret (and in a cert-manager Secret).
pub const CERT_KEY: &str = "tls.crt";
/// Key of the serving key in the Secret (and in a cert-manager Secret).
pub const PRIVATE_KEY_KEY: &str = "tls.key";
/// Annotation with the DNS names the certificate was made for, comma-separated.
pub const DNS_NAMES_ANNOTATION: &str = "errand.dev/dns-names";
/// Annotation with the end of the certificate's validity (RFC 3339).
pub const NOT_AFTER_ANNOTATION: &str = "errand.dev/not-after";

/// How long a generated certificate is valid. Long, as self-signed serving certificates
/// usually are: renewal is automatic but every replica picks it up only at its next check.
pub const VALIDITY: SignedDuration = SignedDuration::from_hours(24 * 365 * 5);
/// A certificate is renewed when less than this is left.
pub const RENEW_BEFORE: SignedDuration = SignedDuration::from_hours(24 * 30);

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen refused the parameters or failed to sign.
    #[error("generating the serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The validity period does not fit a certificate's time fields.
    #[error("the validity period starting {0} is out of range")]
    Time(Timestamp),
}

/// A serving certificate, its key and the CA that signed it, PEM-encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsMaterial {
    /// The CA certificate.
    pub ca_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving certificate's private key.
    pub key_pem: String,
    /// The DNS names it is valid for.
    pub dns_names: Vec<String>,
    /// When it expires.
    pub not_after: Timestamp,
}

/// The names a client at the near end of a `kubectl port-forward` (a workstation reaching the
/// gateway, as the user guide's recipe does) connects to, which the serving certificate names
/// too: `localhost`, `127.0.0.1` and `::1` (IP addresses become IP SANs).
pub const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The names the self-signed serving certificate is made for: the Service's DNS names (the API
/// server, pods) and the [`LOOPBACK_NAMES`] of a port-forward.
pub fn serving_names(service: &str, namespace: &str) -> Vec<String> {
    let mut names = service_dns_names(service, namespace);
    names.extend(LOOPBACK_NAMES.map(str::to_owned));
    names
}

/// The names the API server may use to reach errand's Service.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

fn offset_time(at: Timestamp) -> Result<time::OffsetDateTime, CertError> {
    time::OffsetDateTime::from_unix_timestamp(at.as_second()).map_err(|_| CertError::Time(at))
}

/// Generates a new CA and a serving certificate for `dns_names` it signed (a name that is an
/// IP address becomes an IP address SAN), valid from `now` for [`VALIDITY`].
pub fn generate(dns_names: &[String], now: Timestamp) -> Result<TlsMaterial, CertError> {
    // A little slack before `now` so a replica whose clock runs behind still accepts it.
    let not_before = now - SignedDuration::from_mins(5);
    let not_after = now + VALIDITY;

    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::CommonName, "errand serving CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = offset_time(not_before)?;
    ca.not_after = offset_time(not_after)?;
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut leaf = CertificateParams::new(dns_names.to_vec())?;
    leaf.distinguished_name = DistinguishedName::new();
    leaf.distinguished_name.push(
        DnType::CommonName,
        dns_names.first().cloned().unwrap_or_default(),
    );
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = offset_time(not_before)?;
    leaf.not_after = offset_time(not_after)?;
    let leaf_key = KeyPair::generate()?;
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;

    Ok(TlsMaterial {
        ca_pem: ca_cert.pem(),
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
        dns_names: dns_names.to_vec(),
        not_after,
    })
}

impl TlsMaterial {
    /// The Secret data holding this material.
    pub fn secret_data(&self) -> BTreeMap<String, ByteString> {
        BTreeMap::from([
            (
                CA_KEY.to_owned(),
                ByteString(self.ca_pem.clone().into_bytes()),
            ),
            (
                CERT_KEY.to_owned(),
                ByteString(self.cert_pem.clone().into_bytes()),
            ),
            (
                PRIVATE_KEY_KEY.to_owned(),
                ByteString(self.key_pem.clone().into_bytes()),
            ),
        ])
    }

    /// The Secret annotations that let the next replica decide whether to renew.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (DNS_NAMES_ANNOTATION.to_owned(), self.dns_names.join(",")),
            (NOT_AFTER_ANNOTATION.to_owned(), self.not_after.to_string()),
        ])
    }

    /// The material kept in a Secret's data and annotations; `None` when anything is missing
    /// or unreadable, so the Secret is renewed.
    pub fn from_secret(
        data: &BTreeMap<String, ByteString>,
        annotations: &BTreeMap<String, String>,
    ) -> Option<Self> {
        let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
        Some(Self {
            ca_pem: text(CA_KEY)?,
            cert_pem: text(CERT_KEY)?,
            key_pem: text(PRIVATE_KEY_KEY)?,
            dns_names: annotations
                .get(DNS_NAMES_ANNOTATION)?
                .split(',')
                .map(str::to_owned)
                .collect(),
            not_after: annotations.get(NOT_AFTER_ANNOTATION)?.parse().ok()?,
        })
    }

    /// Whether this material can keep serving `dns_names` at `now`.
    pub fn serves(&self, dns_names: &[String], now: Timestamp) -> bool {
        self.dns_names == dns_names && now + RENEW_BEFORE < self.not_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    #[test]
    fn generated_material_is_pem_for_the_service_names() {
        let names = service_dns_names("errand-webhook", "errand-system");
        assert!(names.contains(&"errand-webhook.errand-system.svc".to_owned()));
        let material = generate(&names, now()).unwrap();
        assert!(material.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(material.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(material.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_ne!(material.ca_pem, material.cert_pem);
        assert_eq!(material.not_after, now() + VALIDITY);
        // A second generation is a new CA, not the same one.
        assert_ne!(generate(&names, now()).unwrap().ca_pem, material.ca_pem);
    }

    #[test]
    fn the_serving_names_add_the_loopback_names_of_a_port_forward() {
        let names = serving_names("errand", "errand-system");
        assert_eq!(
            names,
            [
                "errand",
                "errand.errand-system",
                "errand.errand-system.svc",
                "errand.errand-system.svc.cluster.local",
                "localhost",
                "127.0.0.1",
                "::1",
            ]
        );
        let material = generate(&names, now()).unwrap();
        let read = TlsMaterial::from_secret(&material.secret_data(), &material.annotations());
        assert_eq!(read.map(|m| m.dns_names), Some(names.clone()));
        // A Secret made before the loopback names were added is renewed.
        let older = generate(&service_dns_names("errand", "errand-system"), now()).unwrap();
        assert!(!older.serves(&names, now()));
    }

    #[test]
    fn material_round_trips_through_a_secret() {
        let names = service_dns_names("errand-webhook", "errand-system");
        let material = generate(&names, now()).unwrap();
        let read = TlsMaterial::from_secret(&material.secret_data(), &material.annotations());
        assert_eq!(read.as_ref(), Some(&material));
        let mut partial = material.secret_data();
        partial.remove(PRIVATE_KEY_KEY);
        assert_eq!(
            TlsMaterial::from_secret(&partial, &material.annotations()),
            None
        );
    }

    #[test]
    fn material_is_renewed_before_it_expires_or_when_the_service_changes() {
        let names = service_dns_names("errand-webhook", "errand-system");
        let material = generate(&names, now()).unwrap();
        assert!(material.serves(&names, now()));
        let late = material.not_after - RENEW_BEFORE;
        assert!(!material.serves(&names, late));
        assert!(material.serves(&names, late - SignedDuration::from_secs(1)));
        let renamed = service_dns_names("errand-webhook", "other-namespace");
        assert!(!material.serves(&renamed, now()));
    }
}
