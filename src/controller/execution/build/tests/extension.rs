//! The extension's container: its own restricted container, with grants the agent never mounts.

use super::*;

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
