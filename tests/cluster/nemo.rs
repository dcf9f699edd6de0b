//! NeMo agents on the real test cluster: the NeMo calculator config, without `runtime`, runs in a pod through the AgentRuntime registered for its harness kind (the test harness image of `hack/images/test-images.sh`); the same config runs as a real deepagents agent in a pod on the runtime's own image (`hack/images/deepagents-image.sh`), in a `restricted` namespace, against the stand-in model provider; and an agent whose harness kind no AgentRuntime serves fails as `InvalidSpec` naming the field, before anything is created.

use crate::support::cluster::POD_GATEWAY;
use crate::support::errand::example;
use crate::support::harness::{Harness, Mode, message_of};
use crate::support::model_server::{
    ModelServer, assert_sent_the_nemo_calculator, calculator_script,
};
use crate::support::store::tar_files;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use errand::api::contract::Reason;
use errand::api::{AgentRuntime, Phase};
use errand::store::keys::ResultName;

/// Installs (or updates) the example's `deepagents` AgentRuntime: cluster-scoped, so shared by
/// every test of the run; server-side apply keeps it the same whoever applies it.
async fn install_example_runtime(e2e: &Harness) {
    let runtime: AgentRuntime =
        serde_json::from_value(example("examples/nemo/runtime.yaml")).unwrap();
    Api::<AgentRuntime>::all(e2e.client.clone())
        .patch(
            "deepagents",
            &PatchParams::apply("errand-tests").force(),
            &Patch::Apply(&runtime),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nemo_calculator_runs_in_a_pod_through_the_deepagents_runtime() {
    let Some(e2e) = Harness::start("nemo-calc", Mode::WithPods).await else {
        return;
    };
    install_example_runtime(&e2e).await;
    e2e.create(example("examples/nemo/agent.yaml")).await;
    let execution = example("examples/nemo/execution.yaml");
    let name = execution["metadata"]["name"].as_str().unwrap().to_owned();
    e2e.create(execution).await;

    let done = e2e.wait_for_phase(&name, Phase::Succeeded).await;
    let record = e2e.result_json(&done, ResultName::RunResult).await;
    assert_eq!(record["response"], "96", "{record}");
    let artifacts = e2e.result_files(&done, ResultName::OutputArtifacts).await;
    assert!(
        artifacts["stdout.log"].contains(
            "calculator-agent via deepagents (nvidia-nemotron-3-5-lightning-30b-a3b): 96"
        ),
        "{artifacts:?}"
    );
    assert_eq!(
        artifacts["instructions.txt"],
        "You are a concise calculator agent.\n"
    );
    // The snapshot names the runtime it took the container from.
    let snapshot = done.status.as_ref().unwrap().snapshot.clone().unwrap();
    let config_map = e2e
        .api::<k8s_openapi::api::core::v1::ConfigMap>()
        .get(&snapshot.config_map)
        .await
        .unwrap();
    let snapshot_json = &config_map.data.as_ref().unwrap()["snapshot.json"];
    assert!(
        snapshot_json.contains("\"runtimeName\":\"deepagents\"")
            && snapshot_json.contains("\"image\":\"errand.local/test-harness:test\""),
        "{snapshot_json}"
    );
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nemo_calculator_runs_as_a_deepagents_agent_in_a_pod_on_the_runtimes_image() {
    let restricted = [("pod-security.kubernetes.io/enforce", "restricted")];
    let Some(e2e) = Harness::start_with_labels("nemo-deep", &restricted, Mode::WithPods).await
    else {
        return;
    };
    let server = ModelServer::start_on(POD_GATEWAY, &calculator_script(0));
    let config = example("examples/nemo/calculator-agent.yaml");
    // The runtime's image and command as runtimes/deepagents/runtime.yaml names them.
    let runtime = example("runtimes/deepagents/runtime.yaml");
    let runtime = &runtime["spec"];
    e2e.create(json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": "calculator-agent"},
        "spec": {
            "runtime": {"image": runtime["image"], "imagePullPolicy": "Never", "command": runtime["command"]},
            "config": config,
        },
    }))
    .await;
    e2e.create(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "model-keys"},
        "stringData": {"nvidia": "nvapi-stand-in-key"},
    }))
    .await;
    e2e.create(json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment", "metadata": {"name": "stand-in"},
        "spec": {"overlay": {
            "secrets": {"NVIDIA_API_KEY": "model-keys#nvidia"},
            "models": {"default": {"base_url": server.base_url()}},
        }},
    }))
    .await;
    e2e.create_execution(
        "deep-calc",
        "calculator-agent",
        json!({"environmentRef": {"name": "stand-in"}, "timeoutSeconds": 300}),
    )
    .await;

    let done = e2e.wait_for_phase("deep-calc", Phase::Succeeded).await;
    let record = e2e.result_json(&done, ResultName::RunResult).await;
    assert_eq!(record["response"], "96", "{record}");
    let workdir = tar_files(&e2e.result(&done, ResultName::OutputWorkdir).await);
    assert_eq!(workdir.get("answer.txt").map(String::as_str), Some("96\n"));
    let artifacts = e2e.result_files(&done, ResultName::OutputArtifacts).await;
    let transcript: serde_json::Value =
        serde_json::from_str(&artifacts["transcript.json"]).unwrap();
    assert_eq!(
        transcript["tool_calls"][0]["name"], "write_file",
        "{transcript}"
    );
    // What the stand-in was sent: the config's model, the key from the Secret, the instructions.
    assert_sent_the_nemo_calculator(&server);
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_harness_kind_no_runtime_serves_fails_naming_the_field() {
    let Some(e2e) = Harness::start("nemo-none", Mode::WithoutPods).await else {
        return;
    };
    install_example_runtime(&e2e).await;
    let mut agent = example("examples/nemo/agent.yaml");
    agent["spec"]["config"]["harnesses"]["deepagents"]["kind"] = json!("no-such-harness");
    e2e.create(agent).await;
    e2e.create_execution("nemo-none", "calculator-agent", json!({}))
        .await;
    let failed = e2e
        .wait_for_failure("nemo-none", Phase::Failed, Reason::InvalidSpec)
        .await;
    let message = message_of(&failed);
    assert!(
        message.contains(
            "Agent \"calculator-agent\" spec.runtime: is not set and no AgentRuntime serves harness kind \"no-such-harness\""
        ) && message.contains("deepagents"),
        "the message names the field and the installed kinds: {message}"
    );
    e2e.wait_for_no_children().await;
    e2e.finish().await;
}
