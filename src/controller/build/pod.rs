//! What every pod that runs an agent shares, an execution's or a deployment's: the snapshot and workspace paths, the agent's environment, its identity, pull secrets, security and placement, and the volume helpers.

use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, EmptyDirVolumeSource, EnvVar, EnvVarSource, LocalObjectReference,
    PodSpec, SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{model_credentials, security};
use crate::api::Compute;
use crate::api::contract::{ENV_AGENT_CONFIG_PATH, SNAPSHOT_VOLUME};
use crate::controller::config::ControllerConfig;
use crate::resolve::Snapshot;

/// The working directory the agent runs in.
pub const WORKSPACE_DIR: &str = "/workspace";
/// Where the snapshot ConfigMap is mounted (read-only).
pub const SNAPSHOT_DIR: &str = "/errand/snapshot";
/// The snapshot document inside the pod.
pub const SNAPSHOT_PATH: &str = "/errand/snapshot/snapshot.json";
/// The merged agent config inside the pod (`AGENT_CONFIG_PATH` points at it).
pub const AGENT_CONFIG_FILE: &str = "/errand/snapshot/agent-config.json";

/// Read-only for everyone: the snapshot holds no secrets.
pub const SNAPSHOT_MODE: i32 = 0o444;

/// A mount of `volume` at `path`.
pub fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// An `emptyDir` volume, bounded by `size_limit` when given.
pub fn empty_dir(name: &str, size_limit: Option<&Quantity>) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: size_limit.cloned(),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The snapshot ConfigMap `config_map` as the read-only volume mounted at [`SNAPSHOT_DIR`].
pub fn snapshot_volume(config_map: String) -> Volume {
    Volume {
        name: SNAPSHOT_VOLUME.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map,
            default_mode: Some(SNAPSHOT_MODE),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The agent's environment: its plain variables, the egress proxy's settings when it reaches
/// host names through it, `AGENT_CONFIG_PATH`, each proxied model's placeholder token (for the
/// run with `run_uid`), and each other secret binding as a `secretKeyRef` so the value is read
/// by the kubelet and never written anywhere.
pub fn agent_env(snapshot: &Snapshot, config: &ControllerConfig, run_uid: &str) -> Vec<EnvVar> {
    let proxy = super::egress::egress_proxy(snapshot, config)
        .map(|proxy| super::egress::proxy_env(snapshot, config, proxy))
        .unwrap_or_default();
    let placeholders = model_credentials::placeholder_env(snapshot, config, run_uid);
    let mut env: Vec<EnvVar> = snapshot
        .plain_env()
        .into_iter()
        .chain(proxy)
        .chain(placeholders)
        .map(|(name, value)| EnvVar {
            name,
            value: Some(value),
            ..EnvVar::default()
        })
        .collect();
    env.push(EnvVar {
        name: ENV_AGENT_CONFIG_PATH.to_owned(),
        value: Some(AGENT_CONFIG_FILE.to_owned()),
        ..EnvVar::default()
    });
    let secrets = snapshot
        .secrets
        .iter()
        .filter(|binding| !model_credentials::is_proxied_key(snapshot, &binding.env));
    env.extend(secrets.map(|binding| EnvVar {
        name: binding.env.clone(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: binding.secret.clone(),
                key: binding.key.clone(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }));
    env
}

/// The image pull Secrets of the pod: the controller's, then the environment's, each once.
fn image_pull_secrets(
    compute: &Compute,
    config: &ControllerConfig,
) -> Option<Vec<LocalObjectReference>> {
    let mut names: Vec<&String> = Vec::new();
    for name in config
        .image_pull_secrets
        .iter()
        .chain(&compute.image_pull_secrets)
    {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    (!names.is_empty()).then(|| {
        names
            .into_iter()
            .map(|name| LocalObjectReference { name: name.clone() })
            .collect()
    })
}

/// What every pod that runs an agent shares, an execution's or a deployment's: its identity
/// without a token, pull secrets, restricted security and the compute's placement.
pub fn agent_pod(snapshot: &Snapshot, config: &ControllerConfig) -> PodSpec {
    let compute = &snapshot.compute;
    PodSpec {
        // A ServiceAccount gives the pod pull secrets and an identity; no container gets its
        // token.
        service_account_name: compute
            .service_account_name
            .clone()
            .or_else(|| config.service_account_name.clone()),
        automount_service_account_token: Some(false),
        image_pull_secrets: image_pull_secrets(compute, config),
        enable_service_links: Some(false),
        security_context: Some(security::pod_security(
            snapshot.agent.runtime.security_context.as_ref(),
        )),
        node_selector: (!compute.node_selector.is_empty()).then(|| compute.node_selector.clone()),
        tolerations: (!compute.tolerations.is_empty()).then(|| compute.tolerations.clone()),
        priority_class_name: compute.priority_class_name.clone(),
        runtime_class_name: compute.runtime_class_name.clone(),
        ..PodSpec::default()
    }
}
