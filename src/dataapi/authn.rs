//! Who is asking: the front proxy's word, taken only from a client certificate the front-proxy CA signed, as the `extension-apiserver-authentication` ConfigMap describes it.
//!
//! Pure: the TLS layer has already verified the certificate chain; here its common name is
//! checked against the allowed names, and the user, uid, groups and extra attributes are read
//! from the headers the ConfigMap names (`X-Remote-User`, `X-Remote-Group`,
//! `X-Remote-Extra-*`), as Kubernetes' request-header authenticator reads them. Without a
//! verified certificate no header is believed.

use std::collections::BTreeMap;

use hyper::HeaderMap;

/// Where the front proxy's settings are published, in `kube-system`.
pub const FRONT_PROXY_CONFIG_MAP: &str = "extension-apiserver-authentication";
/// The namespace of [`FRONT_PROXY_CONFIG_MAP`].
pub const FRONT_PROXY_NAMESPACE: &str = "kube-system";

/// The request-header settings of the cluster's front proxy (the aggregation layer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrontProxyConfig {
    /// The CA that signs the front proxy's client certificate, PEM.
    pub client_ca_pem: String,
    /// Common names a front-proxy certificate may have; empty means any the CA signed.
    pub allowed_names: Vec<String>,
    /// Headers that carry the user name, first non-empty wins.
    pub username_headers: Vec<String>,
    /// Headers that carry the user's uid.
    pub uid_headers: Vec<String>,
    /// Headers that carry groups, one group per value.
    pub group_headers: Vec<String>,
    /// Prefixes of the headers that carry extra attributes.
    pub extra_header_prefixes: Vec<String>,
}

/// Why a `FrontProxyConfig` could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The cluster publishes no front-proxy CA: the aggregation layer is not set up.
    #[error(
        "{FRONT_PROXY_NAMESPACE}/{FRONT_PROXY_CONFIG_MAP} has no requestheader-client-ca-file: \
         the API server runs without --requestheader-client-ca-file, so nothing can reach an \
         aggregated API"
    )]
    NoClientCa,
    /// A list entry is not a JSON list of strings.
    #[error(
        "{FRONT_PROXY_NAMESPACE}/{FRONT_PROXY_CONFIG_MAP}: {key} is not a JSON list of strings: {reason}"
    )]
    NotAList {
        /// The key.
        key: &'static str,
        /// What the parser said.
        reason: String,
    },
}

impl FrontProxyConfig {
    /// The settings in the ConfigMap's data.
    pub fn from_config_map(data: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let list = |key: &'static str| -> Result<Vec<String>, ConfigError> {
            match data.get(key) {
                None => Ok(Vec::new()),
                Some(text) => serde_json::from_str(text).map_err(|e| ConfigError::NotAList {
                    key,
                    reason: e.to_string(),
                }),
            }
        };
        let client_ca_pem = data
            .get("requestheader-client-ca-file")
            .filter(|pem| !pem.trim().is_empty())
            .ok_or(ConfigError::NoClientCa)?
            .clone();
        Ok(FrontProxyConfig {
            client_ca_pem,
            allowed_names: list("requestheader-allowed-names")?,
            username_headers: list("requestheader-username-headers")?,
            uid_headers: list("requestheader-uid-headers")?,
            group_headers: list("requestheader-group-headers")?,
            extra_header_prefixes: list("requestheader-extra-headers-prefix")?,
        })
    }
}

pub use crate::cluster::access::UserInfo;

/// Why a request is not authenticated (answered with 401).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unauthenticated {
    /// No client certificate the front-proxy CA signed.
    #[error(
        "no client certificate signed by the front-proxy CA: this API is reached through the \
         Kubernetes API server (kubectl get --raw /apis/data.errand.dev/v1alpha1/...)"
    )]
    NoClientCertificate,
    /// A certificate the CA signed, with a name the cluster does not allow as the front proxy.
    #[error("the client certificate's common name {0:?} is not one of requestheader-allowed-names")]
    NameNotAllowed(String),
    /// The front proxy named no user.
    #[error("the front proxy sent no user name header ({0})")]
    NoUsername(String),
}

/// The user of a request whose TLS client certificate was verified against the front-proxy
/// CA and has `common_name` (`None`: no verified certificate).
pub fn authenticate(
    config: &FrontProxyConfig,
    common_name: Option<&str>,
    headers: &HeaderMap,
) -> Result<UserInfo, Unauthenticated> {
    let common_name = common_name.ok_or(Unauthenticated::NoClientCertificate)?;
    if !config.allowed_names.is_empty() && !config.allowed_names.iter().any(|n| n == common_name) {
        return Err(Unauthenticated::NameNotAllowed(common_name.to_owned()));
    }
    let values = |names: &[String]| -> Vec<String> {
        names
            .iter()
            .flat_map(|name| headers.get_all(name.as_str()))
            .filter_map(|value| value.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let username = values(&config.username_headers)
        .into_iter()
        .find(|u| !u.is_empty())
        .ok_or_else(|| Unauthenticated::NoUsername(config.username_headers.join(", ")))?;
    let uid = values(&config.uid_headers)
        .into_iter()
        .find(|u| !u.is_empty());
    let groups = values(&config.group_headers);
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = config.extra_header_prefixes.iter().find_map(|prefix| {
            let name = name.as_str();
            (name.len() > prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix))
                .then(|| &name[prefix.len()..])
        }) else {
            continue;
        };
        let Ok(value) = value.to_str() else { continue };
        extra
            .entry(percent_decode(key).to_lowercase())
            .or_default()
            .push(value.to_owned());
    }
    Ok(UserInfo {
        username,
        uid,
        groups,
        extra,
    })
}

/// Undoes the percent-encoding the front proxy applies to extra keys (`%2F` for `/`); an
/// escape that is not two hex digits stays as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use hyper::header::{HeaderName, HeaderValue};

    use super::*;

    fn config() -> FrontProxyConfig {
        let data = BTreeMap::from([
            (
                "requestheader-client-ca-file".to_owned(),
                "-----BEGIN CERTIFICATE-----\n".to_owned(),
            ),
            (
                "requestheader-allowed-names".to_owned(),
                r#"["front-proxy-client"]"#.to_owned(),
            ),
            (
                "requestheader-username-headers".to_owned(),
                r#"["X-Remote-User"]"#.to_owned(),
            ),
            (
                "requestheader-group-headers".to_owned(),
                r#"["X-Remote-Group"]"#.to_owned(),
            ),
            (
                "requestheader-extra-headers-prefix".to_owned(),
                r#"["X-Remote-Extra-"]"#.to_owned(),
            ),
            (
                "requestheader-uid-headers".to_owned(),
                r#"["X-Remote-Uid"]"#.to_owned(),
            ),
        ]);
        FrontProxyConfig::from_config_map(&data).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn the_front_proxys_headers_name_the_user_its_groups_and_extras() {
        let user = authenticate(
            &config(),
            Some("front-proxy-client"),
            &headers(&[
                ("X-Remote-User", "alice"),
                ("X-Remote-Uid", "u-1"),
                ("X-Remote-Group", "team-a"),
                ("X-Remote-Group", "system:authenticated"),
                ("X-Remote-Extra-Scopes", "read"),
                ("x-remote-extra-scopes", "write"),
                ("X-Remote-Extra-Example.com%2fteam", "a"),
                ("Authorization", "Bearer ignored"),
            ]),
        )
        .unwrap();
        assert_eq!(user.username, "alice");
        assert_eq!(user.uid.as_deref(), Some("u-1"));
        assert_eq!(user.groups, ["team-a", "system:authenticated"]);
        assert_eq!(
            user.extra,
            BTreeMap::from([
                ("example.com/team".to_owned(), vec!["a".to_owned()]),
                (
                    "scopes".to_owned(),
                    vec!["read".to_owned(), "write".to_owned()]
                ),
            ])
        );
    }

    #[test]
    fn without_a_verified_allowed_certificate_and_a_user_nothing_is_believed() {
        let alice = headers(&[("X-Remote-User", "alice")]);
        assert_eq!(
            authenticate(&config(), None, &alice),
            Err(Unauthenticated::NoClientCertificate)
        );
        assert_eq!(
            authenticate(&config(), Some("someone-else"), &alice),
            Err(Unauthenticated::NameNotAllowed("someone-else".into()))
        );
        assert!(matches!(
            authenticate(
                &config(),
                Some("front-proxy-client"),
                &headers(&[("X-Remote-Group", "g")])
            ),
            Err(Unauthenticated::NoUsername(_))
        ));
        let any_name = FrontProxyConfig {
            allowed_names: vec![],
            ..config()
        };
        assert_eq!(
            authenticate(&any_name, Some("anyone"), &alice)
                .unwrap()
                .username,
            "alice"
        );
    }

    #[test]
    fn a_config_map_without_a_ca_or_with_bad_lists_is_refused() {
        assert_eq!(
            FrontProxyConfig::from_config_map(&BTreeMap::new()),
            Err(ConfigError::NoClientCa)
        );
        let data = BTreeMap::from([
            ("requestheader-client-ca-file".to_owned(), "pem".to_owned()),
            (
                "requestheader-allowed-names".to_owned(),
                "front-proxy-client".to_owned(),
            ),
        ]);
        assert!(matches!(
            FrontProxyConfig::from_config_map(&data),
            Err(ConfigError::NotAList {
                key: "requestheader-allowed-names",
                ..
            })
        ));
    }

    #[test]
    fn percent_escapes_are_decoded_and_broken_ones_kept() {
        assert_eq!(percent_decode("a%2Fb%2fc"), "a/b/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
