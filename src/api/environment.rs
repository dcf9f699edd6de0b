//! The `AgentEnvironment` resource: what a workspace adds to an agent (overlay) and where it runs (compute).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::core::{Message, Rule};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::contract;

/// The only resource names an environment may request.
pub const ALLOWED_COMPUTE_KEYS: [&str; 3] = ["cpu", "memory", "nvidia.com/gpu"];
/// The resources whose request may be below their limit; GPUs may not (see [`GPU`]).
pub const OVERCOMMITTABLE_COMPUTE_KEYS: [&str; 2] = ["cpu", "memory"];
/// The extended resource of NVIDIA GPUs: its request, when given, must equal its limit.
pub const GPU: &str = "nvidia.com/gpu";
/// The toleration operators Kubernetes accepts (empty means `Equal`).
pub const TOLERATION_OPERATORS: [&str; 2] = ["Equal", "Exists"];
/// The taint effects a toleration may name (empty means all).
pub const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
/// The most tolerations an environment may list.
pub const MAX_TOLERATIONS: usize = 32;

/// Environment settings merged into an agent's config, and the compute an execution gets.
/// Executions keep the snapshot they were admitted with, so edits here never change a
/// submitted execution.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "errand.dev",
    version = "v1alpha1",
    kind = "AgentEnvironment",
    doc = "Settings a workspace merges into agents, and the compute its executions get.",
    namespaced,
    status = "AgentEnvironmentStatus",
    shortname = "agenv",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct AgentEnvironmentSpec {
    /// Settings merged into the agent config. The environment wins; maps merge deeply and
    /// lists are replaced.
    #[serde(default)]
    pub overlay: EnvironmentOverlay,
    /// Resources and placement of the execution's pod.
    #[serde(default)]
    pub compute: Compute,
    /// Where the execution's pod may connect when the controller denies egress by default
    /// (the chart's `executionEgress.policy: deny`), besides DNS and errand's own endpoints.
    #[serde(default, skip_serializing_if = "Egress::is_empty")]
    pub egress: Egress,
    /// How the agent holds its models' API keys. `Proxied`: a model whose `api_key_env` is
    /// bound to a Secret gets a `base_url` on errand's egress proxy and a placeholder token
    /// that is worthless outside this run; the proxy adds the real key. `Direct` (the default):
    /// the variable holds the Secret's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_credentials: Option<ModelCredentials>,
}

/// How the agent holds its models' API keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ModelCredentials {
    /// The API key's variable holds the Secret's value.
    #[default]
    Direct,
    /// The agent gets a placeholder token and a `base_url` on errand's egress proxy, which
    /// forwards its OpenAI-compatible calls over TLS with the real key added.
    Proxied,
}

/// The most egress rules an environment may list.
pub const MAX_EGRESS_RULES: usize = 32;
/// The most ports one egress rule may list.
pub const MAX_EGRESS_PORTS: usize = 16;

/// The destinations an execution's pod may reach.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Egress {
    /// Address ranges and TCP ports the pod may connect to (at most 32). Ranges the controller
    /// denies (link-local, the cluster's Service and pod CIDRs, the API server, the operator's
    /// `outbound.deny`) are cut out of them; a range inside one is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_EGRESS_RULES))]
    pub allow: Vec<EgressRule>,
    /// Host names the pod may reach through errand's egress proxy (at most 32), which the
    /// agent finds in `HTTPS_PROXY` and `HTTP_PROXY`. Each resolved address is held to the
    /// same denied ranges as `allow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_EGRESS_RULES))]
    pub hosts: Vec<EgressHost>,
}

impl Egress {
    /// Whether it allows nothing.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.hosts.is_empty()
    }
}

/// One host name and its ports, reached through errand's egress proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressHost {
    /// A lowercase DNS name with at least one dot (`api.example.com`), or `*.` and one (for
    /// every name below it, not the name itself). An address belongs in `allow[].cidr`.
    #[schemars(length(max = 253))]
    pub host: String,
    /// TCP ports, 1-65535 (at most 16); none means 443 and 80.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_EGRESS_PORTS))]
    pub ports: Vec<EgressPort>,
}

/// The ports of a host rule that lists none.
pub const DEFAULT_HOST_PORTS: [EgressPort; 2] = [443, 80];

impl EgressHost {
    /// The ports this rule allows.
    pub fn allowed_ports(&self) -> &[EgressPort] {
        if self.ports.is_empty() {
            &DEFAULT_HOST_PORTS
        } else {
            &self.ports
        }
    }
}

/// One range of addresses and its ports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressRule {
    /// An IPv4 or IPv6 range in CIDR notation (`192.0.2.0/24`, or `192.0.2.7/32` for one address).
    #[schemars(length(max = 49))]
    pub cidr: String,
    /// TCP ports, 1-65535 (at most 16); none means every port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_EGRESS_PORTS))]
    pub ports: Vec<EgressPort>,
}

/// A TCP port.
pub type EgressPort = u16;

/// The most variables (or secret bindings) one overlay sets. The bound keeps the API server's
/// estimated cost of the reserved-name rule, whose message names the key, within its budget.
pub const MAX_OVERLAY_VARIABLES: usize = 1024;

/// What an environment merges into the agent config.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentOverlay {
    /// Plain environment variables, merged into the config's `env` (at most 1024).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_OVERLAY_VARIABLES))]
    #[x_kube(validation = reserved_env_rule())]
    pub env: BTreeMap<String, String>,
    /// Secret bindings `ENV_NAME: secret[#key]`: the agent gets the Secret's key as the
    /// environment variable. `key` defaults to `ENV_NAME`. Only references are stored; the
    /// value is read by the kubelet when the pod starts. At most 1024.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_OVERLAY_VARIABLES))]
    #[x_kube(validation = reserved_env_rule())]
    pub secrets: BTreeMap<String, String>,
    /// MCP settings merged into the config's `mcp` (for example `servers.<name>.url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "mcp_schema")]
    pub mcp: Option<Map<String, Value>>,
    /// Default model provider, replacing the config's `provider`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Model overrides merged into the config's `models`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "models_schema")]
    pub models: Option<Value>,
    /// Any other agent-config fields to merge in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "config_schema")]
    pub config: Option<Map<String, Value>>,
}

/// The CEL rule that keeps the runner's own environment variables out of an overlay, so the
/// API server refuses them even when the webhook is not running.
fn reserved_env_rule() -> Rule {
    let names = contract::RESERVED_ENV_NAMES
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let prefix = contract::RESERVED_ENV_PREFIX;
    let reserved = format!("k.startsWith('{prefix}') || k in [{names}]");
    Rule::new(format!("self.all(k, !({reserved}))")).message(Message::Expression(format!(
        "'\"' + self.filter(k, {reserved})[0] + \"\\\" is reserved: {prefix}* and {} are reserved for errand's runner\"",
        contract::RESERVED_ENV_NAMES.join(", ")
    )))
}

fn mcp_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    super::common::preserved_object("MCP settings merged into the config's `mcp`.")
}

fn models_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Model overrides merged into the config's `models`.",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn config_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    super::common::preserved_object("Other agent-config fields merged into the config.")
}

/// Resources, placement and identity of an execution's pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Compute {
    /// Resource limits and requests; only `cpu`, `memory` and `nvidia.com/gpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ComputeResources>,
    /// Node labels the pod must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the pod tolerates (at most 32): operator `Equal` (the default) or `Exists`,
    /// effect `NoSchedule`, `PreferNoSchedule`, `NoExecute` or empty (all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_TOLERATIONS))]
    #[x_kube(validation = toleration_operator_rule())]
    #[x_kube(validation = toleration_effect_rule())]
    pub tolerations: Vec<Toleration>,
    /// PriorityClass of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// RuntimeClass of the pod (for example a GPU or sandboxed runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// Secrets of type `kubernetes.io/dockerconfigjson`, by name in the execution's namespace,
    /// the kubelet pulls the agent's image with; added to the controller's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub image_pull_secrets: Vec<String>,
    /// ServiceAccount the pod runs as, instead of the controller's default. Its token is never
    /// mounted: it gives the pod its image pull secrets and identity, not API access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
}

/// Limits and requests by resource name. A request may not exceed its limit, and a GPU
/// request needs a limit equal to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = requests_within_limits_rule())]
#[x_kube(validation = gpu_request_equals_limit_rule())]
pub struct ComputeResources {
    /// Upper bounds: `cpu`, `memory`, `nvidia.com/gpu`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 3))]
    #[x_kube(validation = allowed_keys_rule())]
    #[x_kube(validation = quantities_rule())]
    pub limits: BTreeMap<String, Quantity>,
    /// Guaranteed amounts: `cpu`, `memory`, `nvidia.com/gpu`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 3))]
    #[x_kube(validation = allowed_keys_rule())]
    #[x_kube(validation = quantities_rule())]
    pub requests: BTreeMap<String, Quantity>,
}

/// CEL for quantity `key` of map `field` (`requests` or `limits`); quantities may be
/// integers or strings, so both go through `string()`.
fn cel_quantity(field: &str, key: &str) -> (String, String) {
    let value = format!("string(self.{field}[{key}])");
    (format!("isQuantity({value})"), format!("quantity({value})"))
}

/// The CEL rule that keeps every request at or below its limit, so the API server refuses the
/// environment (or inline environment) rather than every Job built from it.
fn requests_within_limits_rule() -> Rule {
    let (request_ok, request) = cel_quantity("requests", "k");
    let (limit_ok, limit) = cel_quantity("limits", "k");
    let keys = OVERCOMMITTABLE_COMPUTE_KEYS
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(", ");
    Rule::new(format!(
        "!has(self.requests) || !has(self.limits) || [{keys}].all(k, !(k in self.requests) || \
         !(k in self.limits) || !{request_ok} || !{limit_ok} || {request}.compareTo({limit}) <= 0)"
    ))
    .message(
        format!(
            "requests must not exceed limits ({})",
            OVERCOMMITTABLE_COMPUTE_KEYS.join(", ")
        )
        .as_str(),
    )
    .field_path(".requests")
}

/// The CEL rule that gives every GPU request an equal limit: Kubernetes cannot overcommit
/// extended resources and refuses a pod whose GPU request differs from its limit.
fn gpu_request_equals_limit_rule() -> Rule {
    let key = format!("'{GPU}'");
    let (request_ok, request) = cel_quantity("requests", &key);
    let (limit_ok, limit) = cel_quantity("limits", &key);
    Rule::new(format!(
        "!has(self.requests) || !({key} in self.requests) || (has(self.limits) && {key} in self.limits \
         && (!{request_ok} || !{limit_ok} || {request}.compareTo({limit}) == 0))"
    ))
    .message(format!("requests[{GPU}] needs an equal limits[{GPU}]: GPUs cannot be overcommitted").as_str())
    .field_path(".requests")
}

fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("'{v}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn toleration_operator_rule() -> Rule {
    Rule::new(format!(
        "self.all(t, !has(t.operator) || t.operator in ['', {}])",
        quoted(&TOLERATION_OPERATORS)
    ))
    .message(
        format!(
            "a toleration's operator must be one of {}",
            TOLERATION_OPERATORS.join(", ")
        )
        .as_str(),
    )
}

fn toleration_effect_rule() -> Rule {
    Rule::new(format!(
        "self.all(t, !has(t.effect) || t.effect in ['', {}])",
        quoted(&TAINT_EFFECTS)
    ))
    .message(
        format!(
            "a toleration's effect must be empty or one of {}",
            TAINT_EFFECTS.join(", ")
        )
        .as_str(),
    )
}

/// The CEL rule that makes every amount a non-negative Kubernetes quantity. The schema types
/// them int-or-string only, so without it the API server would store `cpu: abc` and the
/// execution's pod would be refused much later.
fn quantities_rule() -> Rule {
    let bad = "!isQuantity(string(self[k])) || quantity(string(self[k])).isLessThan(quantity('0'))";
    Rule::new(format!("self.all(k, !({bad}))")).message(Message::Expression(format!(
        "self.filter(k, {bad}).map(k, '\"' + k + '\": \"' + string(self[k]) + '\"')[0] + ' is not a valid amount; amounts must be non-negative quantities, such as 500m, 2 or 4Gi'"
    )))
}

/// The CEL rule that allows only the compute keys errand schedules by; its message names the
/// first key that is not one of them.
fn allowed_keys_rule() -> Rule {
    let allowed = quoted(&ALLOWED_COMPUTE_KEYS);
    Rule::new(format!("self.all(k, k in [{allowed}])")).message(Message::Expression(format!(
        "'\"' + self.filter(k, !(k in [{allowed}]))[0] + '\" is not allowed; only cpu, memory and nvidia.com/gpu may be set'"
    )))
}

/// Observed state of an AgentEnvironment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentEnvironmentStatus {
    /// Standard conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::common::conditions_schema")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}
