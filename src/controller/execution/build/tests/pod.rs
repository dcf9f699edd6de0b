//! The pod of an execution's Job: restricted security, compute and placement, the stage and agent containers, bounded volumes, pull secrets, the token only staging gets, secrets as references, and telemetry.

use super::*;

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
    // Exactly the flags `errand stage` and `errand run-agent` parse (src/cli/commands/pod.rs).
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
        serde_json::to_string(&snapshot_config_map(&identity(), &snapshot, &config())).unwrap(),
    ];
    for text in everything {
        assert!(!text.contains(SECRET_VALUE));
    }
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
