//! Tests of the builders: every property DESIGN.md §4 asks of the Job, on the built objects.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::api::contract::{AGENT_CONTAINER, STAGE_CONTAINER};
use crate::api::{
    AgentEnvironmentSpec, AgentExecution, AgentExecutionSpec, AgentSpec, Compute, ComputeResources,
    RuntimeSecurity,
};
use crate::controller::config::ControllerConfig;
use crate::resolve::{InMemoryCatalog, Snapshot, resolve_execution};
use crate::testing::{NS, SECRET_VALUE};

fn agent(security: Option<RuntimeSecurity>) -> AgentSpec {
    AgentSpec::test()
        .with_args(&["--verbose"])
        .with_security(security)
}

/// `prod` with a GPU, placement and a scheduling class.
fn gpu_environment() -> AgentEnvironmentSpec {
    AgentEnvironmentSpec::test().with_compute(Compute {
        resources: Some(ComputeResources {
            limits: [
                ("cpu".into(), Quantity("2".into())),
                ("memory".into(), Quantity("4Gi".into())),
                ("nvidia.com/gpu".into(), Quantity("1".into())),
            ]
            .into(),
            requests: [("cpu".into(), Quantity("1".into()))].into(),
        }),
        node_selector: [("gpu".into(), "a100".into())].into(),
        tolerations: vec![Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }],
        priority_class_name: Some("batch-high".into()),
        runtime_class_name: Some("nvidia".into()),
        ..Compute::default()
    })
}

fn spec(queue: Option<&str>) -> AgentExecutionSpec {
    AgentExecutionSpec::test()
        .with_workdir("repo", &[("data#tables/", "data")])
        .with_timeouts(600, 120)
        .with_queue(queue)
}

fn resolve(spec: &AgentExecutionSpec, security: Option<RuntimeSecurity>) -> Snapshot {
    resolve_in(spec, security, gpu_environment())
}

/// Resolves `spec` with the GPU environment replaced by `environment`.
fn resolve_in(
    spec: &AgentExecutionSpec,
    security: Option<RuntimeSecurity>,
    environment: AgentEnvironmentSpec,
) -> Snapshot {
    let catalog = InMemoryCatalog::test()
        .with_agent(NS, "calculator", agent(security))
        .with_environment(NS, "prod", environment);
    resolve_execution(NS, spec, &catalog).expect("the fixture resolves")
}

/// A resolved snapshot with a GPU environment, a secret binding and a two-part workdir.
fn snapshot() -> Snapshot {
    resolve(&spec(None), None)
}

fn identity() -> ExecutionOwner {
    ExecutionOwner::of(&AgentExecution::test().with_spec(spec(None))).unwrap()
}

fn built_job(snapshot: &Snapshot) -> Job {
    job(
        &identity(),
        snapshot,
        &ControllerConfig::new("errand.local/errand:dev"),
    )
}

fn pod_spec(job: &Job) -> &PodSpec {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn container<'a>(job: &'a Job, name: &str) -> &'a Container {
    let pod = pod_spec(job);
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn mount_paths(container: &Container) -> Vec<(&str, bool)> {
    container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.mount_path.as_str(), m.read_only == Some(true)))
        .collect()
}

#[test]
fn children_are_owned_by_the_execution_as_controller() {
    let snapshot = snapshot();
    let metas = [
        built_job(&snapshot).metadata,
        snapshot_config_map(&identity(), &snapshot).metadata,
    ];
    for meta in metas {
        let owners = meta.owner_references.unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "AgentExecution");
        assert_eq!(owners[0].api_version, "errand.dev/v1alpha1");
        assert_eq!(owners[0].name, "calc");
        assert_eq!(owners[0].uid, "0d9f6a52-1111-2222-3333-444455556666");
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(owners[0].block_owner_deletion, Some(true));
        assert_eq!(meta.namespace.as_deref(), Some(NS));
        let labels = meta.labels.unwrap();
        assert_eq!(labels["errand.dev/execution"], "calc");
        assert_eq!(
            labels["errand.dev/execution-uid"],
            "0d9f6a52-1111-2222-3333-444455556666"
        );
        assert_eq!(labels["errand.dev/agent"], "calculator");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "errand");
    }
}

#[test]
fn child_names_are_deterministic() {
    let snapshot = snapshot();
    assert_eq!(
        built_job(&snapshot).metadata.name.as_deref(),
        Some("errand-calc")
    );
    assert_eq!(
        snapshot_config_map(&identity(), &snapshot)
            .metadata
            .name
            .as_deref(),
        Some("errand-calc-snapshot")
    );
}

#[test]
fn the_snapshot_config_map_is_immutable_holds_snapshot_and_agent_config_and_the_finalizer() {
    let snapshot = snapshot();
    let cm = snapshot_config_map(&identity(), &snapshot);
    assert_eq!(cm.immutable, Some(true));
    let data = cm.data.unwrap();
    let parsed: Snapshot = serde_json::from_str(&data[SNAPSHOT_KEY]).unwrap();
    assert_eq!(parsed, snapshot);
    assert_eq!(data[SNAPSHOT_KEY].as_bytes(), snapshot.canonical_json());
    let config: serde_json::Value = serde_json::from_str(&data[AGENT_CONFIG_KEY]).unwrap();
    assert_eq!(config["name"], "calculator");
    let annotations = cm.metadata.annotations.unwrap();
    assert_eq!(annotations["errand.dev/snapshot-digest"], snapshot.digest());
    assert_eq!(annotations["errand.dev/execution-name"], identity().name);
    assert_eq!(
        cm.metadata.finalizers,
        Some(vec!["errand.dev/results".to_owned()]),
        "created holding the results finalizer"
    );
}

#[test]
fn the_job_runs_once_with_a_backstop_deadline() {
    let job = built_job(&snapshot());
    let spec = job.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.pod_replacement_policy.as_deref(), Some("Failed"));
    let rules = &spec.pod_failure_policy.as_ref().unwrap().rules;
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].action, "FailJob");
    let on = rules[0].on_pod_conditions.as_ref().unwrap();
    assert_eq!(
        (on[0].type_.as_str(), on[0].status.as_str()),
        ("DisruptionTarget", "True"),
        "a disrupted pod fails the Job with a reason of its own"
    );
    assert_eq!(spec.ttl_seconds_after_finished, None);
    assert_eq!(spec.suspend, None);
    // start timeout 120 + run timeout 600 + staging budget 900
    assert_eq!(spec.active_deadline_seconds, Some(1620));
    assert_eq!(pod_spec(&job).restart_policy.as_deref(), Some("Never"));
    assert!(
        !job.metadata
            .labels
            .unwrap()
            .contains_key("kueue.x-k8s.io/queue-name")
    );
}

#[test]
fn a_queued_execution_is_created_suspended_with_the_kueue_label() {
    let job = built_job(&resolve(&spec(Some("team-queue")), None));
    assert_eq!(job.spec.as_ref().unwrap().suspend, Some(true));
    assert_eq!(
        job.metadata.labels.as_ref().unwrap()["kueue.x-k8s.io/queue-name"],
        "team-queue"
    );
}

#[test]
fn the_pod_meets_the_restricted_pod_security_standard() {
    let job = built_job(&snapshot());
    let pod = pod_spec(&job);
    assert_eq!(pod.automount_service_account_token, Some(false));
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.run_as_user, Some(65532));
    assert_eq!(
        psc.seccomp_profile.as_ref().unwrap().type_,
        "RuntimeDefault"
    );
    let containers = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten());
    for c in containers {
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(sc.run_as_non_root, Some(true), "{}", c.name);
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_owned()][..]),
            "{}",
            c.name
        );
        assert!(sc.capabilities.as_ref().unwrap().add.is_none());
        assert_ne!(sc.privileged, Some(true));
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
    }
    for v in pod.volumes.iter().flatten() {
        assert!(v.host_path.is_none(), "restricted pods use no hostPath");
    }
}

#[test]
fn the_agent_chooses_its_non_root_user() {
    let security = RuntimeSecurity {
        run_as_user: Some(1000),
        run_as_group: Some(2000),
        fs_group: None,
    };
    let job = built_job(&resolve(&spec(None), Some(security)));
    let psc = pod_spec(&job).security_context.clone().unwrap();
    assert_eq!(psc.run_as_user, Some(1000));
    assert_eq!(psc.run_as_group, Some(2000));
    assert_eq!(psc.fs_group, Some(2000));
}

#[test]
fn compute_becomes_resources_and_placement() {
    let job = built_job(&snapshot());
    let pod = pod_spec(&job);
    let agent = container(&job, "agent");
    let resources = agent.resources.as_ref().unwrap();
    let limits = resources.limits.as_ref().unwrap();
    let requests = resources.requests.as_ref().unwrap();
    assert_eq!(limits["nvidia.com/gpu"], Quantity("1".into()));
    assert_eq!(requests["nvidia.com/gpu"], limits["nvidia.com/gpu"]);
    assert_eq!(limits["cpu"], Quantity("2".into()));
    assert_eq!(requests["cpu"], Quantity("1".into()));
    let stage = container(&job, "errand-stage").resources.as_ref().unwrap();
    assert!(
        !stage
            .limits
            .as_ref()
            .unwrap()
            .contains_key("nvidia.com/gpu")
    );
    assert_eq!(
        stage.limits.as_ref().unwrap()["memory"],
        Quantity("4Gi".into())
    );
    assert_eq!(pod.node_selector.as_ref().unwrap()["gpu"], "a100");
    assert_eq!(
        pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("nvidia.com/gpu")
    );
    assert_eq!(pod.priority_class_name.as_deref(), Some("batch-high"));
    assert_eq!(pod.runtime_class_name.as_deref(), Some("nvidia"));
}

#[test]
fn a_gpu_request_alone_becomes_the_limit_too() {
    let compute = Compute {
        resources: Some(ComputeResources {
            requests: [("nvidia.com/gpu".into(), Quantity("2".into()))].into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let resources = resources::agent_resources(&compute).unwrap();
    assert_eq!(
        resources.limits.unwrap()["nvidia.com/gpu"],
        Quantity("2".into())
    );
    assert!(resources::agent_resources(&Compute::default()).is_none());
}

#[test]
fn the_stage_container_installs_errand_and_the_agent_runs_under_it() {
    let job = built_job(&snapshot());
    let pod = pod_spec(&job);
    assert_eq!(pod.init_containers.as_ref().unwrap().len(), 1);
    let stage = container(&job, "errand-stage");
    assert_eq!(stage.image.as_deref(), Some("errand.local/errand:dev"));
    // Exactly the flags `errand stage` and `errand run-agent` parse (src/cli/pod.rs).
    assert_eq!(
        stage.command.as_ref().unwrap(),
        &[
            "/usr/local/bin/errand",
            "stage",
            "--bin-dir",
            "/errand/bin",
            "--snapshot",
            "/errand/snapshot/snapshot.json",
            "--grants",
            "/errand/grants/grants.json",
            "--workspace",
            "/workspace",
            "--scratch",
            "/errand/scratch",
            "--controller-url",
            "http://errand.errand-system.svc:8080",
            "--grant-token",
            "/var/run/secrets/errand.dev/grant-token/token",
            "--execution-namespace",
            NS,
            "--execution-name",
            "calc",
            "--execution-uid",
            "0d9f6a52-1111-2222-3333-444455556666",
            "--staging-budget-seconds",
            "900",
            "--max-extract-bytes",
            "17179869184",
            "--max-extract-entries",
            "1000000",
        ]
    );

    let agent = container(&job, "agent");
    assert_eq!(agent.image.as_deref(), Some("errand.local/calculator:dev"));
    assert_eq!(
        agent.command.as_ref().unwrap(),
        &[
            "/errand/bin/errand",
            "run-agent",
            "--snapshot",
            "/errand/snapshot/snapshot.json",
            "--agent-config",
            "/errand/snapshot/agent-config.json",
            "--grants",
            "/errand/grants/grants.json",
            "--workspace",
            "/workspace",
            "--scratch",
            "/errand/scratch",
            "--",
            "python3",
            "/agent/calculator.py",
            "--verbose",
        ]
    );
    assert!(
        agent.args.is_none(),
        "the image's own args would follow ours"
    );
    assert_eq!(agent.working_dir.as_deref(), Some("/workspace"));
}

#[test]
fn workspace_and_scratch_are_bounded_by_the_controllers_size_limits() {
    let unbounded = built_job(&snapshot());
    let size_limits = |job: &Job| -> Vec<(String, Option<String>)> {
        let volumes = pod_spec(job).volumes.clone().unwrap();
        volumes
            .into_iter()
            .filter(|v| v.name != "grants")
            .filter_map(|v| Some((v.name, v.empty_dir?.size_limit.map(|q| q.0))))
            .collect()
    };
    assert!(
        size_limits(&unbounded)
            .iter()
            .all(|(_, limit)| limit.is_none()),
        "{:?}",
        size_limits(&unbounded)
    );
    let mut config = ControllerConfig::new("errand.local/errand:dev");
    config.workspace_size_limit = Some(Quantity("20Gi".into()));
    config.scratch_size_limit = Some(Quantity("2Gi".into()));
    let bounded = job(&identity(), &snapshot(), &config);
    assert_eq!(
        size_limits(&bounded),
        vec![
            ("errand-bin".to_owned(), None),
            ("workspace".to_owned(), Some("20Gi".to_owned())),
            ("scratch".to_owned(), Some("2Gi".to_owned())),
        ]
    );
}

#[test]
fn pull_secrets_and_service_account_come_from_the_environment_over_the_chart_and_no_token() {
    let names = |pod: &PodSpec| -> Vec<String> {
        pod.image_pull_secrets
            .iter()
            .flatten()
            .map(|r| r.name.clone())
            .collect()
    };
    let plain = built_job(&snapshot());
    let pod = pod_spec(&plain);
    assert_eq!(
        (names(pod), pod.service_account_name.as_deref()),
        (vec![], None),
        "the namespace's default ServiceAccount, no pull secrets"
    );
    assert_eq!(pod.automount_service_account_token, Some(false));

    let mut config = ControllerConfig::new("errand.local/errand:dev");
    config.image_pull_secrets = vec!["platform-registry".into(), "team-registry".into()];
    config.service_account_name = Some("errand-agents".into());
    let defaults = job(&identity(), &snapshot(), &config);
    let pod = pod_spec(&defaults);
    assert_eq!(names(pod), ["platform-registry", "team-registry"]);
    assert_eq!(pod.service_account_name.as_deref(), Some("errand-agents"));

    let mut own = gpu_environment();
    own.compute.image_pull_secrets = vec!["team-registry".into(), "gpu-registry".into()];
    own.compute.service_account_name = Some("gpu-agents".into());
    let snapshot = resolve_in(&spec(None), None, own);
    let chosen = job(&identity(), &snapshot, &config);
    let pod = pod_spec(&chosen);
    assert_eq!(
        names(pod),
        ["platform-registry", "team-registry", "gpu-registry"],
        "the environment's are added, each once"
    );
    assert_eq!(pod.service_account_name.as_deref(), Some("gpu-agents"));
    assert_eq!(
        pod.automount_service_account_token,
        Some(false),
        "a chosen ServiceAccount still mounts no token"
    );
    for container in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        assert!(
            container
                .volume_mounts
                .iter()
                .flatten()
                .all(|m| !m.mount_path.contains("serviceaccount")),
            "{}",
            container.name
        );
    }
}

#[test]
fn volumes_are_shared_and_only_the_stage_container_gets_the_token() {
    let job = built_job(&snapshot());
    let pod = pod_spec(&job);
    let volumes = pod.volumes.as_ref().unwrap();
    let by_name = |n: &str| volumes.iter().find(|v| v.name == n).unwrap();
    assert!(by_name("errand-bin").empty_dir.is_some());
    assert!(by_name("workspace").empty_dir.is_some());
    assert_eq!(
        by_name("snapshot").config_map.as_ref().unwrap().name,
        "errand-calc-snapshot"
    );
    let grants = by_name("grants").empty_dir.as_ref().unwrap();
    assert_eq!(
        grants.medium.as_deref(),
        Some("Memory"),
        "signed URLs never reach the node's disk"
    );
    let token = by_name("errand-grant-token").projected.as_ref().unwrap();
    assert_eq!(token.default_mode, Some(0o400));
    let sources = token.sources.as_ref().unwrap();
    assert_eq!(sources.len(), 1);
    let projection = sources[0].service_account_token.as_ref().unwrap();
    assert_eq!(projection.audience.as_deref(), Some("errand.dev/grants"));
    assert_eq!(projection.expiration_seconds, Some(600));
    assert_eq!(projection.path, "token");
    assert_eq!(
        pod.automount_service_account_token,
        Some(false),
        "no API token anywhere"
    );

    let stage = mount_paths(container(&job, "errand-stage"));
    assert!(stage.contains(&("/errand/bin", false)));
    assert!(stage.contains(&("/workspace", false)));
    assert!(stage.contains(&("/errand/scratch", false)));
    assert!(stage.contains(&("/errand/snapshot", true)));
    assert!(stage.contains(&("/errand/grants", false)));
    assert!(stage.contains(&("/var/run/secrets/errand.dev/grant-token", true)));
    let agent = mount_paths(container(&job, "agent"));
    assert!(agent.contains(&("/errand/bin", true)));
    assert!(agent.contains(&("/workspace", false)));
    assert!(agent.contains(&("/errand/snapshot", true)));
    assert!(
        container(&job, "agent")
            .volume_mounts
            .iter()
            .flatten()
            .all(|m| m.name != "errand-grant-token"),
        "the agent's container gets no token"
    );
    for c in [container(&job, "errand-stage"), container(&job, "agent")] {
        for m in c
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.name == "grants")
        {
            assert!(
                m.mount_path.starts_with("/errand/"),
                "grants mounted at {}",
                m.mount_path
            );
        }
    }
}

#[test]
fn secrets_are_references_and_their_values_appear_nowhere() {
    let snapshot = snapshot();
    let job = built_job(&snapshot);
    let env = container(&job, "agent").env.clone().unwrap();
    let key = env.iter().find(|e| e.name == "OPENAI_API_KEY").unwrap();
    assert_eq!(key.value, None);
    let selector = key
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(selector.name, "model-keys");
    assert_eq!(selector.key, "openai");
    let config_path = env.iter().find(|e| e.name == "AGENT_CONFIG_PATH").unwrap();
    assert_eq!(
        config_path.value.as_deref(),
        Some("/errand/snapshot/agent-config.json")
    );
    assert_eq!(
        env.iter()
            .find(|e| e.name == "PRECISION")
            .unwrap()
            .value
            .as_deref(),
        Some("2")
    );

    let everything = [
        serde_json::to_string(&job).unwrap(),
        serde_json::to_string(&snapshot_config_map(&identity(), &snapshot)).unwrap(),
    ];
    for text in everything {
        assert!(!text.contains(SECRET_VALUE));
    }
}

#[test]
fn pods_map_back_to_their_execution() {
    let job = built_job(&snapshot());
    let template = job.spec.unwrap().template.metadata.unwrap();
    assert_eq!(
        template.annotations.unwrap()["errand.dev/execution-name"],
        "calc"
    );
    assert_eq!(
        template.labels.unwrap()["errand.dev/execution-uid"],
        "0d9f6a52-1111-2222-3333-444455556666"
    );
}

#[test]
fn an_execution_without_a_uid_cannot_have_children() {
    let mut exec = AgentExecution::test().with_spec(spec(None));
    exec.metadata.uid = None;
    assert_eq!(
        ExecutionOwner::of(&exec),
        Err(BuildError::MissingMetadata("uid"))
    );
}

#[test]
fn errands_containers_get_the_otlp_endpoint_only_for_an_auto_telemetry_run() {
    let mut config = ControllerConfig::new("errand.local/errand:dev");
    config.otlp_endpoint =
        Some(crate::telemetry::TelemetryTarget::parse("test", "http://otelcol:4318").unwrap());
    let endpoint_args = |job: &Job, name: &str| -> Vec<String> {
        let command = container(job, name).command.clone().unwrap();
        let at = command.iter().position(|a| a == "--otlp-endpoint");
        // Before the agent's own command, so the runner, not the agent, takes the flag.
        let agent_start = command
            .iter()
            .position(|a| a == "--")
            .unwrap_or(command.len());
        assert!(at.is_none_or(|i| i < agent_start), "{command:?}");
        at.map(|i| command[i..=i + 1].to_vec()).unwrap_or_default()
    };

    let traced = Snapshot {
        auto_telemetry: true,
        ..snapshot()
    };
    let job_traced = job(&identity(), &traced, &config);
    for name in [STAGE_CONTAINER, AGENT_CONTAINER] {
        assert_eq!(
            endpoint_args(&job_traced, name),
            ["--otlp-endpoint", "http://otelcol:4318"]
        );
    }
    // The agent's OTEL_* variables come from the runner, with the run's span; the container
    // itself gets no telemetry setting, and still no token or store credential.
    let agent = container(&job_traced, AGENT_CONTAINER);
    assert!(
        agent
            .env
            .iter()
            .flatten()
            .all(|e| !e.name.starts_with("OTEL_") && e.name != "TRACEPARENT"),
        "{:?}",
        agent.env
    );
    assert_eq!(
        pod_spec(&job_traced).automount_service_account_token,
        Some(false)
    );

    for (snapshot, config) in [
        (snapshot(), config.clone()),
        (traced, ControllerConfig::new("errand.local/errand:dev")),
    ] {
        let plain = job(&identity(), &snapshot, &config);
        for name in [STAGE_CONTAINER, AGENT_CONTAINER] {
            assert!(endpoint_args(&plain, name).is_empty(), "{name}");
        }
    }
}

/// The fixture snapshot with the test catalog's `analysis` extension.
fn snapshot_with_extension() -> Snapshot {
    let mut spec = spec(None);
    spec.extension = Some(crate::api::Extension {
        kind: "analysis".into(),
        config: None,
    });
    resolve(&spec, None)
}

#[test]
fn an_extension_runs_in_its_own_restricted_container_with_grants_the_agent_never_mounts() {
    let plain = built_job(&snapshot());
    assert_eq!(
        pod_spec(&plain).containers.len(),
        1,
        "no extension, no container"
    );
    let names = |job: &Job| -> Vec<String> {
        pod_spec(job)
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect()
    };
    assert!(!names(&plain).contains(&"extension-grants".to_owned()));

    let snapshot = snapshot_with_extension();
    let extension = snapshot.extension.clone().unwrap();
    let job = built_job(&snapshot);
    let pod = pod_spec(&job);
    assert_eq!(
        pod.containers
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["agent", "errand-extension"]
    );
    let step = container(&job, "errand-extension");
    assert_eq!(step.image.as_ref(), Some(&extension.container.image));
    let command = step.command.as_ref().unwrap();
    assert_eq!(command[..2], ["/errand/bin/errand", "run-extension"]);
    for (flag, value) in [
        ("--grants", EXTENSION_GRANTS_PATH),
        ("--handoff", HANDOFF_PATH),
        ("--dir", EXTENSION_DIR),
        ("--snapshot", SNAPSHOT_PATH),
    ] {
        let at = command.iter().position(|a| a == flag).unwrap();
        assert_eq!(command[at + 1], value, "{flag}");
    }
    assert!(
        step.env.is_none(),
        "no Secret and no variable reaches the step"
    );
    let sc = step.security_context.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.run_as_non_root, Some(true));
    let resources = step.resources.as_ref().unwrap();
    assert!(
        !resources
            .limits
            .as_ref()
            .unwrap()
            .contains_key("nvidia.com/gpu"),
        "the step gets no GPU"
    );
    let step_mounts = mount_paths(step);
    assert_eq!(
        step_mounts,
        [
            ("/errand/bin", true),
            ("/errand/snapshot", true),
            ("/errand/extension-grants", false),
            ("/errand/handoff", true),
            ("/errand/extension", false),
        ],
        "neither the workspace nor the agent's grants"
    );

    // The extension's grants are in memory, written by stage, never mounted by the agent, which
    // writes the handoff.
    let volumes = pod.volumes.as_ref().unwrap();
    let grants = volumes
        .iter()
        .find(|v| v.name == "extension-grants")
        .unwrap();
    assert_eq!(
        grants.empty_dir.as_ref().unwrap().medium.as_deref(),
        Some("Memory")
    );
    assert!(
        mount_paths(container(&job, "errand-stage")).contains(&("/errand/extension-grants", false))
    );
    let agent = container(&job, "agent");
    assert!(
        agent
            .volume_mounts
            .iter()
            .flatten()
            .all(|m| m.name != "extension-grants" && m.name != "extension"),
        "the agent's container never mounts the extension's grants"
    );
    assert!(mount_paths(agent).contains(&("/errand/handoff", false)));
    for errand in [container(&job, "errand-stage"), agent] {
        let args = errand.command.as_ref().unwrap();
        let at = args.iter().position(|a| a == "--extension-grants").unwrap();
        assert_eq!(args[at + 1], EXTENSION_GRANTS_PATH);
        let at = args.iter().position(|a| a == "--handoff").unwrap();
        assert_eq!(args[at + 1], HANDOFF_PATH);
    }

    // The backstop covers the step too.
    let deadline = |job: &Job| job.spec.as_ref().unwrap().active_deadline_seconds.unwrap();
    assert_eq!(deadline(&job), deadline(&plain) + extension.timeout_seconds);
}
