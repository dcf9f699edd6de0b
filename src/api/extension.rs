//! The cluster-scoped `AgentExtension` resource: a trusted step an installed plugin registers, run after a successful agent run.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::agent::RuntimeContainer;

/// Seconds an extension may run when its AgentExtension sets no `timeoutSeconds`.
pub const DEFAULT_EXTENSION_TIMEOUT_SECONDS: i64 = 600;
/// The most result names one extension may declare.
pub const MAX_EXTENSION_RESULTS: usize = 16;

/// A trusted step that runs after an execution's agent succeeded, registered by an installed
/// plugin (like an IngressClass names a controller). An execution names it by
/// `spec.extension.kind`; its `config` is checked against `configSchema` at admission, and the
/// step reads the run's results and saves the results it declares.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "errand.dev",
    version = "v1alpha1",
    kind = "AgentExtension",
    doc = "A trusted step run after a successful agent run: the image and entrypoint errand starts it with, the config it takes and the results it saves.",
    shortname = "aext",
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.extensionKind"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image"),
    printcolumn(name = "Results", type_ = "string", json_path = ".spec.results"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AgentExtensionSpec {
    /// The extension kind executions name in `spec.extension.kind` (for example `analysis`).
    #[schemars(length(min = 1, max = 63))]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"))]
    pub extension_kind: String,
    /// The container image, entrypoint and arguments of the step. errand's runner wraps the
    /// command; locally the command runs on the machine and the image is not used.
    #[serde(flatten)]
    pub container: RuntimeContainer,
    /// A JSON Schema (the subset errand checks: `type`, `properties`, `required`,
    /// `additionalProperties`, `items`, `enum`, `minimum`, `maximum`, `minLength`,
    /// `maxLength`, `minItems`, `maxItems`, `description`, `title`, `default`) that an
    /// execution's `spec.extension.config` must meet; absent, any config is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "config_schema_schema")]
    pub config_schema: Option<Map<String, Value>>,
    /// The results the step saves beside the run's own, one per name (for example
    /// `analysis-report`): lowercase letters, digits, `-` and `_`, none of errand's own result
    /// names.
    #[schemars(schema_with = "results_schema")]
    pub results: Vec<String>,
    /// Seconds the step may run (default 600, at most 604800).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604800))]
    pub timeout_seconds: Option<i64>,
}

impl AgentExtensionSpec {
    /// Seconds the step may run.
    pub fn timeout_seconds(&self) -> i64 {
        self.timeout_seconds
            .unwrap_or(DEFAULT_EXTENSION_TIMEOUT_SECONDS)
    }
}

fn config_schema_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    super::common::preserved_object(
        "A JSON Schema (errand's subset) that an execution's spec.extension.config must meet.",
    )
}

fn results_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let reserved = super::contract::RESULT_NAMES
        .iter()
        .map(|name| format!("'{name}'"))
        .collect::<Vec<_>>()
        .join(", ");
    schemars::json_schema!({
        "type": "array",
        "description": "The results the step saves beside the run's own, one per name (for example `analysis-report`): lowercase letters, digits, `-` and `_`, none of errand's own result names.",
        "minItems": 1,
        "maxItems": MAX_EXTENSION_RESULTS,
        "x-kubernetes-list-type": "set",
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": 63,
            "pattern": super::contract::EXTENSION_RESULT_NAME_PATTERN,
        },
        "x-kubernetes-validations": [{
            "rule": format!("self.all(r, !(r in [{reserved}]))"),
            "message": format!("results must not use errand's own result names ({})", super::contract::RESULT_NAMES.join(", ")),
        }],
    })
}
