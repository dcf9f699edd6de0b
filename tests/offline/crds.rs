//! The committed CRDs match the generated ones, and their CEL rules hold as the API server would apply them.

use errand::api::{Agent, AgentExecution, crds};
use kube::CustomResourceExt;
use kube::core::cel::Validator;
use serde_json::{Value, json};

#[test]
fn committed_crds_match_generated() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    for (file, crd) in crds::all() {
        let committed = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        assert!(
            committed == crds::to_yaml(&crd).unwrap(),
            "crds/{file} is stale: regenerate with `cargo run -- crds --out-dir crds`"
        );
    }
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(
        files,
        crds::all().len(),
        "crds/ holds files that errand does not generate"
    );
}

#[test]
fn crd_yaml_carries_cel_rules_descriptions_and_columns() {
    let yaml = crds::all_yaml().unwrap();
    for expected in [
        r#"rule: "(has(self.agentRef) ? 1 : 0) + (has(self.agent) ? 1 : 0) + (has(self.rerunOf) ? 1 : 0) == 1""#,
        "message: spec is immutable except cancel",
        "rule: self || !oldSelf",
        "message: mount paths must not overlap",
        "rule: self.all(k, k in ['cpu', 'memory', 'nvidia.com/gpu'])",
        "message: Agent spec is immutable; delete and re-create the Agent to change it",
        "default: 3600",
        "x-kubernetes-list-type: map",
        "jsonPath: .status.phase",
        "Seconds the pod may wait to start",
        "The Agent to run, by name in this namespace.",
    ] {
        assert!(yaml.contains(expected), "missing {expected:?}");
    }
}

fn schema<K: CustomResourceExt>() -> Value {
    let crd = K::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .as_ref()
        .unwrap();
    serde_json::to_value(schema).unwrap()
}

fn execution(spec: Value) -> Value {
    json!({"apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution", "metadata": {"name": "x", "namespace": "team-a"}, "spec": spec})
}

/// The CEL messages the API server would return for `object` (and `old`, on update).
fn cel_messages(schema: &Value, object: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(schema, object, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors.into_vec().into_iter().map(|e| e.message).collect(),
    }
}

fn valid_spec() -> Value {
    json!({"agentRef": {"name": "calculator"}, "input": "What is 12 multiplied by 8?"})
}

#[test]
fn a_valid_execution_passes_every_rule() {
    let schema = schema::<AgentExecution>();
    let mut spec = valid_spec();
    spec["workdir"] = json!({"base": "repo", "artifactMounts": [{"ref": "data", "mountPath": "in/data"}, {"ref": "more", "mountPath": "in/database"}]});
    assert_eq!(
        cel_messages(&schema, &execution(spec), None),
        Vec::<String>::new()
    );
}

#[test]
fn exactly_one_agent_source() {
    let schema = schema::<AgentExecution>();
    let neither = execution(json!({"input": "hi"}));
    assert_eq!(
        cel_messages(&schema, &neither, None),
        vec!["exactly one of agentRef, agent or rerunOf must be set"]
    );
    let mut both = valid_spec();
    both["agent"] = json!({"runtime": {"image": "i", "command": ["a"]}, "config": {"config_format": "agents-spec-v1"}});
    assert_eq!(
        cel_messages(&schema, &execution(both), None),
        vec!["exactly one of agentRef, agent or rerunOf must be set"]
    );
}

#[test]
fn a_rerun_sets_nothing_its_snapshot_holds() {
    let schema = schema::<AgentExecution>();
    let rerun = json!({"rerunOf": {"name": "first"}, "ttlSecondsAfterFinished": 60});
    assert_eq!(
        cel_messages(&schema, &execution(rerun.clone()), None),
        Vec::<String>::new()
    );
    for (field, value) in [
        ("input", json!("new")),
        ("environmentRef", json!({"name": "prod"})),
        ("workdir", json!({"base": "repo"})),
        ("queueName", json!("gpu")),
        ("autoTelemetry", json!(true)),
    ] {
        let mut spec = rerun.clone();
        spec[field] = value;
        assert_eq!(
            cel_messages(&schema, &execution(spec), None),
            vec![errand::api::RERUN_TAKES_THE_SNAPSHOT],
            "{field}"
        );
    }
    let mut both = rerun;
    both["agentRef"] = json!({"name": "calculator"});
    assert_eq!(
        cel_messages(&schema, &execution(both), None),
        vec!["exactly one of agentRef, agent or rerunOf must be set"]
    );
}

#[test]
fn mount_paths_in_cel() {
    let schema = schema::<AgentExecution>();
    let with_mounts = |mounts: Value| {
        let mut spec = valid_spec();
        spec["workdir"] = json!({"artifactMounts": mounts});
        cel_messages(&schema, &execution(spec), None)
    };
    assert_eq!(
        with_mounts(json!([{"ref": "d", "mountPath": "../x"}])),
        vec!["mountPath must not contain '.' or '..' segments"]
    );
    assert_eq!(
        with_mounts(json!([{"ref": "d", "mountPath": "/etc"}])),
        vec!["mountPath must be relative"]
    );
    assert_eq!(
        with_mounts(json!([{"ref": "d", "mountPath": "a//b"}])),
        vec!["mountPath must not end in '/' or contain '//'"]
    );
    assert_eq!(
        with_mounts(json!([{"ref": "d", "mountPath": "in"}, {"ref": "e", "mountPath": "in/x"}])),
        vec!["mount paths must not overlap"]
    );
    assert_eq!(
        with_mounts(json!([{"ref": "d", "mountPath": "same"}, {"ref": "e", "mountPath": "same"}])),
        vec!["mount paths must not overlap"]
    );
}

#[test]
fn compute_keys_in_cel() {
    let schema = schema::<AgentExecution>();
    let mut spec = valid_spec();
    spec["environment"] =
        json!({"compute": {"resources": {"limits": {"cpu": "1", "ephemeral-storage": "1Gi"}}}});
    assert_eq!(
        cel_messages(&schema, &execution(spec), None),
        vec![
            "\"ephemeral-storage\" is not allowed; only cpu, memory and nvidia.com/gpu may be set"
        ]
    );
}

#[test]
fn reserved_environment_variables_in_cel() {
    let environment = schema::<errand::api::AgentEnvironment>();
    let schema = schema::<AgentExecution>();
    let with_overlay = |overlay: Value| {
        let mut spec = valid_spec();
        spec["environment"] = json!({"overlay": overlay});
        cel_messages(&schema, &execution(spec), None)
    };
    let reserved = |name: &str| {
        format!(
            "\"{name}\" is reserved: ERRAND_* and AGENT_CONFIG_PATH are reserved for errand's runner"
        )
    };
    assert_eq!(
        with_overlay(json!({"secrets": {"AGENT_CONFIG_PATH": "model-keys#openai"}})),
        vec![reserved("AGENT_CONFIG_PATH")]
    );
    assert_eq!(
        with_overlay(json!({"env": {"ERRAND_INPUT": "x"}})),
        vec![reserved("ERRAND_INPUT")]
    );
    assert_eq!(
        with_overlay(
            json!({"secrets": {"OPENAI_API_KEY": "model-keys#openai"}, "env": {"MODE": "x"}})
        ),
        Vec::<String>::new()
    );
    let object = json!({"apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment", "metadata": {"name": "e"},
                        "spec": {"overlay": {"secrets": {"ERRAND_TOKEN": "s#k"}}}});
    assert_eq!(
        cel_messages(&environment, &object, None),
        vec![reserved("ERRAND_TOKEN")]
    );
}

#[test]
fn spec_is_immutable_except_cancel() {
    let schema = schema::<AgentExecution>();
    let old = execution(valid_spec());
    let mut changed = valid_spec();
    changed["input"] = json!("What is 7 times 6?");
    assert_eq!(
        cel_messages(&schema, &execution(changed), Some(&old)),
        vec!["spec is immutable except cancel"]
    );
    let mut added = valid_spec();
    added["queueName"] = json!("gpu-queue");
    assert_eq!(
        cel_messages(&schema, &execution(added), Some(&old)),
        vec!["spec is immutable except cancel"]
    );
    let mut cancelled = valid_spec();
    cancelled["cancel"] = json!(true);
    assert_eq!(
        cel_messages(&schema, &execution(cancelled.clone()), Some(&old)),
        Vec::<String>::new()
    );
    let mut uncancelled = valid_spec();
    uncancelled["cancel"] = json!(false);
    assert_eq!(
        cel_messages(
            &schema,
            &execution(uncancelled),
            Some(&execution(cancelled))
        ),
        vec!["cancel can only change from false to true"]
    );
}

#[test]
fn agent_spec_is_immutable() {
    let schema = schema::<Agent>();
    let agent = |image: &str| {
        json!({"apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "a"},
               "spec": {"runtime": {"image": image, "command": ["run"]}, "config": {"config_format": "agents-spec-v1"}}})
    };
    assert_eq!(
        cel_messages(&schema, &agent("v1"), Some(&agent("v1"))),
        Vec::<String>::new()
    );
    assert_eq!(
        cel_messages(&schema, &agent("v2"), Some(&agent("v1"))),
        vec!["Agent spec is immutable; delete and re-create the Agent to change it"]
    );
}

fn environment(compute: Value) -> Value {
    json!({"apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment", "metadata": {"name": "e"},
           "spec": {"compute": compute}})
}

#[test]
fn a_gpu_request_without_an_equal_limit_is_refused_with_the_environment() {
    let schema = schema::<errand::api::AgentEnvironment>();
    let gpu = "requests[nvidia.com/gpu] needs an equal limits[nvidia.com/gpu]: GPUs cannot be overcommitted";
    let refused = [
        json!({"requests": {"nvidia.com/gpu": "1"}}),
        json!({"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "1"}}),
        json!({"requests": {"nvidia.com/gpu": 1}, "limits": {"cpu": "1"}}),
    ];
    for resources in refused {
        assert_eq!(
            cel_messages(&schema, &environment(json!({"resources": resources})), None),
            vec![gpu],
            "{resources}"
        );
    }
    let equal = json!({"resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": 1}}});
    assert_eq!(
        cel_messages(&schema, &environment(equal), None),
        Vec::<String>::new()
    );
    let limit_only = json!({"resources": {"limits": {"nvidia.com/gpu": "4"}}});
    assert_eq!(
        cel_messages(&schema, &environment(limit_only), None),
        Vec::<String>::new()
    );
}

#[test]
fn requests_above_limits_are_refused_in_cel_in_environments_and_inline() {
    let inline = schema::<AgentExecution>();
    let schema = schema::<errand::api::AgentEnvironment>();
    let above = "requests must not exceed limits (cpu, memory)";
    let with = |requests: Value, limits: Value| {
        cel_messages(
            &schema,
            &environment(json!({"resources": {"requests": requests, "limits": limits}})),
            None,
        )
    };
    assert_eq!(with(json!({"cpu": "2"}), json!({"cpu": "1"})), vec![above]);
    assert_eq!(
        with(json!({"cpu": "1001m"}), json!({"cpu": 1})),
        vec![above]
    );
    assert_eq!(
        with(json!({"memory": "1025Mi"}), json!({"memory": "1Gi"})),
        vec![above]
    );
    assert_eq!(
        with(json!({"cpu": "500m"}), json!({"cpu": 1})),
        Vec::<String>::new()
    );
    assert_eq!(
        with(json!({"memory": "1Gi"}), json!({"memory": "1024Mi"})),
        Vec::<String>::new()
    );
    assert_eq!(
        with(json!({"cpu": "4"}), json!({"memory": "1Gi"})),
        Vec::<String>::new(),
        "no limit to exceed"
    );

    let mut spec = valid_spec();
    spec["environment"] =
        json!({"compute": {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}});
    assert_eq!(cel_messages(&inline, &execution(spec), None), vec![above]);
}

#[test]
fn toleration_operators_and_effects_are_refused_in_cel() {
    let schema = schema::<errand::api::AgentEnvironment>();
    let with = |tolerations: Value| {
        cel_messages(
            &schema,
            &environment(json!({"tolerations": tolerations})),
            None,
        )
    };
    assert_eq!(
        with(json!([{"key": "gpu", "operator": "Bogus"}])),
        vec!["a toleration's operator must be one of Equal, Exists"]
    );
    assert_eq!(
        with(json!([{"operator": "Exists", "effect": "NoRun"}])),
        vec![
            "a toleration's effect must be empty or one of NoSchedule, PreferNoSchedule, NoExecute"
        ]
    );
    assert_eq!(
        with(
            json!([{"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}, {"operator": "Exists"}])
        ),
        Vec::<String>::new()
    );
}

#[test]
fn input_and_timeouts_have_documented_maximums_in_the_schema() {
    let schema = schema::<AgentExecution>();
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(
        spec["input"]["maxLength"],
        json!(errand::api::MAX_INPUT_BYTES)
    );
    for field in ["timeoutSeconds", "startTimeoutSeconds"] {
        assert_eq!(
            spec[field]["maximum"].as_f64(),
            Some(errand::api::MAX_TIMEOUT_SECONDS as f64),
            "{field}"
        );
    }
}
