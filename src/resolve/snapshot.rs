//! The resolved, merged and validated execution that everything in a run comes from, and its digest.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::extension::ResolvedExtension;
use super::problems::Problem;
use crate::api::{Compute, Egress, RuntimeContainer};

/// Version of the snapshot document, bumped on incompatible changes.
pub const SNAPSHOT_VERSION: &str = "errand.dev/snapshot-v1";

/// The most a snapshot may take in its ConfigMap: the API server refuses a ConfigMap whose
/// data exceeds 1 MiB.
pub const MAX_SNAPSHOT_BYTES: usize = 1024 * 1024;

/// Everything a run needs, resolved at admission. Holds secret *references* only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Always [`SNAPSHOT_VERSION`].
    pub version: String,
    /// Namespace of the execution (the tenant).
    pub namespace: String,
    /// The agent that runs.
    pub agent: ResolvedAgent,
    /// Name of the referenced AgentEnvironment, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// The agent config with the environment merged in (`AGENT_CONFIG_PATH` points at it).
    pub config: Map<String, Value>,
    /// Environment variables filled from Secrets when the agent starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretBinding>,
    /// The models whose keys errand's egress proxy adds (the environment's `modelCredentials:
    /// Proxied`): their variables hold a placeholder token, not the Secret's value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxied_models: Vec<ProxiedModel>,
    /// Resources and placement.
    pub compute: Compute,
    /// Where the pod may connect when the controller denies egress by default.
    #[serde(default, skip_serializing_if = "Egress::is_empty")]
    pub egress: Egress,
    /// What to stage into the workdir, pinned to content digests.
    pub workdir: WorkdirPlan,
    /// The input given to the agent.
    pub input: String,
    /// Seconds the agent may run.
    pub timeout_seconds: i64,
    /// Seconds the pod may take to start.
    pub start_timeout_seconds: i64,
    /// Whether telemetry export is turned on automatically.
    pub auto_telemetry: bool,
    /// The extension that runs after the agent succeeded, as installed at admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<ResolvedExtension>,
    /// Kueue LocalQueue, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
}

/// The agent that runs: its name and container.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedAgent {
    /// The Agent's object name, or the inline config's `name` (`inline` when it has none).
    pub name: String,
    /// Image and entrypoint: the Agent's own `runtime`, or the picked AgentRuntime's.
    pub runtime: RuntimeContainer,
    /// The AgentRuntime the container comes from, when the Agent names no `runtime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_name: Option<String>,
}

/// An environment variable taken from a Secret's key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretBinding {
    /// The environment variable the agent sees.
    pub env: String,
    /// The Secret's name, in the execution's namespace.
    pub secret: String,
    /// The key in the Secret.
    pub key: String,
}

/// One model whose key errand's egress proxy adds (see [`super::model_credentials`]). References only: no value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxiedModel {
    /// The model's alias in the config's `models` (its index when they are a list).
    pub alias: String,
    /// Where the proxy sends its calls: the model's own `base_url`, an `https` URL.
    pub base_url: String,
    /// The variable (`api_key_env`) that holds the placeholder token instead of the key.
    pub env: String,
    /// The Secret with the real key, in the run's namespace.
    pub secret: String,
    /// Its key in the Secret.
    pub key: String,
}

/// The workdir content, pinned to digests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkdirPlan {
    /// Extracted first, at the workdir root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<FilesetContent>,
    /// Extracted after the base, each at its mount path; they win over the base.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountedContent>,
}

/// A Fileset's content at one digest, optionally only one path in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilesetContent {
    /// The Fileset's name.
    pub fileset: String,
    /// Digest of its `tar.gz`, `sha256:<hex>`.
    pub digest: String,
    /// Only this path of the tree (re-rooted), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Fileset content placed at a path in the workdir.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountedContent {
    /// What is placed.
    pub content: FilesetContent,
    /// Where, relative to the workdir.
    pub mount_path: String,
}

impl Snapshot {
    /// Where the environment's field `path` is, for a problem about it: in the named
    /// AgentEnvironment, or in the execution's inline environment.
    pub fn environment_field(&self, path: &str) -> String {
        match &self.environment {
            Some(name) => format!("AgentEnvironment {name:?} spec.{path}"),
            None => format!("spec.environment.{path}"),
        }
    }

    /// The agent's full command line: `command` then `args`.
    pub fn command(&self) -> Vec<String> {
        let runtime = &self.agent.runtime;
        runtime
            .command
            .iter()
            .chain(&runtime.args)
            .cloned()
            .collect()
    }

    /// The plain environment variables of the merged config (`config.env`).
    pub fn plain_env(&self) -> BTreeMap<String, String> {
        let Some(Value::Object(env)) = self.config.get("env") else {
            return BTreeMap::new();
        };
        env.iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect()
    }

    /// The snapshot as canonical JSON: object keys sorted at every level, no whitespace.
    pub fn canonical_json(&self) -> Vec<u8> {
        let value = serde_json::to_value(self).expect("a snapshot always serializes");
        let mut out = Vec::new();
        write_canonical(&value, &mut out);
        out
    }

    /// The merged agent config as the pod reads it (`AGENT_CONFIG_PATH`), pretty-printed.
    pub fn agent_config_json(&self) -> String {
        serde_json::to_string_pretty(&self.config).expect("a JSON object always serializes")
    }

    /// Bytes of data the snapshot's ConfigMap holds: the canonical snapshot and the agent
    /// config, as the API server counts them against [`MAX_SNAPSHOT_BYTES`].
    pub fn stored_size(&self) -> usize {
        self.canonical_json().len() + self.agent_config_json().len()
    }

    /// A problem if the snapshot does not fit its ConfigMap, naming what takes the most room:
    /// the input, or the agent config (found at `agent_prefix`, which it is stored twice).
    pub fn check_size(&self, agent_prefix: &str) -> Option<Problem> {
        let agent_config = self.agent_config_json().len();
        let total = self.canonical_json().len() + agent_config;
        if total <= MAX_SNAPSHOT_BYTES {
            return None;
        }
        let input = serde_json::to_string(&self.input)
            .expect("a string always serializes")
            .len();
        let config = agent_config * 2;
        let field = if input >= config {
            "spec.input".to_owned()
        } else {
            format!("{agent_prefix}.config (after merging the environment)")
        };
        Some(Problem::new(
            field,
            format!(
                "the execution's snapshot would take {total} bytes (the input {input} as JSON, the \
                 agent config {config} in its two copies), and a ConfigMap holds at most \
                 {MAX_SNAPSHOT_BYTES}; pass large content as files in a Fileset"
            ),
        ))
    }

    /// `sha256:<hex>` of [`Snapshot::canonical_json`].
    pub fn digest(&self) -> String {
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(self.canonical_json()))
        )
    }
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            out.push(b'{');
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(&Value::String(key.clone()), out);
                out.push(b':');
                write_canonical(&map[key], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => out.extend(serde_json::to_vec(scalar).expect("a JSON scalar always serializes")),
    }
}
