//! Small types shared by several resources: references to other objects and result entries.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A reference to another errand object. References stay inside the referring object's
/// namespace: a `namespace` other than the referrer's own is rejected.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    /// Name of the referenced object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the referenced object. Optional; when set it must equal the referrer's
    /// namespace, since a namespace is the tenant boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl Reference {
    /// A reference by name in the referrer's own namespace.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            namespace: None,
        }
    }
}

/// One saved result of an execution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResultEntry {
    /// Result name: `input_workdir`, `output_workdir`, `output_artifacts`, `run_result`,
    /// `run_error` or `manifest.json`.
    pub name: String,
    /// Size of the stored object in bytes.
    pub size: u64,
    /// Hex sha256 of the stored object.
    pub sha256: String,
}

/// Schema for a free-form JSON object whose unknown fields the API server keeps verbatim.
pub(crate) fn preserved_object(description: &str) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "description": description,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema extension that makes `conditions` a list-map keyed by `type`.
pub(crate) fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema =
        generator.subschema_for::<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema.insert(
        "description".into(),
        "Standard conditions, one per type.".into(),
    );
    schema
}
