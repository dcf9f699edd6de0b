//! Grants: the signed store URLs an execution's pod gets instead of store credentials.
//!
//! Each execution may GET exactly its input blobs and PUT exactly its result keys. The URLs are
//! signed by a [`UrlSigner`]: the backend's presigned URLs for S3, GCS and Azure, or
//! [`HmacSigner`] for `file://` stores, whose URLs the controller's own HTTP endpoint serves.
//! The controller issues them; errand's own containers in the pod use them.

use std::collections::BTreeMap;

use jiff::Timestamp;
use ring::hmac;
use serde::{Deserialize, Serialize};

use crate::resolve::Snapshot;
use crate::store::keys::{self, ExecutionId, KeyError, ResultName};

/// What may be done with a signed URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Download an existing object.
    Get,
    /// Upload an object once.
    Put,
}

impl Access {
    fn as_str(self) -> &'static str {
        match self {
            Access::Get => "GET",
            Access::Put => "PUT",
        }
    }
}

/// Why a URL could not be signed or verified.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// The backend refused to sign.
    #[error("signing a URL for {key}: {message}")]
    Sign {
        /// The store key.
        key: String,
        /// The backend's reason.
        message: String,
    },
    /// A signed URL's signature does not match.
    #[error("the URL signature does not match")]
    BadSignature,
    /// A signed URL is past its expiry.
    #[error("the URL expired")]
    Expired,
    /// The URLs would have to outlive what the backend's signatures allow.
    #[error(
        "signed URLs of this store last 1 to {max} seconds, but the grants must last {needed} \
         seconds (start timeout + timeout + staging budget + termination grace)"
    )]
    Lifetime {
        /// Seconds from now until the grants expire.
        needed: i64,
        /// The longest the backend allows.
        max: i64,
    },
    /// A digest in the snapshot is not `sha256:<hex>`.
    #[error("fileset digest {0:?} is not sha256:<hex>")]
    BadDigest(String),
    /// The execution's ids do not form a store key.
    #[error(transparent)]
    Key(#[from] KeyError),
}

impl GrantError {
    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            GrantError::Sign { .. } => "sign",
            GrantError::BadSignature => "bad_signature",
            GrantError::Expired => "expired",
            GrantError::Lifetime { .. } => "lifetime",
            GrantError::BadDigest(_) => "bad_digest",
            GrantError::Key(_) => "bad_key",
        }
    }
}

/// How a signed PUT URL takes its body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum UploadMode {
    /// A chunked stream of unknown length, as the controller's blob endpoint accepts.
    #[default]
    Chunked,
    /// A body with a `Content-Length`, as presigned object-store PUTs require: the uploader
    /// spools the result to a file first.
    Sized,
}

/// Signs store URLs. Async because a backend may have to fetch its credentials first.
#[async_trait::async_trait]
pub trait UrlSigner: Send + Sync {
    /// A URL that allows `access` to `key` until `expires`.
    async fn sign(
        &self,
        access: Access,
        key: &str,
        expires: Timestamp,
    ) -> Result<String, GrantError>;

    /// How this signer's PUT URLs take their bodies.
    fn upload_mode(&self) -> UploadMode;

    /// The longest a URL it signs may last, in seconds (`None`: no limit). A run whose grants
    /// must last longer is refused before anything is signed
    /// ([`RunLimits`](crate::resolve::RunLimits)).
    fn max_lifetime_seconds(&self) -> Option<i64>;

    /// Headers every PUT through this signer's URLs must carry (none by default).
    fn put_headers(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
}

/// The signed URLs of one execution, as mounted into its pod (`grants.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Grants {
    /// The execution the results belong to, as its run records name it.
    pub execution: ExecutionId,
    /// GET URLs of the input blobs, by store key.
    pub inputs: BTreeMap<String, String>,
    /// PUT URLs of the results, by result name.
    pub results: BTreeMap<String, String>,
    /// How the PUT URLs take their bodies.
    #[serde(default)]
    pub uploads: UploadMode,
    /// Headers to send with every PUT (a presigned backend's write-once condition, for example).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub put_headers: BTreeMap<String, String>,
    /// When the URLs stop working.
    pub expires_at: Timestamp,
    /// The grants of the execution's extension step, when it has one: GET URLs of the run's
    /// results (in `inputs`, by store key) and PUT URLs of exactly its declared results and the
    /// manifest (in `results`, by name). `errand stage` keeps them apart from the agent's, in a
    /// volume only the extension's container mounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<Box<Grants>>,
    /// Where `run-agent` reports the run's end once its results are saved, so the execution
    /// ends without waiting for the kubelet (`crate::runner::end_report`); `None` when the
    /// controller has no signing key or an extension's step saves the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportGrant>,
}

/// The controller's run-ended endpoint and the run's bearer token for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportGrant {
    /// The endpoint's URL, as pods reach the controller.
    pub url: String,
    /// The run's token (`crate::resolve::run_tokens::Purpose::RunEnded`).
    pub token: String,
}

/// The run's results an extension's step reads: everything the agent's run saves on success
/// but the manifest, which the step itself writes last.
pub const EXTENSION_READS: [ResultName; 4] = [
    ResultName::InputWorkdir,
    ResultName::OutputWorkdir,
    ResultName::OutputArtifacts,
    ResultName::RunResult,
];

/// Signs GET URLs for every Fileset blob of `snapshot` and PUT URLs for every result key of
/// the execution, all valid until `expires`.
pub async fn issue_grants(
    signer: &dyn UrlSigner,
    execution: &ExecutionId,
    snapshot: &Snapshot,
    expires: Timestamp,
) -> Result<Grants, GrantError> {
    let contents = snapshot
        .workdir
        .base
        .iter()
        .chain(snapshot.workdir.mounts.iter().map(|m| &m.content));
    let mut inputs = BTreeMap::new();
    for content in contents {
        let key = fileset_key(&execution.namespace, &content.digest)?;
        let url = signer.sign(Access::Get, &key, expires).await?;
        inputs.insert(key, url);
    }
    let mut results = BTreeMap::new();
    for name in ResultName::ALL {
        let key = keys::result(execution, name)?;
        results.insert(
            name.as_str().to_owned(),
            signer.sign(Access::Put, &key, expires).await?,
        );
    }
    let extension = match &snapshot.extension {
        Some(extension) => Some(Box::new(
            extension_grants(signer, execution, &extension.results, expires).await?,
        )),
        None => None,
    };
    Ok(Grants {
        extension,
        ..signed_grants(signer, execution, inputs, results, expires)
    })
}

/// The grants of `execution` with these signed URLs, as `signer` wants its PUTs sent.
fn signed_grants(
    signer: &dyn UrlSigner,
    execution: &ExecutionId,
    inputs: BTreeMap<String, String>,
    results: BTreeMap<String, String>,
    expires: Timestamp,
) -> Grants {
    Grants {
        execution: execution.clone(),
        inputs,
        results,
        uploads: signer.upload_mode(),
        put_headers: signer.put_headers(),
        expires_at: expires,
        extension: None,
        report: None,
    }
}

/// The extension step's grants: GET for the run's results it reads ([`EXTENSION_READS`]), PUT
/// for exactly its `declared` results and the manifest.
async fn extension_grants(
    signer: &dyn UrlSigner,
    execution: &ExecutionId,
    declared: &[String],
    expires: Timestamp,
) -> Result<Grants, GrantError> {
    let mut inputs = BTreeMap::new();
    for name in EXTENSION_READS {
        let key = keys::result(execution, name)?;
        let url = signer.sign(Access::Get, &key, expires).await?;
        inputs.insert(key, url);
    }
    let mut results = BTreeMap::new();
    for name in declared {
        let key = keys::extension_result(execution, name)?;
        results.insert(name.clone(), signer.sign(Access::Put, &key, expires).await?);
    }
    let manifest = keys::result(execution, ResultName::Manifest)?;
    results.insert(
        ResultName::Manifest.as_str().to_owned(),
        signer.sign(Access::Put, &manifest, expires).await?,
    );
    Ok(signed_grants(signer, execution, inputs, results, expires))
}

/// The store key of a Fileset's content, from its `sha256:<hex>` digest.
fn fileset_key(namespace: &str, digest: &str) -> Result<String, GrantError> {
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| GrantError::BadDigest(digest.to_owned()))?;
    Ok(keys::fileset(namespace, hex)?)
}

/// Signs URLs of the controller's own blob endpoint with HMAC-SHA256, for `file://` stores.
///
/// A URL is `<base>/blobs/<key>?expires=<unix seconds>&signature=<hex>`; the signature covers
/// the method, the key and the expiry, so a GET URL cannot be used to PUT and vice versa.
pub struct HmacSigner {
    base_url: String,
    key: hmac::Key,
}

impl HmacSigner {
    /// A signer for the endpoint at `base_url` (for example the controller's Service URL)
    /// with the shared `secret`.
    pub fn new(base_url: &str, secret: &[u8]) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        }
    }

    fn message(access: Access, key: &str, expires: i64) -> String {
        format!("{}\n{key}\n{expires}", access.as_str())
    }

    /// Checks a request to the blob endpoint: the signature must match and `now` must be
    /// before the expiry.
    pub fn verify(
        &self,
        access: Access,
        key: &str,
        expires: i64,
        signature_hex: &str,
        now: Timestamp,
    ) -> Result<(), GrantError> {
        let signature = hex::decode(signature_hex).map_err(|_| GrantError::BadSignature)?;
        hmac::verify(
            &self.key,
            Self::message(access, key, expires).as_bytes(),
            &signature,
        )
        .map_err(|_| GrantError::BadSignature)?;
        if now.as_second() >= expires {
            return Err(GrantError::Expired);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl UrlSigner for HmacSigner {
    async fn sign(
        &self,
        access: Access,
        key: &str,
        expires: Timestamp,
    ) -> Result<String, GrantError> {
        let expires = expires.as_second();
        let tag = hmac::sign(&self.key, Self::message(access, key, expires).as_bytes());
        Ok(format!(
            "{}/blobs/{key}?expires={expires}&signature={}",
            self.base_url,
            hex::encode(tag.as_ref())
        ))
    }

    fn upload_mode(&self) -> UploadMode {
        UploadMode::Chunked
    }

    /// The controller verifies its own signatures, so any expiry works.
    fn max_lifetime_seconds(&self) -> Option<i64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::UID;

    const NOW: i64 = 1_800_000_000;

    fn signer() -> HmacSigner {
        HmacSigner::new("http://errand.errand-system.svc:8080/", b"test-secret")
    }

    fn parts(url: &str) -> (String, i64, String) {
        let rest = url
            .strip_prefix("http://errand.errand-system.svc:8080/blobs/")
            .unwrap();
        let (key, query) = rest.split_once('?').unwrap();
        let (expires, signature) = query.split_once("&signature=").unwrap();
        let expires = expires.strip_prefix("expires=").unwrap().parse().unwrap();
        (key.to_owned(), expires, signature.to_owned())
    }

    #[tokio::test]
    async fn a_signed_url_verifies_for_its_method_and_key_until_it_expires() {
        let expires = Timestamp::from_second(NOW + 60).unwrap();
        let url = signer()
            .sign(Access::Put, "results/ns/calc/u1/run_result", expires)
            .await
            .unwrap();
        let (key, exp, sig) = parts(&url);
        let now = Timestamp::from_second(NOW).unwrap();
        assert_eq!(key, "results/ns/calc/u1/run_result");
        assert_eq!(signer().verify(Access::Put, &key, exp, &sig, now), Ok(()));
        assert_eq!(
            signer().verify(Access::Get, &key, exp, &sig, now),
            Err(GrantError::BadSignature),
            "a PUT URL does not allow GET"
        );
        assert_eq!(
            signer().verify(Access::Put, "results/ns/calc/u1/run_error", exp, &sig, now),
            Err(GrantError::BadSignature),
            "the URL allows exactly its key"
        );
        assert_eq!(
            signer().verify(Access::Put, &key, exp + 3600, &sig, now),
            Err(GrantError::BadSignature),
            "the expiry cannot be extended"
        );
        let later = Timestamp::from_second(NOW + 60).unwrap();
        assert_eq!(
            signer().verify(Access::Put, &key, exp, &sig, later),
            Err(GrantError::Expired)
        );
        let other = HmacSigner::new("http://x", b"other-secret");
        assert_eq!(
            other.verify(Access::Put, &key, exp, &sig, now),
            Err(GrantError::BadSignature)
        );
    }

    #[tokio::test]
    async fn grants_cover_exactly_the_inputs_and_results_of_the_execution() {
        let expires = Timestamp::from_second(NOW).unwrap();
        let grants = issue_grants(&signer(), &ExecutionId::test(), &Snapshot::test(), expires)
            .await
            .unwrap();
        let keys: Vec<&str> = grants.inputs.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                format!("filesets/team-a/{}.tar.gz", "a".repeat(64)),
                format!("filesets/team-a/{}.tar.gz", "b".repeat(64)),
            ]
        );
        assert_eq!(grants.results.len(), ResultName::ALL.len());
        for (name, url) in &grants.results {
            let (key, _, _) = parts(url);
            assert_eq!(key, format!("results/team-a/calc/{UID}/{name}"));
        }
        assert_eq!(grants.expires_at, expires);
        assert_eq!(grants.execution.uid, UID);
        assert_eq!(grants.uploads, UploadMode::Chunked);
        assert!(grants.put_headers.is_empty());
        assert!(
            grants.extension.is_none(),
            "no extension, no extension grants"
        );
    }

    #[tokio::test]
    async fn an_extension_gets_reads_of_the_runs_results_and_writes_of_exactly_its_own() {
        let expires = Timestamp::from_second(NOW).unwrap();
        let mut snapshot = Snapshot::test();
        snapshot.extension = Some(crate::resolve::ResolvedExtension {
            kind: "analysis".into(),
            name: "analysis".into(),
            config: Default::default(),
            container: Default::default(),
            results: vec!["analysis-report".into()],
            timeout_seconds: 60,
        });
        let grants = issue_grants(&signer(), &ExecutionId::test(), &snapshot, expires)
            .await
            .unwrap();
        let step = grants.extension.as_deref().expect("the extension's grants");
        let prefix = format!("results/team-a/calc/{UID}/");
        let reads: Vec<String> = step
            .inputs
            .iter()
            .map(|(key, url)| {
                let (signed, _, signature) = parts(url);
                assert_eq!(&signed, key);
                let now = Timestamp::from_second(NOW - 1).unwrap();
                assert_eq!(
                    signer().verify(Access::Get, key, NOW, &signature, now),
                    Ok(()),
                    "{key} is readable"
                );
                key.strip_prefix(&prefix).unwrap().to_owned()
            })
            .collect();
        assert_eq!(
            reads,
            [
                "input_workdir",
                "output_artifacts",
                "output_workdir",
                "run_result"
            ]
        );
        let writes: Vec<(&str, String)> = step
            .results
            .iter()
            .map(|(name, url)| (name.as_str(), parts(url).0))
            .collect();
        assert_eq!(
            writes,
            [
                ("analysis-report", format!("{prefix}analysis-report")),
                ("manifest.json", format!("{prefix}manifest.json")),
            ]
        );
        assert!(step.extension.is_none());
        assert!(
            !grants.results.contains_key("analysis-report"),
            "the agent's runner cannot write the extension's results"
        );
    }

    #[test]
    fn a_malformed_digest_is_refused() {
        assert_eq!(
            fileset_key("ns", "md5:abc"),
            Err(GrantError::BadDigest("md5:abc".into()))
        );
    }
}
