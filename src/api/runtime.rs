//! The cluster-scoped `AgentRuntime` resource: how the platform runs agents of one harness kind.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::agent::RuntimeContainer;
use super::environment::Compute;

/// How agents of one harness kind run, registered by the platform operator (like a
/// RuntimeClass or an IngressClass). An Agent without `runtime` runs with the AgentRuntime
/// serving its config's harness kind (`default_harness` → `harnesses.<h>.kind`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "errand.dev",
    version = "v1alpha1",
    kind = "AgentRuntime",
    doc = "How agents of one harness kind run: the image and entrypoint errand starts them with.",
    shortname = "art",
    printcolumn(name = "Harness", type_ = "string", json_path = ".spec.harnessKind"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AgentRuntimeSpec {
    /// The harness kind this runtime serves: the `harnesses.<h>.kind` an agent config's
    /// `default_harness` names (for example `deepagents`).
    #[schemars(length(min = 1, max = 63))]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"))]
    pub harness_kind: String,
    /// The container image, entrypoint and arguments agents of this kind run with. Locally the
    /// command runs on the machine and the image is not used.
    #[serde(flatten)]
    pub container: RuntimeContainer,
    /// The `config_format`s this runtime accepts (`agents-spec-v1`, `nemo-agents-spec-v1`);
    /// empty accepts every format errand accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "config_formats_schema")]
    pub config_formats: Vec<String>,
    /// Compute an execution gets when its environment sets none of its own (the
    /// environment wins field by field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<Compute>,
}

fn config_formats_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "description": "The `config_format`s this runtime accepts (`agents-spec-v1`, `nemo-agents-spec-v1`); empty accepts every format errand accepts.",
        "items": {"type": "string", "enum": super::contract::ACCEPTED_CONFIG_FORMATS},
    })
}
