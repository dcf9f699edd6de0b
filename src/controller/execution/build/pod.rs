//! The pod template of an execution's Job: the `errand-stage` init container, the agent container wrapped by the runner, the `errand-extension` container of an execution with an extension, and their volumes, over what every agent pod shares ([`crate::controller::build::pod`]).

use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource,
    ObjectFieldSelector, PodSpec, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume,
    VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::contract::{
    AGENT_CONTAINER, BIN_VOLUME, CONTROL_ANNOTATION, CONTROL_MOUNT_PATH, CONTROL_VOLUME,
    EXTENSION_CONTAINER, EXTENSION_GRANTS_VOLUME, EXTENSION_VOLUME, GRANT_TOKEN_AUDIENCE,
    GRANT_TOKEN_VOLUME, GRANTS_VOLUME, HANDOFF_VOLUME, SCRATCH_VOLUME, SNAPSHOT_VOLUME,
    STAGE_CONTAINER, WORKSPACE_VOLUME,
};
use crate::controller::build::{
    AGENT_CONFIG_FILE, ExecutionOwner, SNAPSHOT_DIR, SNAPSHOT_MODE, SNAPSHOT_PATH, WORKSPACE_DIR,
    agent_env, agent_pod, empty_dir, mount, resources, security, snapshot_volume,
};
use crate::controller::config::ControllerConfig;
use crate::controller::names;
use crate::resolve::{ResolvedExtension, Snapshot};

/// Where the stage container copies the errand binary; the agent container runs it from here.
pub const ERRAND_BIN_DIR: &str = "/errand/bin";
/// Where `errand stage` leaves the grants for `run-agent` (an in-memory volume).
pub const GRANTS_DIR: &str = "/errand/grants";
/// The grants document inside the pod; `run-agent` removes it before the agent starts.
pub const GRANTS_PATH: &str = "/errand/grants/grants.json";
/// Where the stage container, and only it, finds its projected ServiceAccount token.
pub const GRANT_TOKEN_DIR: &str = "/var/run/secrets/errand.dev/grant-token";
/// The token file inside [`GRANT_TOKEN_DIR`].
pub const GRANT_TOKEN_PATH: &str = "/var/run/secrets/errand.dev/grant-token/token";
/// How long the token lasts (the API server's minimum); the stage container uses it within
/// seconds of starting, and the kubelet renews it anyway.
const GRANT_TOKEN_SECONDS: i64 = 600;
/// The runner's scratch directory: input, response, logs and artifacts, outside the workdir.
pub const SCRATCH_DIR: &str = "/errand/scratch";
/// Where `errand stage` leaves the extension's grants (an in-memory volume the agent's container
/// does not mount).
pub const EXTENSION_GRANTS_DIR: &str = "/errand/extension-grants";
/// The extension's grants document; `run-extension` removes it before the step starts.
pub const EXTENSION_GRANTS_PATH: &str = "/errand/extension-grants/grants.json";
/// Where `run-agent` hands the ended run over to the extension's container.
pub const HANDOFF_DIR: &str = "/errand/handoff";
/// The handoff document: the agent's run summary.
pub const HANDOFF_PATH: &str = "/errand/handoff/run.json";
/// The extension step's own directory: the run's results, its output and working directory.
pub const EXTENSION_DIR: &str = "/errand/extension";

/// The token: readable by the pod's user only.
const GRANT_TOKEN_MODE: i32 = 0o400;
/// The grants document is a few kilobytes.
const GRANTS_SIZE_LIMIT: &str = "1Mi";

/// In memory, so the signed URLs never reach the node's disk.
fn grants_volume(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".to_owned()),
            size_limit: Some(Quantity(GRANTS_SIZE_LIMIT.to_owned())),
        }),
        ..Volume::default()
    }
}

fn volumes(
    execution: &ExecutionOwner,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> Vec<Volume> {
    let mut volumes = vec![
        empty_dir(BIN_VOLUME, None),
        empty_dir(WORKSPACE_VOLUME, config.workspace_size_limit.as_ref()),
        empty_dir(SCRATCH_VOLUME, config.scratch_size_limit.as_ref()),
        snapshot_volume(names::snapshot_config_map_name(&execution.name)),
        grants_volume(GRANTS_VOLUME),
        // The pod's run control annotation (a changed deadline, a kill), which the kubelet
        // refreshes when the controller changes it; the runner watches it.
        Volume {
            name: CONTROL_VOLUME.to_owned(),
            downward_api: Some(DownwardAPIVolumeSource {
                default_mode: Some(SNAPSHOT_MODE),
                items: Some(vec![DownwardAPIVolumeFile {
                    path: "control".to_owned(),
                    field_ref: Some(ObjectFieldSelector {
                        field_path: format!("metadata.annotations['{CONTROL_ANNOTATION}']"),
                        ..ObjectFieldSelector::default()
                    }),
                    ..DownwardAPIVolumeFile::default()
                }]),
            }),
            ..Volume::default()
        },
        // A token of the pod's ServiceAccount bound to this pod, for the grant endpoint only.
        Volume {
            name: GRANT_TOKEN_VOLUME.to_owned(),
            projected: Some(ProjectedVolumeSource {
                default_mode: Some(GRANT_TOKEN_MODE),
                sources: Some(vec![VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: Some(GRANT_TOKEN_AUDIENCE.to_owned()),
                        expiration_seconds: Some(GRANT_TOKEN_SECONDS),
                        path: "token".to_owned(),
                    }),
                    ..VolumeProjection::default()
                }]),
            }),
            ..Volume::default()
        },
    ];
    if snapshot.extension.is_some() {
        volumes.extend([
            grants_volume(EXTENSION_GRANTS_VOLUME),
            empty_dir(
                HANDOFF_VOLUME,
                Some(&Quantity(GRANTS_SIZE_LIMIT.to_owned())),
            ),
            empty_dir(EXTENSION_VOLUME, config.scratch_size_limit.as_ref()),
        ]);
    }
    volumes
}

/// `errand stage`: asks the controller for the execution's grants with the pod's token,
/// copies the errand binary into the shared volume, downloads and extracts the workdir
/// through the grants and uploads `input_workdir`, leaving the grants and what it saved for
/// `run-agent` (and spooling uploads in the scratch directory when the store needs sized
/// bodies). The only container with the token.
fn stage_container(
    execution: &ExecutionOwner,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> Container {
    let mut mounts = errand_mounts(false);
    mounts.push(mount(GRANT_TOKEN_VOLUME, GRANT_TOKEN_DIR, true));
    if snapshot.extension.is_some() {
        mounts.push(mount(EXTENSION_GRANTS_VOLUME, EXTENSION_GRANTS_DIR, false));
    }
    Container {
        name: STAGE_CONTAINER.to_owned(),
        image: Some(config.errand_image.clone()),
        image_pull_policy: config.errand_image_pull_policy.clone(),
        command: Some(
            vec![
                config.errand_binary.clone(),
                "stage".to_owned(),
                "--bin-dir".to_owned(),
                ERRAND_BIN_DIR.to_owned(),
                "--snapshot".to_owned(),
                SNAPSHOT_PATH.to_owned(),
            ]
            .into_iter()
            .chain(pod_paths_args(snapshot))
            .chain(grant_request_args(execution, config))
            .chain(staging_args(config))
            .chain(telemetry_args(snapshot, config))
            .collect(),
        ),
        volume_mounts: Some(mounts),
        resources: resources::stage_resources(&snapshot.compute),
        security_context: Some(security::container_security(true)),
        termination_message_policy: Some("File".to_owned()),
        ..Container::default()
    }
}

/// How `errand stage` is bounded: the controller's staging budget and extraction limits.
fn staging_args(config: &ControllerConfig) -> [String; 6] {
    [
        "--staging-budget-seconds".to_owned(),
        config.staging_budget_seconds.to_string(),
        "--max-extract-bytes".to_owned(),
        config.extract_limits.max_bytes.to_string(),
        "--max-extract-entries".to_owned(),
        config.extract_limits.max_entries.to_string(),
    ]
}

/// Where and as what `errand stage` asks for the grants: the controller, the token, and the
/// execution the pod says it runs (the controller checks that against the token).
fn grant_request_args(execution: &ExecutionOwner, config: &ControllerConfig) -> [String; 10] {
    [
        "--controller-url".to_owned(),
        config.controller_url.clone(),
        "--grant-token".to_owned(),
        GRANT_TOKEN_PATH.to_owned(),
        "--execution-namespace".to_owned(),
        execution.namespace.clone(),
        "--execution-name".to_owned(),
        execution.name.clone(),
        "--execution-uid".to_owned(),
        execution.uid.clone(),
    ]
}

/// Where both errand commands export their spans, and the agent's telemetry goes: the
/// controller's OTLP endpoint, for executions with `autoTelemetry: true` only.
fn telemetry_args(snapshot: &Snapshot, config: &ControllerConfig) -> Vec<String> {
    match &config.otlp_endpoint {
        Some(target) if snapshot.auto_telemetry => {
            vec!["--otlp-endpoint".to_owned(), target.endpoint.clone()]
        }
        _ => Vec::new(),
    }
}

/// The arguments both errand commands in the pod take: where the grants, the workspace and
/// the scratch directory are, and with an extension where its grants and the handoff go.
fn pod_paths_args(snapshot: &Snapshot) -> Vec<String> {
    let mut args = vec![
        "--grants".to_owned(),
        GRANTS_PATH.to_owned(),
        "--workspace".to_owned(),
        WORKSPACE_DIR.to_owned(),
        "--scratch".to_owned(),
        SCRATCH_DIR.to_owned(),
    ];
    if snapshot.extension.is_some() {
        args.extend([
            "--extension-grants".to_owned(),
            EXTENSION_GRANTS_PATH.to_owned(),
            "--handoff".to_owned(),
            HANDOFF_PATH.to_owned(),
        ]);
    }
    args
}

/// The volumes both errand containers mount; the bin directory read-only where errand only
/// runs from it. The grants directory is writable in both: `stage` writes the grants there and
/// `run-agent` removes them before the agent starts.
fn errand_mounts(bin_read_only: bool) -> Vec<VolumeMount> {
    vec![
        mount(BIN_VOLUME, ERRAND_BIN_DIR, bin_read_only),
        mount(WORKSPACE_VOLUME, WORKSPACE_DIR, false),
        mount(SCRATCH_VOLUME, SCRATCH_DIR, false),
        mount(SNAPSHOT_VOLUME, SNAPSHOT_DIR, true),
        mount(GRANTS_VOLUME, GRANTS_DIR, false),
    ]
}

/// The agent's image with its command run by errand's runner, which enforces the deadline,
/// saves the results and writes the summary to the termination message.
fn agent_container(
    execution: &ExecutionOwner,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> Container {
    let mut command = vec![
        format!("{ERRAND_BIN_DIR}/errand"),
        "run-agent".to_owned(),
        "--snapshot".to_owned(),
        SNAPSHOT_PATH.to_owned(),
        "--agent-config".to_owned(),
        AGENT_CONFIG_FILE.to_owned(),
    ];
    command.extend(pod_paths_args(snapshot));
    command.extend(telemetry_args(snapshot, config));
    command.push("--".to_owned());
    command.extend(snapshot.command());
    let runtime = &snapshot.agent.runtime;
    let mut mounts = errand_mounts(true);
    mounts.push(mount(CONTROL_VOLUME, CONTROL_MOUNT_PATH, true));
    if snapshot.extension.is_some() {
        mounts.push(mount(HANDOFF_VOLUME, HANDOFF_DIR, false));
    }
    Container {
        name: AGENT_CONTAINER.to_owned(),
        image: Some(runtime.image.clone()),
        image_pull_policy: runtime.image_pull_policy.clone(),
        command: Some(command),
        working_dir: Some(WORKSPACE_DIR.to_owned()),
        env: Some(agent_env(snapshot, config, &execution.uid)),
        volume_mounts: Some(mounts),
        resources: resources::agent_resources(&snapshot.compute),
        security_context: Some(security::container_security(false)),
        termination_message_policy: Some("File".to_owned()),
        ..Container::default()
    }
}

/// The extension's image with its command run by `errand run-extension`, beside the agent's
/// container: it waits for the agent's run, and after a success runs the step with its own
/// grants (GET for the run's results, PUT for its declared results and the manifest). It mounts
/// neither the workspace nor the agent's grants, reads the handoff read-only, and gets no
/// Secret; its cpu and memory are the agent's, without GPUs.
fn extension_container(extension: &ResolvedExtension, snapshot: &Snapshot) -> Container {
    let runtime = &extension.container;
    Container {
        name: EXTENSION_CONTAINER.to_owned(),
        image: Some(runtime.image.clone()),
        image_pull_policy: runtime.image_pull_policy.clone(),
        command: Some(vec![
            format!("{ERRAND_BIN_DIR}/errand"),
            "run-extension".to_owned(),
            "--snapshot".to_owned(),
            SNAPSHOT_PATH.to_owned(),
            "--agent-config".to_owned(),
            AGENT_CONFIG_FILE.to_owned(),
            "--grants".to_owned(),
            EXTENSION_GRANTS_PATH.to_owned(),
            "--handoff".to_owned(),
            HANDOFF_PATH.to_owned(),
            "--dir".to_owned(),
            EXTENSION_DIR.to_owned(),
        ]),
        working_dir: Some(EXTENSION_DIR.to_owned()),
        volume_mounts: Some(vec![
            mount(BIN_VOLUME, ERRAND_BIN_DIR, true),
            mount(SNAPSHOT_VOLUME, SNAPSHOT_DIR, true),
            mount(EXTENSION_GRANTS_VOLUME, EXTENSION_GRANTS_DIR, false),
            mount(HANDOFF_VOLUME, HANDOFF_DIR, true),
            mount(EXTENSION_VOLUME, EXTENSION_DIR, false),
        ]),
        resources: resources::stage_resources(&snapshot.compute),
        security_context: Some(security::container_security(false)),
        termination_message_policy: Some("File".to_owned()),
        ..Container::default()
    }
}

/// The pod spec of an execution's Job.
pub fn pod_spec(
    execution: &ExecutionOwner,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> PodSpec {
    PodSpec {
        init_containers: Some(vec![stage_container(execution, snapshot, config)]),
        containers: std::iter::once(agent_container(execution, snapshot, config))
            .chain(
                snapshot
                    .extension
                    .as_ref()
                    .map(|extension| extension_container(extension, snapshot)),
            )
            .collect(),
        volumes: Some(volumes(execution, snapshot, config)),
        restart_policy: Some("Never".to_owned()),
        termination_grace_period_seconds: Some(config.termination_grace_seconds),
        ..agent_pod(snapshot, config)
    }
}
