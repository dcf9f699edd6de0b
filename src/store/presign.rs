//! Grants as the backend's own presigned URLs, for stores that sign natively (S3, GCS, Azure).
//!
//! The URLs address the same objects [`Store`](super::Store) reads and writes: a key from
//! [`keys`](super::keys) under the store URL's path prefix. Presigned PUTs need a
//! `Content-Length`, so their grants say [`UploadMode::Sized`].
//!
//! Write-once: a presigned PUT URL by itself allows overwriting its object until it expires.
//! errand's uploader sends `If-None-Match: *` with every PUT, which S3 and Azure honour with
//! 412 when the object exists. That header is not part of the signature (object_store signs
//! only the host), so it binds errand's own uploader, not whoever else holds the URL; the
//! grants are mounted only into errand's containers. GCS's XML API takes its create-only
//! condition as an `x-goog-` header, which must be signed, so GCS PUTs carry none and a second
//! PUT there replaces the object.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use object_store::ObjectStoreScheme;
use object_store::path::Path;
use object_store::signer::Signer;

use super::grants::{Access, GrantError, UploadMode, UrlSigner};

/// The longest a presigned URL may last: AWS SigV4 and GCS V4 signatures refuse more than a
/// week. Azure's SAS has no such bound, but one limit for all keeps grants alike.
pub const MAX_LIFETIME_SECONDS: i64 = 7 * 24 * 3600;

/// Signs grants with a native object-store signer.
#[derive(Debug, Clone)]
pub struct PresignedSigner {
    signer: Arc<dyn Signer>,
    prefix: Path,
    put_headers: BTreeMap<String, String>,
}

impl PresignedSigner {
    /// A signer for the objects under `prefix` (the store URL's path) of the bucket or
    /// container `signer` was built for.
    pub(crate) fn new(signer: Arc<dyn Signer>, scheme: ObjectStoreScheme, prefix: Path) -> Self {
        Self {
            signer,
            prefix,
            put_headers: put_headers(scheme),
        }
    }
}

/// Headers a presigned PUT needs on `scheme`'s backend.
fn put_headers(scheme: ObjectStoreScheme) -> BTreeMap<String, String> {
    let header = |name: &str, value: &str| (name.to_owned(), value.to_owned());
    match scheme {
        ObjectStoreScheme::AmazonS3 => BTreeMap::from([header("if-none-match", "*")]),
        // Azure's Put Blob requires the blob type.
        ObjectStoreScheme::MicrosoftAzure => BTreeMap::from([
            header("if-none-match", "*"),
            header("x-ms-blob-type", "BlockBlob"),
        ]),
        _ => BTreeMap::new(),
    }
}

/// How long a URL signed at `now` must last to work until `expires`, within what backends
/// accept (a URL that is already expired cannot be signed).
fn lifetime(expires: Timestamp, now: Timestamp) -> Result<Duration, GrantError> {
    let needed = expires.as_second() - now.as_second();
    if !(1..=MAX_LIFETIME_SECONDS).contains(&needed) {
        return Err(GrantError::Lifetime {
            needed,
            max: MAX_LIFETIME_SECONDS,
        });
    }
    Ok(Duration::from_secs(needed.unsigned_abs()))
}

/// The object path of `key` under `prefix`, as `PrefixStore` (which `Store` wraps cloud
/// stores in) addresses it.
fn object_path(prefix: &Path, key: &str) -> Result<Path, GrantError> {
    let key_path = Path::parse(key).map_err(|e| GrantError::Sign {
        key: key.to_owned(),
        message: e.to_string(),
    })?;
    Ok(prefix.parts().chain(key_path.parts()).collect())
}

#[async_trait::async_trait]
impl UrlSigner for PresignedSigner {
    async fn sign(
        &self,
        access: Access,
        key: &str,
        expires: Timestamp,
    ) -> Result<String, GrantError> {
        let expires_in = lifetime(expires, Timestamp::now())?;
        let path = object_path(&self.prefix, key)?;
        let method = match access {
            Access::Get => reqwest::Method::GET,
            Access::Put => reqwest::Method::PUT,
        };
        let url = self
            .signer
            .signed_url(method, &path, expires_in)
            .await
            .map_err(|e| GrantError::Sign {
                key: key.to_owned(),
                message: e.to_string(),
            })?;
        Ok(url.into())
    }

    fn upload_mode(&self) -> UploadMode {
        UploadMode::Sized
    }

    fn max_lifetime_seconds(&self) -> Option<i64> {
        Some(MAX_LIFETIME_SECONDS)
    }

    fn put_headers(&self) -> BTreeMap<String, String> {
        self.put_headers.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn lifetimes_between_a_second_and_a_week_are_signed() {
        assert_eq!(lifetime(at(NOW + 90), at(NOW)), Ok(Duration::from_secs(90)));
        assert_eq!(
            lifetime(at(NOW + MAX_LIFETIME_SECONDS), at(NOW)),
            Ok(Duration::from_secs(604_800))
        );
        for needed in [0, -5, MAX_LIFETIME_SECONDS + 1] {
            assert_eq!(
                lifetime(at(NOW + needed), at(NOW)),
                Err(GrantError::Lifetime {
                    needed,
                    max: MAX_LIFETIME_SECONDS
                })
            );
        }
    }

    #[test]
    fn keys_go_under_the_store_prefix() {
        let key = "results/team-a/calc/uid-1/manifest.json";
        assert_eq!(
            object_path(&Path::from("some/prefix"), key)
                .unwrap()
                .as_ref(),
            "some/prefix/results/team-a/calc/uid-1/manifest.json"
        );
        assert_eq!(object_path(&Path::default(), key).unwrap().as_ref(), key);
        assert!(matches!(
            object_path(&Path::default(), "results/../x"),
            Err(GrantError::Sign { .. })
        ));
    }

    #[test]
    fn puts_carry_the_write_once_condition_where_the_backend_honours_it_unsigned() {
        assert_eq!(
            put_headers(ObjectStoreScheme::AmazonS3),
            BTreeMap::from([("if-none-match".to_owned(), "*".to_owned())])
        );
        let azure = put_headers(ObjectStoreScheme::MicrosoftAzure);
        assert_eq!(azure["x-ms-blob-type"], "BlockBlob");
        assert_eq!(azure["if-none-match"], "*");
        assert!(put_headers(ObjectStoreScheme::GoogleCloudStorage).is_empty());
    }
}
