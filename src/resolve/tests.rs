//! Unit and property tests of resolution: one test per admission rule, with the exact message.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::api::{
    AgentExecutionSpec, AgentSpec, Compute, ComputeResources, Extension, Reference, Workdir,
};
use crate::testing::{NS, SECRET_VALUE, fileset_digest, workdir};

fn problems(spec: &AgentExecutionSpec, catalog: &InMemoryCatalog) -> Vec<String> {
    let error = resolve_execution(NS, spec, catalog).expect_err("the spec must be rejected");
    error.problems.iter().map(ToString::to_string).collect()
}

fn only_problem(spec: &AgentExecutionSpec) -> String {
    let mut all = problems(spec, &InMemoryCatalog::test());
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

fn mounts(paths: &[(&str, &str)]) -> Option<Workdir> {
    Some(workdir("repo", paths))
}

#[test]
fn resolves_and_merges_a_valid_execution() {
    let spec = AgentExecutionSpec::test().with_workdir("repo", &[("data#raw/", "inputs/raw")]);
    let environment = AgentEnvironmentSpec::test().with_env("PRECISION", "4");
    let catalog = InMemoryCatalog::test().with_environment(NS, "prod", environment);
    let snapshot = resolve_execution(NS, &spec, &catalog).unwrap();
    assert_eq!(snapshot.agent.name, "calculator");
    assert_eq!(snapshot.command(), vec!["python3", "/agent/calculator.py"]);
    assert_eq!(snapshot.environment.as_deref(), Some("prod"));
    assert_eq!(
        snapshot.plain_env().get("PRECISION").map(String::as_str),
        Some("4"),
        "the environment wins"
    );
    assert_eq!(
        snapshot.secrets,
        vec![SecretBinding {
            env: "OPENAI_API_KEY".into(),
            secret: "model-keys".into(),
            key: "openai".into()
        }]
    );
    assert_eq!(
        snapshot.workdir.base.as_ref().unwrap().digest,
        fileset_digest('a')
    );
    assert_eq!(
        snapshot.workdir.mounts[0].content.path.as_deref(),
        Some("raw/")
    );
    assert_eq!(
        snapshot.start_timeout_seconds,
        DEFAULT_START_TIMEOUT_SECONDS
    );
    assert!(snapshot.digest().starts_with("sha256:") && snapshot.digest().len() == 71);
}

#[test]
fn secret_values_never_reach_the_snapshot() {
    let snapshot =
        resolve_execution(NS, &AgentExecutionSpec::test(), &InMemoryCatalog::test()).unwrap();
    let text = String::from_utf8(snapshot.canonical_json()).unwrap();
    assert!(text.contains("\"secret\":\"model-keys\""), "{text}");
    assert!(!text.contains(SECRET_VALUE), "{text}");
    assert!(!format!("{snapshot:?}").contains(SECRET_VALUE));
}

#[test]
fn unknown_agent() {
    let mut spec = AgentExecutionSpec::test();
    spec.agent_ref = Some(Reference::named("nope"));
    assert_eq!(
        only_problem(&spec),
        "spec.agentRef.name: Agent \"nope\" not found in namespace \"team-a\""
    );
}

#[test]
fn bad_agent_name() {
    let mut spec = AgentExecutionSpec::test();
    spec.agent_ref = Some(Reference::named("Calc_1"));
    assert_eq!(
        only_problem(&spec),
        "spec.agentRef.name: \"Calc_1\" is not a valid name (a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit, at most 253 characters)"
    );
}

#[test]
fn agent_in_another_namespace() {
    let mut spec = AgentExecutionSpec::test();
    spec.agent_ref = Some(Reference {
        name: "calculator".into(),
        namespace: Some("team-b".into()),
    });
    assert_eq!(
        only_problem(&spec),
        "spec.agentRef.namespace: \"team-b\" is another namespace; references must stay in namespace \"team-a\""
    );
}

#[test]
fn exactly_one_agent() {
    let mut both = AgentExecutionSpec::test();
    both.agent = Some(AgentSpec::test());
    assert_eq!(
        only_problem(&both),
        "spec: exactly one of agentRef, agent or rerunOf must be set"
    );
    let mut neither = AgentExecutionSpec::test();
    neither.agent_ref = None;
    assert_eq!(
        only_problem(&neither),
        "spec: exactly one of agentRef, agent or rerunOf must be set"
    );
}

#[test]
fn inline_agent_is_named_after_its_config() {
    let mut spec = AgentExecutionSpec::test();
    spec.agent_ref = None;
    spec.agent = Some(AgentSpec::test());
    assert_eq!(
        resolve_execution(NS, &spec, &InMemoryCatalog::test())
            .unwrap()
            .agent
            .name,
        "calculator"
    );
}

#[test]
fn unknown_config_format() {
    let agent = AgentSpec::test().with_config("config_format", json!("langchain-v0"));
    let mut spec = AgentExecutionSpec::test();
    spec.agent_ref = None;
    spec.agent = Some(agent);
    assert_eq!(
        only_problem(&spec),
        "spec.agent.config.config_format: \"langchain-v0\" is not an accepted format; accepted: agents-spec-v1, nemo-agents-spec-v1"
    );
}

#[test]
fn nemo_format_is_accepted_as_is() {
    let agent = AgentSpec::test()
        .with_config("config_format", json!("nemo-agents-spec-v1"))
        .with_config(
            "workflow",
            json!({"_type": "react_agent", "llm_name": "default"}),
        );
    let catalog = InMemoryCatalog::test().with_agent(NS, "calculator", agent);
    let snapshot = resolve_execution(NS, &AgentExecutionSpec::test(), &catalog).unwrap();
    assert_eq!(
        snapshot.config["workflow"],
        json!({"_type": "react_agent", "llm_name": "default"})
    );
}

#[test]
fn missing_config_format_in_a_referenced_agent() {
    let agent = AgentSpec::test().without_config("config_format");
    let catalog = InMemoryCatalog::test().with_agent(NS, "calculator", agent);
    assert_eq!(
        problems(&AgentExecutionSpec::test(), &catalog),
        vec![
            "Agent \"calculator\" spec.config.config_format: is required; accepted: agents-spec-v1, nemo-agents-spec-v1"
        ]
    );
}

#[test]
fn unknown_environment() {
    let mut spec = AgentExecutionSpec::test();
    spec.environment_ref = Some(Reference::named("staging"));
    assert_eq!(
        only_problem(&spec),
        "spec.environmentRef.name: AgentEnvironment \"staging\" not found in namespace \"team-a\""
    );
}

fn with_secret_binding(env: &str, target: &str) -> InMemoryCatalog {
    let environment = AgentEnvironmentSpec::test().with_secrets(&[(env, target)]);
    InMemoryCatalog::test().with_environment(NS, "prod", environment)
}

#[test]
fn missing_secret() {
    assert_eq!(
        problems(
            &AgentExecutionSpec::test(),
            &with_secret_binding("OPENAI_API_KEY", "other-keys#openai")
        ),
        vec![
            "AgentEnvironment \"prod\" spec.overlay.secrets.OPENAI_API_KEY: Secret \"other-keys\" not found in namespace \"team-a\""
        ]
    );
}

#[test]
fn missing_secret_key() {
    assert_eq!(
        problems(
            &AgentExecutionSpec::test(),
            &with_secret_binding("OPENAI_API_KEY", "model-keys#anthropic")
        ),
        vec![
            "AgentEnvironment \"prod\" spec.overlay.secrets.OPENAI_API_KEY: Secret \"model-keys\" has no key \"anthropic\""
        ]
    );
}

#[test]
fn secret_key_defaults_to_the_variable_name() {
    assert_eq!(
        problems(
            &AgentExecutionSpec::test(),
            &with_secret_binding("OPENAI_API_KEY", "model-keys")
        ),
        vec![
            "AgentEnvironment \"prod\" spec.overlay.secrets.OPENAI_API_KEY: Secret \"model-keys\" has no key \"OPENAI_API_KEY\""
        ]
    );
}

#[test]
fn secret_bound_to_a_reserved_variable() {
    assert_eq!(
        problems(
            &AgentExecutionSpec::test(),
            &with_secret_binding("AGENT_CONFIG_PATH", "model-keys#openai")
        ),
        vec![
            "AgentEnvironment \"prod\" spec.overlay.secrets.AGENT_CONFIG_PATH: \"AGENT_CONFIG_PATH\" is reserved for errand's runner (ERRAND_* and AGENT_CONFIG_PATH)"
        ]
    );
    assert_eq!(
        problems(
            &AgentExecutionSpec::test(),
            &with_secret_binding("ERRAND_INPUT", "model-keys#openai")
        ),
        vec![
            "AgentEnvironment \"prod\" spec.overlay.secrets.ERRAND_INPUT: \"ERRAND_INPUT\" is reserved for errand's runner (ERRAND_* and AGENT_CONFIG_PATH)"
        ]
    );
}

#[test]
fn secret_in_another_namespace() {
    assert_eq!(
        problems(
            &AgentExecutionSpec::test(),
            &with_secret_binding("OPENAI_API_KEY", "team-b/model-keys#openai")
        ),
        vec![
            "AgentEnvironment \"prod\" spec.overlay.secrets.OPENAI_API_KEY: \"team-b/model-keys#openai\" names Secret namespace \"team-b\"; references must stay in namespace \"team-a\""
        ]
    );
}

#[test]
fn reserved_plain_env_in_the_agent_config() {
    let mut spec = AgentExecutionSpec::test();
    let agent = AgentSpec::test().with_config("env", json!({"ERRAND_ARTIFACTS_DIR": "/tmp"}));
    spec.agent_ref = None;
    spec.agent = Some(agent);
    assert_eq!(
        problems(&spec, &InMemoryCatalog::test())[0],
        "spec.agent.config.env.ERRAND_ARTIFACTS_DIR: \"ERRAND_ARTIFACTS_DIR\" is reserved for errand's runner (ERRAND_* and AGENT_CONFIG_PATH)"
    );
}

fn with_compute(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> AgentExecutionSpec {
    let to_map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), Quantity((*v).into())))
            .collect()
    };
    let mut spec = AgentExecutionSpec::test();
    spec.environment_ref = None;
    spec.environment = Some(AgentEnvironmentSpec {
        compute: Compute {
            resources: Some(ComputeResources {
                limits: to_map(limits),
                requests: to_map(requests),
            }),
            ..Default::default()
        },
        ..Default::default()
    });
    spec
}

#[test]
fn compute_key_outside_the_three() {
    assert_eq!(
        only_problem(&with_compute(&[("ephemeral-storage", "1Gi")], &[])),
        "spec.environment.compute.resources.limits[ephemeral-storage]: \"ephemeral-storage\" is not allowed; only cpu, memory, nvidia.com/gpu may be set"
    );
}

#[test]
fn compute_quantities_and_gpus() {
    assert_eq!(
        only_problem(&with_compute(&[("memory", "lots")], &[])),
        "spec.environment.compute.resources.limits[memory]: \"lots\" is not a valid quantity: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
    assert_eq!(
        only_problem(&with_compute(&[("nvidia.com/gpu", "500m")], &[])),
        "spec.environment.compute.resources.limits[nvidia.com/gpu]: \"500m\" must be a whole number of GPUs"
    );
    assert_eq!(
        only_problem(&with_compute(
            &[("nvidia.com/gpu", "2")],
            &[("nvidia.com/gpu", "1")]
        )),
        "spec.environment.compute.resources.requests[nvidia.com/gpu]: \"1\" needs an equal limits[nvidia.com/gpu] (GPUs cannot be overcommitted; set the limit alone)"
    );
    assert!(
        resolve_execution(
            NS,
            &with_compute(
                &[("cpu", "500m"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")],
                &[("cpu", "250m")]
            ),
            &InMemoryCatalog::test()
        )
        .is_ok()
    );
}

#[test]
fn missing_fileset() {
    let mut spec = AgentExecutionSpec::test();
    spec.workdir = Some(Workdir {
        base: Some("nope#src/".into()),
        ..Default::default()
    });
    assert_eq!(
        only_problem(&spec),
        "spec.workdir.base: Fileset \"nope\" not found in namespace \"team-a\""
    );
}

#[test]
fn fileset_never_pushed() {
    let mut spec = AgentExecutionSpec::test();
    spec.workdir = mounts(&[("empty", "e")]);
    assert_eq!(
        only_problem(&spec),
        "spec.workdir.artifactMounts[0].ref: Fileset \"empty\" has no content yet; push it with `errand filesets push`"
    );
}

#[test]
fn fileset_in_another_namespace() {
    let mut spec = AgentExecutionSpec::test();
    spec.workdir = mounts(&[("team-b/data", "d")]);
    assert_eq!(
        only_problem(&spec),
        "spec.workdir.artifactMounts[0].ref: \"team-b/data\" names Fileset namespace \"team-b\"; references must stay in namespace \"team-a\""
    );
}

#[test]
fn fileset_path_escaping_the_tree() {
    let mut spec = AgentExecutionSpec::test();
    spec.workdir = Some(Workdir {
        base: Some("repo#../etc/".into()),
        ..Default::default()
    });
    assert_eq!(
        only_problem(&spec),
        "spec.workdir.base: path in \"repo#../etc/\": \"../etc/\" must not contain '..'"
    );
}

#[test]
fn mount_path_rules() {
    let mut spec = AgentExecutionSpec::test();
    spec.workdir = mounts(&[("data", "../x")]);
    assert_eq!(
        only_problem(&spec),
        "spec.workdir.artifactMounts[0].mountPath: \"../x\" must not contain '..'"
    );
    spec.workdir = mounts(&[("data", "/abs")]);
    assert_eq!(
        only_problem(&spec),
        "spec.workdir.artifactMounts[0].mountPath: \"/abs\" must be relative (no leading '/')"
    );
    spec.workdir = mounts(&[("data", "in"), ("repo", "in/nested")]);
    assert_eq!(
        only_problem(&spec),
        "spec.workdir.artifactMounts[1].mountPath: \"in/nested\" overlaps mount path \"in\" (artifactMounts[0])"
    );
}

#[test]
fn unknown_extension_kind() {
    let mut spec = AgentExecutionSpec::test();
    spec.extension = Some(Extension {
        kind: "evaluation".into(),
        config: None,
    });
    assert_eq!(
        only_problem(&spec),
        "spec.extension.kind: \"evaluation\" names no installed AgentExtension; installed kinds: analysis"
    );
}

#[test]
fn the_extension_is_snapshotted_with_its_checked_config() {
    let mut spec = AgentExecutionSpec::test();
    spec.extension = Some(Extension {
        kind: "analysis".into(),
        config: json!({"depth": 0}).as_object().cloned(),
    });
    assert_eq!(
        only_problem(&spec),
        "spec.extension.config.depth: 0 must be at least 1"
    );
    spec.extension.as_mut().unwrap().config = json!({"depth": 3}).as_object().cloned();
    let snapshot = resolve_execution(NS, &spec, &InMemoryCatalog::test()).unwrap();
    let extension = snapshot.extension.unwrap();
    assert_eq!(extension.name, "analysis");
    assert_eq!(extension.results, ["analysis-report"]);
    assert_eq!(
        extension.container.image,
        "errand.local/test-extension:test"
    );
    assert_eq!(extension.config["depth"], 3);
}

#[test]
fn timeouts_must_be_positive() {
    let mut spec = AgentExecutionSpec::test();
    spec.timeout_seconds = 0;
    spec.start_timeout_seconds = Some(-5);
    assert_eq!(
        problems(&spec, &InMemoryCatalog::test()),
        vec![
            "spec.timeoutSeconds: 0 must be at least 1",
            "spec.startTimeoutSeconds: -5 must be at least 1"
        ]
    );
}

#[test]
fn pull_secret_and_service_account_names_are_checked() {
    let mut environment = AgentEnvironmentSpec::test();
    environment.compute.image_pull_secrets = vec!["registry".into(), "Bad_Name".into()];
    environment.compute.service_account_name = Some("agents/x".into());
    let catalog = InMemoryCatalog::test().with_environment(NS, "prod", environment);
    let problems = problems(&AgentExecutionSpec::test(), &catalog);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with(
            "AgentEnvironment \"prod\" spec.compute.imagePullSecrets[1]: \"Bad_Name\" is not a valid name (a DNS-1123 subdomain"
        ),
        "{problems:?}"
    );
    assert!(
        problems[1].starts_with("AgentEnvironment \"prod\" spec.compute.serviceAccountName:"),
        "{problems:?}"
    );
}

#[test]
fn the_lifetime_after_finishing_is_bounded() {
    let mut spec = AgentExecutionSpec::test();
    for fine in [0, 3600, crate::api::MAX_TTL_SECONDS_AFTER_FINISHED] {
        spec.ttl_seconds_after_finished = Some(fine);
        assert!(
            resolve_execution(NS, &spec, &InMemoryCatalog::test()).is_ok(),
            "{fine}"
        );
    }
    spec.ttl_seconds_after_finished = Some(-1);
    assert_eq!(
        problems(&spec, &InMemoryCatalog::test()),
        vec!["spec.ttlSecondsAfterFinished: -1 is out of range: 0 to 31622400 (366 days)"]
    );
}

#[test]
fn provider_is_checked_after_the_merge() {
    let bad = AgentEnvironmentSpec::test().with_provider("acme-llm");
    assert_eq!(
        problems(
            &AgentExecutionSpec::test(),
            &InMemoryCatalog::test().with_environment(NS, "prod", bad)
        ),
        vec![
            "config.provider (after merging the environment): \"acme-llm\" is not a supported provider; supported: anthropic, azure_openai, bedrock, google, nvidia, ollama, openai, openai_compatible, vertex"
        ]
    );
    // An agent with an unsupported provider is fine when the environment replaces it.
    let agent = AgentSpec::test().with_config("provider", json!("acme-llm"));
    let fixed = AgentEnvironmentSpec::test().with_provider("anthropic");
    let catalog = InMemoryCatalog::test()
        .with_agent(NS, "calculator", agent)
        .with_environment(NS, "prod", fixed);
    assert_eq!(
        resolve_execution(NS, &AgentExecutionSpec::test(), &catalog)
            .unwrap()
            .config["provider"],
        json!("anthropic")
    );
}

#[test]
fn model_providers_are_checked_too() {
    let mut environment = AgentEnvironmentSpec::test();
    environment.overlay.models = Some(json!({"default": {"provider": "skynet"}}));
    assert_eq!(
        problems(
            &AgentExecutionSpec::test(),
            &InMemoryCatalog::test().with_environment(NS, "prod", environment)
        ),
        vec![
            "config.models.default.provider (after merging the environment): \"skynet\" is not a supported provider; supported: anthropic, azure_openai, bedrock, google, nvidia, ollama, openai, openai_compatible, vertex"
        ]
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let mut spec = AgentExecutionSpec::test();
    spec.agent_ref = Some(Reference::named("nope"));
    spec.environment_ref = Some(Reference::named("staging"));
    spec.workdir = mounts(&[("missing", "../x")]);
    spec.timeout_seconds = 0;
    let error = resolve_execution(NS, &spec, &InMemoryCatalog::test()).unwrap_err();
    assert_eq!(error.problems.len(), 5, "{error}");
    assert!(error.to_string().starts_with(
        "invalid AgentExecution (5 problems): spec.agentRef.name: Agent \"nope\" not found"
    ));
}

#[test]
fn digest_ignores_key_order_and_follows_every_value() {
    let base =
        resolve_execution(NS, &AgentExecutionSpec::test(), &InMemoryCatalog::test()).unwrap();
    let reordered: Snapshot = serde_json::from_str(
        &serde_json::to_string(&serde_json::to_value(&base).unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(base.digest(), reordered.digest());
    let text = r#"{"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": null}}"#;
    let swapped = r#"{"a": {"x": null, "y": [1, {"p": 3, "q": 2}]}, "b": 1}"#;
    let digest_of = |t: &str| {
        let mut s = base.clone();
        s.config = serde_json::from_str(t).unwrap();
        s.digest()
    };
    assert_eq!(digest_of(text), digest_of(swapped));

    let mut changes: Vec<Snapshot> = Vec::new();
    let mut s = base.clone();
    s.input.push('?');
    changes.push(s);
    let mut s = base.clone();
    s.timeout_seconds += 1;
    changes.push(s);
    let mut s = base.clone();
    s.config.insert("instructions".into(), json!("x"));
    changes.push(s);
    let mut s = base.clone();
    s.secrets[0].key = "other".into();
    changes.push(s);
    let mut s = base.clone();
    s.compute.node_selector.insert("gpu".into(), "a100".into());
    changes.push(s);
    let mut s = base.clone();
    s.workdir.base = Some(FilesetContent {
        fileset: "repo".into(),
        digest: "sha256:ccc".into(),
        path: None,
    });
    changes.push(s);
    for changed in changes {
        assert_ne!(changed.digest(), base.digest(), "{changed:?}");
    }
}

/// Independent oracle for mount-path sets: relative, no `..`/`.`/empty segments, no trailing
/// `/`, and no path equal to or below another.
fn acceptable(paths: &[String]) -> bool {
    let segments = |p: &String| p.split('/').map(str::to_owned).collect::<Vec<_>>();
    let each_ok = paths.iter().all(|p| {
        !p.is_empty()
            && !p.starts_with('/')
            && segments(p)
                .iter()
                .all(|s| !s.is_empty() && s != "." && s != "..")
    });
    let disjoint = paths.iter().enumerate().all(|(i, a)| {
        paths.iter().enumerate().all(|(j, b)| {
            let (a, b) = (segments(a), segments(b));
            i == j || !(a.starts_with(&b) || b.starts_with(&a))
        })
    });
    each_ok && disjoint
}

fn mount_path_strategy() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        Just("a"),
        Just("b"),
        Just("ab"),
        Just(".."),
        Just("."),
        Just("")
    ];
    (
        prop::bool::weighted(0.1),
        prop::collection::vec(segment, 1..4),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(absolute, segments, trailing)| {
            format!(
                "{}{}{}",
                if absolute { "/" } else { "" },
                segments.join("/"),
                if trailing { "/" } else { "" }
            )
        })
}

fn json_object() -> impl Strategy<Value = serde_json::Map<String, serde_json::Value>> {
    let leaf = prop_oneof![
        any::<i32>().prop_map(|n| json!(n)),
        "[a-z]{0,3}".prop_map(|s| json!(s)),
        prop::collection::vec(any::<u8>(), 0..3).prop_map(|v| json!(v)),
    ];
    let value = leaf.prop_recursive(3, 16, 3, |inner| {
        prop::collection::btree_map("[a-c]", inner, 0..3).prop_map(|m| json!(m))
    });
    prop::collection::btree_map("[a-d]", value, 0..4).prop_map(|m| m.into_iter().collect())
}

/// Every (path, value) pair where the overlay sets a non-object value.
fn overlay_leaves(
    value: &serde_json::Value,
    path: String,
    out: &mut Vec<(String, serde_json::Value)>,
) {
    match value {
        serde_json::Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                overlay_leaves(v, format!("{path}/{k}"), out);
            }
        }
        serde_json::Value::Object(_) => {}
        leaf => out.push((path, leaf.clone())),
    }
}

proptest! {
    #[test]
    fn mount_sets_are_accepted_exactly_when_valid(paths in prop::collection::vec(mount_path_strategy(), 0..4)) {
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        prop_assert_eq!(mount_paths(&refs).is_empty(), acceptable(&paths), "{:?}", paths);
    }

    #[test]
    fn merge_is_deterministic_and_the_environment_wins(config in json_object(), overlay in json_object()) {
        let mut agent = AgentSpec::test();
        agent.config.0.extend(config);
        let mut environment = AgentEnvironmentSpec::test();
        environment.overlay.config = Some(overlay.clone());
        let catalog = InMemoryCatalog::test().with_agent(NS, "calculator", agent).with_environment(NS, "prod", environment);
        let first = resolve_execution(NS, &AgentExecutionSpec::test(), &catalog);
        let second = resolve_execution(NS, &AgentExecutionSpec::test(), &catalog);
        prop_assert_eq!(first.clone().map(|s| s.digest()), second.map(|s| s.digest()));
        if let Ok(snapshot) = first {
            let merged = serde_json::Value::Object(snapshot.config);
            let mut leaves = Vec::new();
            overlay_leaves(&serde_json::Value::Object(overlay), String::new(), &mut leaves);
            for (path, value) in leaves {
                // The dedicated overlay fields (env, provider) are applied after `config` and win over it.
                if path.starts_with("/env") || path.starts_with("/provider") {
                    continue;
                }
                prop_assert_eq!(merged.pointer(&path), Some(&value), "at {}", path);
            }
        }
    }
}

#[test]
fn model_credentials_are_proxied_by_the_environment_or_the_installation_default() {
    use crate::api::ModelCredentials;
    let spec = AgentExecutionSpec::test();
    let direct = resolve_execution(NS, &spec, &InMemoryCatalog::test()).unwrap();
    assert!(direct.proxied_models.is_empty(), "Direct unless told");

    let by_default =
        InMemoryCatalog::test().with_default_model_credentials(ModelCredentials::Proxied);
    let proxied = resolve_execution(NS, &spec, &by_default).unwrap();
    assert_eq!(proxied.proxied_models.len(), 1);
    let model = &proxied.proxied_models[0];
    assert_eq!(
        (
            model.alias.as_str(),
            model.env.as_str(),
            model.secret.as_str(),
            model.key.as_str()
        ),
        ("default", "OPENAI_API_KEY", "model-keys", "openai")
    );
    assert_eq!(model.base_url, "https://api.openai.com/v1");

    let mut environment = AgentEnvironmentSpec::test();
    environment.model_credentials = Some(ModelCredentials::Direct);
    let opted_out = by_default.with_environment(NS, "prod", environment);
    let direct = resolve_execution(NS, &spec, &opted_out).unwrap();
    assert!(
        direct.proxied_models.is_empty(),
        "the environment's word wins"
    );

    let limits = RunLimits::default();
    let refused = limits.check(&proxied).unwrap_err().to_string();
    assert!(
        refused.contains("AgentEnvironment \"prod\" spec.modelCredentials: Proxied credentials are added by errand's egress proxy"),
        "{refused}"
    );
    let served = RunLimits {
        model_proxy: true,
        ..RunLimits::default()
    };
    assert!(served.check(&proxied).is_ok());
}
