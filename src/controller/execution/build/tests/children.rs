//! The execution's children as objects: owned by it, deterministically named, the immutable snapshot ConfigMap, and the Job that runs once (suspended for Kueue).

use super::*;

#[test]
fn children_are_owned_by_the_execution_as_controller() {
    let snapshot = snapshot();
    let metas = [
        built_job(&snapshot).metadata,
        snapshot_config_map(&identity(), &snapshot, &config()).metadata,
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
        snapshot_config_map(&identity(), &snapshot, &config())
            .metadata
            .name
            .as_deref(),
        Some("errand-calc-snapshot")
    );
}

#[test]
fn the_snapshot_config_map_is_immutable_holds_snapshot_and_agent_config_and_the_finalizer() {
    let snapshot = snapshot();
    let cm = snapshot_config_map(&identity(), &snapshot, &config());
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
