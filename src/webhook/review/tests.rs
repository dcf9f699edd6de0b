//! The AdmissionReview handling without a server: what each request needs, and the review it gets back.

use serde_json::{Value, json};

use super::*;
use crate::api::AgentExecutionSpec;
use crate::resolve::{InMemoryCatalog, RunAllowance, RunLimits, resolve_execution};
use crate::testing::{NS, SECRET_VALUE};

/// An AdmissionReview of an AgentExecution as the API server posts it.
fn review_body(operation: &str, object: Option<Value>, old: Option<Value>) -> Vec<u8> {
    review_body_of(
        ("AgentExecution", "agentexecutions"),
        operation,
        object,
        old,
    )
}

/// An AdmissionReview of the `(kind, resource)` as the API server posts it.
fn review_body_of(
    (kind, resource): (&str, &str),
    operation: &str,
    object: Option<Value>,
    old: Option<Value>,
) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "errand.dev", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "errand.dev", "version": "v1alpha1", "resource": resource},
            "requestKind": {"group": "errand.dev", "version": "v1alpha1", "kind": kind},
            "requestResource": {"group": "errand.dev", "version": "v1alpha1", "resource": resource},
            "name": "calc",
            "namespace": NS,
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }))
    .unwrap()
}

/// [`AgentExecution::test`] as JSON, with this spec.
fn execution(spec: Value) -> Value {
    let mut execution = serde_json::to_value(AgentExecution::test()).unwrap();
    execution["spec"] = spec;
    execution
}

/// [`AgentExecutionSpec::test`] as JSON.
fn calculator_spec() -> Value {
    serde_json::to_value(AgentExecutionSpec::test()).unwrap()
}

/// The response of a decided review, as JSON the API server would read.
fn answer(body: &[u8], catalog: &InMemoryCatalog) -> Value {
    answer_within(body, catalog, &RunLimits::default())
}

/// The response of a review in a cluster with `limits`.
fn answer_within(body: &[u8], catalog: &InMemoryCatalog, limits: &RunLimits) -> Value {
    let request = parse(body).unwrap();
    let verdict = match step(&request) {
        Step::Decided(verdict) => verdict,
        Step::Resolve {
            kind,
            namespace,
            spec,
        } => verdict(
            kind,
            &spec,
            resolve_execution(&namespace, &spec, catalog),
            limits,
        ),
    };
    let review = respond(&request, verdict);
    let text = serde_json::to_value(&review).unwrap();
    assert_eq!(text["apiVersion"], "admission.k8s.io/v1", "{text}");
    assert_eq!(text["kind"], "AdmissionReview", "{text}");
    assert_eq!(
        text["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002",
        "the uid is echoed"
    );
    text["response"].clone()
}

#[test]
fn a_create_is_resolved_in_the_request_namespace() {
    let body = review_body("CREATE", Some(execution(calculator_spec())), None);
    let request = parse(&body).unwrap();
    let Step::Resolve {
        namespace, spec, ..
    } = step(&request)
    else {
        panic!("a create needs resolution");
    };
    assert_eq!(namespace, NS);
    assert_eq!(spec.input, "What is 12 multiplied by 8?");
}

#[test]
fn a_valid_create_is_allowed() {
    let body = review_body("CREATE", Some(execution(calculator_spec())), None);
    let response = answer(&body, &InMemoryCatalog::test());
    assert_eq!(response["allowed"], true, "{response}");
}

#[test]
fn a_create_naming_a_missing_agent_is_refused_with_the_field_and_value() {
    let mut spec = calculator_spec();
    spec["agentRef"]["name"] = json!("nope");
    let response = answer(
        &review_body("CREATE", Some(execution(spec)), None),
        &InMemoryCatalog::test(),
    );
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"spec.agentRef.name: Agent "nope" not found in namespace "team-a""#),
        "{message}"
    );
    assert_eq!(
        response["status"]["details"]["causes"][0]["field"],
        "spec.agentRef.name"
    );
    assert_eq!(response["status"]["details"]["kind"], "AgentExecution");
    assert_eq!(response["status"]["details"]["group"], "errand.dev");
}

#[test]
fn a_create_longer_than_the_stores_urls_last_is_refused_naming_its_timeout() {
    let body = review_body("CREATE", Some(execution(calculator_spec())), None);
    let limits = RunLimits {
        allowance: RunAllowance {
            staging_seconds: 900,
            grace_seconds: 120,
        },
        max_url_lifetime_seconds: Some(600),
        telemetry_configured: false,
        ..RunLimits::default()
    };
    let response = answer_within(&body, &InMemoryCatalog::test(), &limits);
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(
        response["status"]["details"]["causes"][0]["field"],
        "spec.timeoutSeconds"
    );
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("at most 600s"), "{message}");

    let lasting = RunLimits {
        max_url_lifetime_seconds: Some(604_800),
        ..limits
    };
    let response = answer_within(&body, &InMemoryCatalog::test(), &lasting);
    assert_eq!(response["allowed"], true, "{response}");
}

#[test]
fn auto_telemetry_is_refused_where_no_collector_is_configured_and_admitted_where_one_is() {
    let mut spec = calculator_spec();
    spec["autoTelemetry"] = json!(true);
    let body = review_body("CREATE", Some(execution(spec)), None);
    let response = answer_within(&body, &InMemoryCatalog::test(), &RunLimits::default());
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(
        response["status"]["details"]["causes"][0]["field"],
        "spec.autoTelemetry"
    );
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("telemetry.otlpEndpoint"), "{message}");

    let configured = RunLimits {
        telemetry_configured: true,
        ..RunLimits::default()
    };
    let response = answer_within(&body, &InMemoryCatalog::test(), &configured);
    assert_eq!(response["allowed"], true, "{response}");
}

/// Every bad input of the admission rules in one spec: all of them are reported at once, each
/// naming its field.
#[test]
fn every_problem_of_a_create_is_listed_at_once() {
    let spec = json!({
        "agent": {
            "runtime": {"image": "errand.local/busybox:test", "command": ["sh"]},
            "config": {"config_format": "agents-spec-v9", "name": "inline"},
        },
        "environment": {
            "overlay": {"secrets": {
                "AGENT_CONFIG_PATH": "model-keys#openai",
                "OPENAI_API_KEY": "missing-secret#openai",
                "ANTHROPIC_API_KEY": "model-keys#anthropic",
            }},
            "compute": {"resources": {"limits": {"ephemeral-storage": "1Gi"}}},
        },
        "workdir": {
            "base": "no-such-fileset",
            "artifactMounts": [
                {"ref": "repo", "mountPath": "data"},
                {"ref": "repo", "mountPath": "data/inner"},
                {"ref": "repo", "mountPath": "../x"},
            ],
        },
        "timeoutSeconds": 3600,
    });
    let response = answer(
        &review_body("CREATE", Some(execution(spec)), None),
        &InMemoryCatalog::test(),
    );
    assert_eq!(response["allowed"], false, "{response}");
    let message = response["status"]["message"].as_str().unwrap();
    let fields: Vec<&str> = response["status"]["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    for (field, value) in [
        ("spec.agent.config.config_format", "agents-spec-v9"),
        (
            "spec.environment.overlay.secrets.AGENT_CONFIG_PATH",
            "AGENT_CONFIG_PATH",
        ),
        (
            "spec.environment.overlay.secrets.OPENAI_API_KEY",
            "missing-secret",
        ),
        (
            "spec.environment.overlay.secrets.ANTHROPIC_API_KEY",
            "anthropic",
        ),
        (
            "spec.environment.compute.resources.limits",
            "ephemeral-storage",
        ),
        ("spec.workdir.base", "no-such-fileset"),
        ("spec.workdir.artifactMounts[1].mountPath", "data/inner"),
        ("spec.workdir.artifactMounts[2].mountPath", "../x"),
    ] {
        assert!(
            fields.iter().any(|f| f.starts_with(field)),
            "no cause for {field} in {fields:?}"
        );
        assert!(message.contains(value), "{value:?} not in {message}");
    }
    assert!(!message.contains(SECRET_VALUE), "a secret value leaked");
}

#[test]
fn a_reference_to_another_namespace_is_refused() {
    let mut spec = calculator_spec();
    spec["agentRef"]["namespace"] = json!("team-b");
    let response = answer(
        &review_body("CREATE", Some(execution(spec)), None),
        &InMemoryCatalog::test(),
    );
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"spec.agentRef.namespace: "team-b" is another namespace"#),
        "{message}"
    );
}

#[test]
fn a_create_that_is_already_cancelled_is_refused_with_every_other_problem() {
    let mut spec = calculator_spec();
    spec["cancel"] = json!(true);
    spec["agentRef"]["name"] = json!("nope");
    let response = answer(
        &review_body("CREATE", Some(execution(spec)), None),
        &InMemoryCatalog::test(),
    );
    assert_eq!(response["allowed"], false, "{response}");
    let causes = &response["status"]["details"]["causes"];
    assert_eq!(causes[0]["field"], "spec.cancel");
    assert_eq!(causes[0]["message"], crate::resolve::CANCELLED_AT_CREATION);
    assert_eq!(causes[1]["field"], "spec.agentRef.name");
}

#[test]
fn cancelling_is_allowed_without_resolving_even_when_the_agent_is_gone() {
    let old = execution(calculator_spec());
    let mut cancelled = calculator_spec();
    cancelled["cancel"] = json!(true);
    let body = review_body("UPDATE", Some(execution(cancelled)), Some(old));
    let request = parse(&body).unwrap();
    assert_eq!(step(&request), Step::Decided(Verdict::Allow));
    let response = answer(&body, &InMemoryCatalog::default());
    assert_eq!(response["allowed"], true);
}

#[test]
fn an_update_may_not_uncancel_or_change_the_spec() {
    let mut cancelled = calculator_spec();
    cancelled["cancel"] = json!(true);
    let body = review_body(
        "UPDATE",
        Some(execution(calculator_spec())),
        Some(execution(cancelled)),
    );
    let response = answer(&body, &InMemoryCatalog::test());
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.cancel: true cannot change back to false")
    );

    let mut changed = calculator_spec();
    changed["input"] = json!("What is 7 plus 5?");
    changed["cancel"] = json!(true);
    let body = review_body(
        "UPDATE",
        Some(execution(changed)),
        Some(execution(calculator_spec())),
    );
    let response = answer(&body, &InMemoryCatalog::test());
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["details"]["causes"][0]["field"], "spec");
}

#[test]
fn an_update_of_metadata_only_is_allowed() {
    let mut labelled = execution(calculator_spec());
    labelled["metadata"]["labels"] = json!({"team": "a"});
    let body = review_body("UPDATE", Some(labelled), Some(execution(calculator_spec())));
    assert_eq!(answer(&body, &InMemoryCatalog::test())["allowed"], true);
}

#[test]
fn an_unreadable_object_is_refused_and_says_why() {
    let mut spec = calculator_spec();
    spec["timeoutSeconds"] = json!("an hour");
    let response = answer(
        &review_body("CREATE", Some(execution(spec)), None),
        &InMemoryCatalog::test(),
    );
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("object is not a valid AgentExecution"),
        "{response}"
    );
}

#[test]
fn a_failed_lookup_is_refused_as_unavailable() {
    let body = review_body("CREATE", Some(execution(calculator_spec())), None);
    let request = parse(&body).unwrap();
    let review = respond(&request, Verdict::Unavailable("connection refused".into()));
    let response = serde_json::to_value(&review).unwrap()["response"].clone();
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 503);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .ends_with("could not check the objects the execution names: connection refused")
    );
}

#[test]
fn a_body_that_is_no_admission_review_gets_an_invalid_answer() {
    let error =
        parse(br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#).unwrap_err();
    assert!(matches!(error, ReviewError::NoRequest(_)), "{error}");
    let error = parse(b"not json").unwrap_err();
    assert!(matches!(error, ReviewError::Malformed(_)), "{error}");
    let response = serde_json::to_value(unreadable(&error)).unwrap()["response"].clone();
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["reason"], "InvalidRequest");
}

#[test]
fn deletes_and_status_writes_are_allowed_untouched() {
    let body = review_body("DELETE", None, Some(execution(calculator_spec())));
    assert_eq!(step(&parse(&body).unwrap()), Step::Decided(Verdict::Allow));
    let mut status: Value = serde_json::from_slice(&review_body(
        "UPDATE",
        Some(execution(calculator_spec())),
        Some(execution(calculator_spec())),
    ))
    .unwrap();
    status["request"]["subResource"] = json!("status");
    let request = parse(&serde_json::to_vec(&status).unwrap()).unwrap();
    assert_eq!(step(&request), Step::Decided(Verdict::Allow));
}

/// An AgentDeployment of the calculator in [`NS`], with `spec` merged over its spec.
fn deployment(spec: Value) -> Value {
    let mut base = json!({"agentRef": {"name": "calculator"}, "replicas": 1});
    for (key, value) in spec.as_object().unwrap() {
        base[key] = value.clone();
    }
    json!({
        "apiVersion": "errand.dev/v1alpha1",
        "kind": "AgentDeployment",
        "metadata": {"name": "calc", "namespace": NS, "uid": "u-1", "generation": 1},
        "spec": base,
    })
}

fn deployment_review(operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
    review_body_of(
        ("AgentDeployment", "agentdeployments"),
        operation,
        Some(object),
        old,
    )
}

#[test]
fn a_deployment_is_resolved_with_the_execution_rules_and_refused_naming_its_field() {
    let catalog = InMemoryCatalog::test();
    let ok = answer(
        &deployment_review("CREATE", deployment(json!({})), None),
        &catalog,
    );
    assert_eq!(ok["allowed"], true, "{ok}");
    let refused = answer(
        &deployment_review(
            "CREATE",
            deployment(json!({"agentRef": {"name": "nope"}})),
            None,
        ),
        &catalog,
    );
    assert_eq!(refused["allowed"], false, "{refused}");
    assert_eq!(refused["status"]["details"]["kind"], "AgentDeployment");
    assert_eq!(
        refused["status"]["details"]["causes"][0]["field"],
        "spec.agentRef.name"
    );
    assert!(
        refused["status"]["message"]
            .as_str()
            .unwrap()
            .contains("Agent \"nope\" not found"),
        "{refused}"
    );
}

#[test]
fn an_execution_or_deployment_whose_egress_range_is_inside_a_denied_one_is_refused_naming_it() {
    let catalog = InMemoryCatalog::test();
    let metadata = json!({"environment": {"egress": {"allow": [{"cidr": "169.254.169.254/32"}]}}});
    let mut spec = calculator_spec();
    spec.as_object_mut().unwrap().remove("environmentRef");
    spec["environment"] = metadata["environment"].clone();
    for body in [
        review_body("CREATE", Some(execution(spec)), None),
        deployment_review("CREATE", deployment(metadata.clone()), None),
    ] {
        let refused = answer(&body, &catalog);
        assert_eq!(refused["allowed"], false, "{refused}");
        assert_eq!(
            refused["status"]["details"]["causes"][0]["field"],
            "spec.environment.egress.allow[0].cidr",
            "{refused}"
        );
        assert!(
            refused["status"]["message"]
                .as_str()
                .unwrap()
                .contains("link-local (cloud metadata)"),
            "{refused}"
        );
    }
}

#[test]
fn a_deployment_update_is_resolved_only_when_it_redeploys() {
    // An empty catalog: anything resolved would be refused.
    let empty = InMemoryCatalog::default();
    let old = deployment(json!({}));
    let scaled = answer(
        &deployment_review(
            "UPDATE",
            deployment(json!({"replicas": 3})),
            Some(old.clone()),
        ),
        &empty,
    );
    assert_eq!(
        scaled["allowed"], true,
        "scaling is not a redeploy: {scaled}"
    );
    let redeployed = answer(
        &deployment_review(
            "UPDATE",
            deployment(json!({"agentRef": {"name": "calculator-v2"}})),
            Some(old),
        ),
        &empty,
    );
    assert_eq!(redeployed["allowed"], false, "{redeployed}");
    assert_eq!(
        redeployed["status"]["details"]["causes"][0]["field"],
        "spec.agentRef.name"
    );
}

/// An AdmissionReview of an AgentExtension (cluster-scoped) with this spec.
fn extension_review(operation: &str, spec: Value) -> Vec<u8> {
    let mut body: Value = serde_json::from_slice(&review_body(operation, None, None)).unwrap();
    let request = &mut body["request"];
    request["kind"]["kind"] = json!("AgentExtension");
    request["requestKind"]["kind"] = json!("AgentExtension");
    request["resource"]["resource"] = json!("agentextensions");
    request["requestResource"]["resource"] = json!("agentextensions");
    request["name"] = json!("analysis");
    request["namespace"] = Value::Null;
    request["object"] = json!({
        "apiVersion": "errand.dev/v1alpha1",
        "kind": "AgentExtension",
        "metadata": {"name": "analysis"},
        "spec": spec,
    });
    serde_json::to_vec(&body).unwrap()
}

#[test]
fn an_agent_extension_is_checked_on_create_and_update() {
    let good = serde_json::to_value(crate::api::AgentExtensionSpec::test()).unwrap();
    for operation in ["CREATE", "UPDATE"] {
        let response = answer(
            &extension_review(operation, good.clone()),
            &InMemoryCatalog::test(),
        );
        assert_eq!(response["allowed"], true, "{operation}: {response}");
    }
    let mut bad = good;
    bad["results"] = json!(["analysis-report", "output_workdir"]);
    bad["configSchema"] = json!({"type": "object", "oneOf": []});
    let response = answer(&extension_review("UPDATE", bad), &InMemoryCatalog::test());
    assert_eq!(response["allowed"], false, "{response}");
    let status = &response["status"];
    assert_eq!(status["code"], 422);
    assert_eq!(status["details"]["kind"], "AgentExtension");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with("invalid AgentExtension (2 problems): spec.results[1]: \"output_workdir\" is one of errand's own results"),
        "{message}"
    );
    let fields: Vec<&str> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["spec.results[1]", "spec.configSchema.oneOf"]);
}

#[test]
fn an_update_may_kill_start_and_move_the_deadline_until_a_cancel() {
    let with = |changes: serde_json::Value| {
        let mut spec = calculator_spec();
        for (key, value) in changes.as_object().unwrap() {
            spec[key] = value.clone();
        }
        execution(spec)
    };
    let verdict = |old: serde_json::Value, new: serde_json::Value| {
        let response = answer(
            &review_body("UPDATE", Some(new), Some(old)),
            &InMemoryCatalog::test(),
        );
        (
            response["allowed"] == true,
            response["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    let deadline = json!({"request": "r1", "inSeconds": 60});
    for (old, new) in [
        (json!({}), json!({"cancel": true, "kill": true})),
        (json!({"held": true}), json!({"held": false})),
        (json!({}), json!({"deadline": deadline})),
        (
            json!({"deadline": deadline}),
            json!({"deadline": {"request": "r2"}}),
        ),
    ] {
        let (allowed, message) = verdict(with(old.clone()), with(new.clone()));
        assert!(allowed, "{old} -> {new}: {message}");
    }
    for (old, new, said) in [
        (json!({}), json!({"kill": true}), "spec.kill: needs cancel"),
        (
            json!({}),
            json!({"held": true}),
            "spec.held: can only be set when the execution is created",
        ),
        (
            json!({"cancel": true}),
            json!({"cancel": true, "deadline": deadline}),
            "spec.deadline: cannot change after a cancel",
        ),
    ] {
        let (allowed, message) = verdict(with(old.clone()), with(new.clone()));
        assert!(
            !allowed && message.contains(said),
            "{old} -> {new}: {message}"
        );
    }
}
