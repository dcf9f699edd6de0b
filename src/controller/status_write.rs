//! Status writes made only over the object they were decided from: the patch carries the read's `resourceVersion`, so a decision taken on a stale cached read is refused (Conflict) instead of overwriting a newer status.

use std::fmt::Debug;

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::debug;

use crate::controller::config::FIELD_MANAGER;
use crate::controller::error::{Error, Result};

/// What became of a status write.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    /// The status was written, or already was the current one.
    Done,
    /// The object changed since it was read (the cache lags behind the API server): nothing
    /// was written; the newer object's watch event reconciles it again.
    Stale,
}

/// Writes `status` on `object` with server-side apply, unless it equals `current`, on
/// condition that the object is still at the `resourceVersion` it was read at.
pub async fn write_status<K, S>(
    api: &Api<K>,
    object: &K,
    current: Option<&S>,
    status: &S,
) -> Result<Written>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    S: Serialize + PartialEq,
{
    if current == Some(status) {
        return Ok(Written::Done);
    }
    let name = object.name_any();
    let kind = K::kind(&());
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": kind,
        "metadata": {"resourceVersion": object.resource_version()},
        "status": status,
    });
    match api
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => Ok(Written::Done),
        Err(kube::Error::Api(refusal)) if refusal.code == 409 => {
            debug!(%kind, %name, "not writing a status decided on a stale read: {}", refusal.message);
            Ok(Written::Stale)
        }
        Err(e) => Err(Error::kube(format!("writing the status of {kind} {name}"))(
            e,
        )),
    }
}
