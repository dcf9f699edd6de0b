//! Admission rules of `spec.notify`: the webhook's URL, and its signing Secret key, which must exist in the execution's namespace.

use super::catalog::Catalog;
use super::problems::Problems;
use super::rules::{object_name, secret_key};
use crate::api::{AgentExecutionSpec, MAX_WEBHOOK_URL_BYTES, SecretKeyRef};

/// Checks `spec.notify` of an execution submitted in `namespace`.
pub(crate) fn check_notify(
    namespace: &str,
    spec: &AgentExecutionSpec,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) {
    let Some(webhook) = spec.notify.as_ref().and_then(|n| n.webhook.as_ref()) else {
        return;
    };
    match (&webhook.url, &webhook.url_from) {
        (Some(url), None) => {
            if let Err(message) = webhook_url(url) {
                problems.push("spec.notify.webhook.url", message);
            }
        }
        (None, Some(reference)) => check_secret_key(
            namespace,
            "spec.notify.webhook.urlFrom",
            reference,
            catalog,
            problems,
        ),
        _ => problems.push(
            "spec.notify.webhook",
            "exactly one of url or urlFrom must be set".to_owned(),
        ),
    }
    check_secret_key(
        namespace,
        "spec.notify.webhook.signingSecretRef",
        &webhook.signing_secret_ref,
        catalog,
        problems,
    );
}

/// Checks a webhook URL: absolute `https` or `http`, with a host, without user information
/// (which would put a credential in the spec), at most [`MAX_WEBHOOK_URL_BYTES`].
pub fn webhook_url(url: &str) -> Result<url::Url, InvalidWebhookUrl> {
    if url.len() > MAX_WEBHOOK_URL_BYTES {
        return Err(InvalidWebhookUrl::TooLong { bytes: url.len() });
    }
    let parsed = url::Url::parse(url).map_err(|source| InvalidWebhookUrl::NotAUrl {
        url: url.to_owned(),
        source,
    })?;
    if !matches!(parsed.scheme(), "https" | "http") {
        return Err(InvalidWebhookUrl::Scheme {
            url: url.to_owned(),
            scheme: parsed.scheme().to_owned(),
        });
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(InvalidWebhookUrl::NoHost {
            url: url.to_owned(),
        });
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(InvalidWebhookUrl::UserInformation {
            redacted: redacted(&parsed),
        });
    }
    Ok(parsed)
}

/// Why a webhook URL is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidWebhookUrl {
    /// Longer than [`MAX_WEBHOOK_URL_BYTES`].
    #[error("is {bytes} bytes; at most {MAX_WEBHOOK_URL_BYTES} are accepted")]
    TooLong {
        /// Its length.
        bytes: usize,
    },
    /// Not a URL at all.
    #[error("{url:?} is not a URL: {source}")]
    NotAUrl {
        /// The text given.
        url: String,
        /// What the parser said.
        source: url::ParseError,
    },
    /// Neither `https` nor `http`.
    #[error("{url:?}: the scheme must be https or http, not {scheme:?}")]
    Scheme {
        /// The URL given.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// No host, or an empty one.
    #[error("{url:?} names no host")]
    NoHost {
        /// The URL given.
        url: String,
    },
    /// A user name or password in the URL.
    #[error(
        "{redacted:?} carries user information: the spec is readable by everyone who can list executions; sign deliveries with signingSecretRef instead"
    )]
    UserInformation {
        /// The URL without its user information.
        redacted: String,
    },
}

/// `url` without its user information, for messages.
fn redacted(url: &url::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

/// Checks that the Secret key `reference` (at `field`) names exists in `namespace`.
fn check_secret_key(
    namespace: &str,
    field: &str,
    reference: &SecretKeyRef,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) {
    let before = problems.len();
    let (name_field, key_field) = (format!("{field}.name"), format!("{field}.key"));
    if let Err(message) = object_name(&reference.name) {
        problems.push(&name_field, message);
    }
    if let Err(message) = secret_key(&reference.key) {
        problems.push(&key_field, message);
    }
    if problems.len() > before {
        return;
    }
    match catalog.secret_keys(namespace, &reference.name) {
        None => problems.push(
            &name_field,
            format!(
                "Secret {:?} not found in namespace {namespace:?}",
                reference.name
            ),
        ),
        Some(keys) if !keys.contains(&reference.key) => problems.push(
            &key_field,
            format!("Secret {:?} has no key {:?}", reference.name, reference.key),
        ),
        Some(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NotifySpec, SecretKeyRef, WebhookSink};
    use crate::resolve::InMemoryCatalog;

    fn spec(url: &str, name: &str, key: &str) -> AgentExecutionSpec {
        AgentExecutionSpec {
            notify: Some(NotifySpec {
                webhook: Some(WebhookSink {
                    url: Some(url.into()),
                    url_from: None,
                    signing_secret_ref: SecretKeyRef {
                        name: name.into(),
                        key: key.into(),
                    },
                }),
            }),
            ..AgentExecutionSpec::default()
        }
    }

    fn problems_of(spec: &AgentExecutionSpec, catalog: &InMemoryCatalog) -> Vec<String> {
        let mut problems = Problems::default();
        check_notify("team", spec, catalog, &mut problems);
        let invalid = problems.into_error();
        invalid.problems.iter().map(ToString::to_string).collect()
    }

    fn catalog() -> InMemoryCatalog {
        InMemoryCatalog::default().with_secret("team", "hooks", &[("signing", "s3cret")])
    }

    #[test]
    fn a_webhook_with_an_existing_secret_key_is_accepted() {
        for url in ["https://hooks.example.com/errand", "http://10.0.0.1:8080/x"] {
            assert!(problems_of(&spec(url, "hooks", "signing"), &catalog()).is_empty());
        }
    }

    #[test]
    fn bad_urls_are_refused_naming_the_field() {
        for (url, says) in [
            ("ftp://example.com/", "scheme must be https or http"),
            ("hooks.example.com", "is not a URL"),
            ("https://user:pw@example.com/", "carries user information"),
        ] {
            let problems = problems_of(&spec(url, "hooks", "signing"), &catalog());
            assert_eq!(problems.len(), 1, "{url}: {problems:?}");
            assert!(problems[0].starts_with("spec.notify.webhook.url: "));
            assert!(problems[0].contains(says), "{url}: {problems:?}");
            assert!(!problems[0].contains("pw"), "{problems:?}");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_WEBHOOK_URL_BYTES));
        assert!(problems_of(&spec(&long, "hooks", "signing"), &catalog())[0].contains("bytes"));
    }

    #[test]
    fn the_signing_secret_must_exist_with_its_key() {
        assert_eq!(
            problems_of(&spec("https://h.example/", "nope", "signing"), &catalog()),
            [
                "spec.notify.webhook.signingSecretRef.name: Secret \"nope\" not found in namespace \"team\""
            ]
        );
        assert_eq!(
            problems_of(&spec("https://h.example/", "hooks", "other"), &catalog()),
            ["spec.notify.webhook.signingSecretRef.key: Secret \"hooks\" has no key \"other\""]
        );
        assert_eq!(
            problems_of(&spec("https://h.example/", "Bad_Name", "k/ey"), &catalog()).len(),
            2
        );
    }

    #[test]
    fn a_url_from_a_secret_needs_the_secret_key_and_excludes_url() {
        let catalog = catalog().with_secret("team", "hook-url", &[("url", "https://h/x?token=t")]);
        let mut from = spec("https://unused.example/", "hooks", "signing");
        let webhook = from.notify.as_mut().unwrap().webhook.as_mut().unwrap();
        webhook.url = None;
        webhook.url_from = Some(SecretKeyRef {
            name: "hook-url".into(),
            key: "url".into(),
        });
        assert!(problems_of(&from, &catalog).is_empty());
        let webhook = from.notify.as_mut().unwrap().webhook.as_mut().unwrap();
        webhook.url_from.as_mut().unwrap().key = "nope".into();
        assert_eq!(
            problems_of(&from, &catalog),
            ["spec.notify.webhook.urlFrom.key: Secret \"hook-url\" has no key \"nope\""]
        );
        let webhook = from.notify.as_mut().unwrap().webhook.as_mut().unwrap();
        webhook.url = Some("https://h.example/".into());
        assert!(
            problems_of(&from, &catalog)
                .iter()
                .any(|p| p.contains("exactly one of url or urlFrom"))
        );
    }
}
