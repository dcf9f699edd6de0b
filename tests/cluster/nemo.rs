//! NeMo agents on the real test cluster: the NeMo calculator config, without `runtime`, runs in a pod through the AgentRuntime registered for its harness kind (the test harness image of `hack/images/test-images.sh`), and an agent whose harness kind no AgentRuntime serves fails as `InvalidSpec` naming the field, before anything is created.

use crate::support::errand::example;
use crate::support::harness::{Harness, Mode, message_of};
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
