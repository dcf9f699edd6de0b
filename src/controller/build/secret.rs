//! The per-execution grants Secret: signed store URLs for exactly this execution's blobs and results.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use super::{ExecutionOwner, names};
use crate::store::grants::Grants;

/// Key of the grants document (JSON) in the Secret.
pub const GRANTS_KEY: &str = "grants.json";

/// The grants Secret of an execution: immutable and owned by it. Only errand's own process
/// reads it; the pod never receives store credentials.
pub fn grants_secret(execution: &ExecutionOwner, agent: &str, grants: &Grants) -> Secret {
    let document = serde_json::to_vec(grants).expect("grants always serialize");
    Secret {
        metadata: execution.child_meta(names::grants_secret_name(&execution.name), agent),
        immutable: Some(true),
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(
            GRANTS_KEY.to_owned(),
            ByteString(document),
        )])),
        ..Secret::default()
    }
}
