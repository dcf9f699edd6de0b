//! The local backend keeps the cluster's promises: `errand apply` refuses the catalog objects
//! the real API server refuses (same schema, same CEL rules, same quantity grammar), naming the
//! same field with the same words, and accepts what the API server accepts.
//!
//! Each object goes to the API server of the test environment (`hack/testenv/up.sh`) as a
//! server-side dry run with strict field validation, as `kubectl apply` sends it, and to
//! `errand apply -f` on a fresh local home.

use crate::support::cluster::{self, TestNamespace};
use crate::support::errand::install_crds;
use crate::support::local::Home;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use errand::api::{Agent, AgentEnvironment, Fileset};

fn agent(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": name}, "spec": spec})
}

fn environment(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment", "metadata": {"name": name}, "spec": spec})
}

fn runtime() -> Value {
    json!({"image": "busybox", "command": ["sh", "-c", "echo ok"]})
}

fn config() -> Value {
    json!({"config_format": "agents-spec-v1"})
}

/// Objects both sides refuse, each with the field and the words both must name.
fn refused() -> Vec<(Value, &'static str, &'static str)> {
    let compute = |resources: Value| json!({"compute": {"resources": resources}});
    let quantities = "amounts must be non-negative quantities, such as 500m, 2 or 4Gi";
    vec![
        (
            environment(
                "ephemeral",
                compute(json!({"limits": {"ephemeral-storage": "1Gi"}})),
            ),
            "spec.compute.resources.limits",
            "only cpu, memory and nvidia.com/gpu may be set",
        ),
        (
            environment(
                "not-a-quantity",
                compute(json!({"requests": {"cpu": "abc"}})),
            ),
            "spec.compute.resources.requests",
            quantities,
        ),
        (
            environment("negative", compute(json!({"limits": {"memory": "-1Gi"}}))),
            "spec.compute.resources.limits",
            quantities,
        ),
        (
            environment(
                "reserved",
                json!({"overlay": {"env": {"ERRAND_INPUT": "x"}}}),
            ),
            "spec.overlay.env",
            "ERRAND_* and AGENT_CONFIG_PATH are reserved for errand's runner",
        ),
        (
            agent(
                "format",
                json!({"runtime": runtime(), "config": {"config_format": "yaml-v9"}}),
            ),
            "spec.config.config_format",
            r#"Unsupported value: "yaml-v9": supported values: "agents-spec-v1", "nemo-agents-spec-v1""#,
        ),
        (
            agent(
                "empty-image",
                json!({"runtime": {"image": "", "command": ["sh"]}, "config": config()}),
            ),
            "spec.runtime.image",
            "should be at least 1 chars long",
        ),
        (
            agent(
                "no-runtime",
                json!({"config": config(), "runtime": {"command": ["sh"]}}),
            ),
            "spec.runtime.image",
            "Required value",
        ),
        // The API server and errand word these two differently; both name the field.
        (
            agent(
                "unknown-field",
                json!({"runtime": {"image": "i", "command": ["sh"], "entrypoint": ["x"]}, "config": config()}),
            ),
            "spec.runtime.entrypoint",
            "",
        ),
        (
            agent(
                "command-string",
                json!({"runtime": {"image": "i", "command": "sh"}, "config": config()}),
            ),
            "spec.runtime.command",
            "",
        ),
    ]
}

/// Objects both sides accept: quantities as Kubernetes writes them, and an Agent `config` that
/// keeps fields errand does not know.
fn accepted() -> Vec<Value> {
    vec![
        environment(
            "quantities",
            json!({"compute": {"resources": {
                "limits": {"cpu": "1e3", "memory": "1.5Gi", "nvidia.com/gpu": 1},
                "requests": {"cpu": ".5", "memory": "512M"},
            }}}),
        ),
        agent(
            "kept-config",
            json!({"runtime": runtime(), "config": {"config_format": "nemo-agents-spec-v1", "anything": {"x": 1}}}),
        ),
        json!({"apiVersion": "errand.dev/v1alpha1", "kind": "Fileset", "metadata": {"name": "data"}, "spec": {}}),
    ]
}

/// The API server's answer to a dry-run server-side apply of `object`: `Err(message)` when it
/// refuses it.
async fn api_server(client: &kube::Client, namespace: &str, object: &Value) -> Result<(), String> {
    let resource = match object["kind"].as_str().unwrap() {
        "Agent" => ApiResource::erase::<Agent>(&()),
        "AgentEnvironment" => ApiResource::erase::<AgentEnvironment>(&()),
        "Fileset" => ApiResource::erase::<Fileset>(&()),
        other => panic!("no catalog kind {other}"),
    };
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource);
    let name = object["metadata"]["name"].as_str().unwrap();
    let params = PatchParams::apply("errand-tests")
        .dry_run()
        .validation_strict();
    match api.patch(name, &params, &Patch::Apply(object)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(status.message),
        Err(other) => panic!("applying {name}: {other}"),
    }
}

/// `errand apply -f` of `object` on the local backend: `Err(message)` when it refuses it.
fn local(home: &Home, object: &Value) -> Result<(), String> {
    let name = object["metadata"]["name"].as_str().unwrap();
    let file = home.write(&format!("{name}.json"), &object.to_string());
    let (code, answer) = home.json(&["apply", "-f", file.to_str().unwrap()]);
    if answer["ok"] == true {
        return Ok(());
    }
    assert_eq!(code, 2, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_manifest", "{answer}");
    Err(answer["error"]["message"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn local_apply_refuses_what_the_api_server_refuses_naming_the_same_field() {
    let Some(client) = cluster::client().await else {
        return;
    };
    install_crds(&client).await;
    let namespace = TestNamespace::create(&client, "parity").await;
    let home = Home::new();

    for (object, field, words) in refused() {
        let name = &object["metadata"]["name"];
        let server = api_server(&client, namespace.name(), &object)
            .await
            .expect_err(&format!("the API server accepted {name}"));
        let ours = local(&home, &object).expect_err(&format!("errand accepted {name}"));
        for (who, message) in [("the API server", &server), ("errand", &ours)] {
            assert!(
                message.contains(field) && message.contains(words),
                "{who} refused {name} without naming {field:?} and {words:?}: {message}"
            );
        }
    }
    for object in accepted() {
        let name = &object["metadata"]["name"];
        if let Err(message) = api_server(&client, namespace.name(), &object).await {
            panic!("the API server refused {name}: {message}");
        }
        if let Err(message) = local(&home, &object) {
            panic!("errand refused {name}: {message}");
        }
    }
    namespace.delete().await;
}
