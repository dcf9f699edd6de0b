//! The `Agent` resource: a container runtime plus the agent definition document.

use std::borrow::Cow;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// An agent that errand can run: how to start it (`runtime`) and what it is (`config`).
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "errand.dev",
    version = "v1alpha1",
    kind = "Agent",
    doc = "An agent errand can run: its container runtime and its agent definition document.",
    namespaced,
    status = "AgentStatus",
    shortname = "agt",
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.runtime.image"),
    printcolumn(
        name = "Format",
        type_ = "string",
        json_path = ".spec.config.config_format"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("Agent spec is immutable; delete and re-create the Agent to change it"))]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// How to start the agent: its container image and entrypoint. Optional: without it,
    /// errand runs the agent with the cluster's AgentRuntime serving the config's harness kind
    /// (`default_harness` → `harnesses.<h>.kind`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeContainer>,
    /// The agent definition document (`config_format`, `name`, `instructions`, `models`,
    /// `mcp.servers`, `tools`, `skills`, `env`, `provider`, `telemetry`, ...). Unknown fields
    /// are kept verbatim.
    pub config: AgentConfig,
}

/// The container that runs the agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeContainer {
    /// Container image of the agent.
    #[schemars(length(min = 1))]
    pub image: String,
    /// Entrypoint of the agent. errand starts it through its own runner, so the image's
    /// entrypoint is not used and the command must be given.
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
    /// Arguments appended to `command`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Image pull policy of the agent container: `Always`, `IfNotPresent` or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(Always|IfNotPresent|Never)$"))]
    pub image_pull_policy: Option<String>,
    /// Narrow security context overrides. Pods always meet the `restricted` Pod Security
    /// Standard; only the identity of the non-root user can be chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<RuntimeSecurity>,
}

/// The security settings an Agent may choose; everything else is fixed by errand.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSecurity {
    /// Non-root user id the agent runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub run_as_user: Option<i64>,
    /// Group id the agent runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub run_as_group: Option<i64>,
    /// Group that owns the pod's volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub fs_group: Option<i64>,
}

/// Observed state of an Agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    /// Standard conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::conditions_schema")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// The agent definition document, kept as JSON so unknown fields survive verbatim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentConfig(pub Map<String, Value>);

impl AgentConfig {
    /// The document's `config_format`, if it is a string.
    pub fn format(&self) -> Option<&str> {
        self.0.get("config_format").and_then(Value::as_str)
    }

    /// The document's `name`, if it is a string.
    pub fn name(&self) -> Option<&str> {
        self.0.get("name").and_then(Value::as_str)
    }
}

impl schemars::JsonSchema for AgentConfig {
    fn schema_name() -> Cow<'static, str> {
        "AgentConfig".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let any = |description: &str| serde_json::json!({"description": description, "x-kubernetes-preserve-unknown-fields": true});
        let text =
            |description: &str| serde_json::json!({"type": "string", "description": description});
        schemars::json_schema!({
            "type": "object",
            "description": "The agent definition document. Unknown fields are kept verbatim.",
            "x-kubernetes-preserve-unknown-fields": true,
            "required": ["config_format"],
            "properties": {
                "config_format": {
                    "type": "string",
                    "description": "Format of this document: `agents-spec-v1`, or `nemo-agents-spec-v1` (accepted as it is).",
                    "enum": super::contract::ACCEPTED_CONFIG_FORMATS,
                },
                "name": text("Name of the agent."),
                "description": text("What the agent does."),
                "instructions": any("System instructions given to the agent: text, or an object such as `system.content`."),
                "default_harness": text("Harness used when the execution names none."),
                "harnesses": any("Harnesses the agent can run under."),
                "models": any("Models by alias (or a list), each with `provider`, `model`, `api_key_env`, `base_url`."),
                "mcp": any("MCP settings; `mcp.servers` holds the MCP servers by name."),
                "tools": any("Tools the agent may use."),
                "skills": any("Skills the agent has."),
                "env": {
                    "type": "object",
                    "description": "Plain environment variables for the agent process.",
                    "additionalProperties": {"type": "string"},
                },
                "provider": text("Default model provider."),
                "telemetry": any("Telemetry settings."),
            },
        })
    }
}
