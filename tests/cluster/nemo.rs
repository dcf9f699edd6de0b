//! NeMo agents on the real test cluster: the NeMo calculator config, without `runtime`, runs in a pod through the AgentRuntime registered for its harness kind (the test harness image of `hack/images/test-images.sh`); the same config runs as a real deepagents agent in a pod on the runtime's own image (`hack/images/deepagents-image.sh`), in a `restricted` namespace, against the stand-in model provider, and deployed on it answers OpenAI's Python client through the gateway; and an agent whose harness kind no AgentRuntime serves fails as `InvalidSpec` naming the field, before anything is created.

use crate::support::cluster::POD_GATEWAY;
use crate::support::deployments::{allow_invoke, create_deployment, token_of, wait_for_phase};
use crate::support::errand::example;
use crate::support::harness::RUN_WAIT;
use crate::support::harness::{Harness, Mode, message_of};
use crate::support::model_server::{
    ModelServer, assert_from_the_nemo_calculator, assert_sent_the_nemo_calculator,
    calculator_script,
};
use crate::support::python_clients;
use crate::support::store::tar_files;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use errand::api::contract::Reason;
use errand::api::{AgentRuntime, DeploymentPhase, Phase};
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

/// The NeMo calculator config as an Agent on the deepagents runtime's image and command (as
/// `runtimes/deepagents/runtime.yaml` names them), and the environment `stand-in` that binds
/// its key from a Secret and points its model at `server`.
async fn create_deepagents_calculator(harness: &Harness, server: &ModelServer) {
    let config = example("examples/nemo/calculator-agent.yaml");
    let runtime = example("runtimes/deepagents/runtime.yaml");
    let runtime = &runtime["spec"];
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": "calculator-agent"},
            "spec": {
                "runtime": {"image": runtime["image"], "imagePullPolicy": "Never", "command": runtime["command"]},
                "config": config,
            },
        }))
        .await;
    harness
        .create(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "model-keys"},
            "stringData": {"nvidia": "nvapi-stand-in-key"},
        }))
        .await;
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment", "metadata": {"name": "stand-in"},
            "spec": {"overlay": {
                "secrets": {"NVIDIA_API_KEY": "model-keys#nvidia"},
                "models": {"default": {"base_url": server.base_url()}},
            }},
        }))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openais_client_talks_to_a_deepagents_deployment_through_the_gateway() {
    let Some(harness) = Harness::start_with_gateway("nemo-deep-gw").await else {
        return;
    };
    let server = ModelServer::start_on(
        POD_GATEWAY,
        &json!([
            {"content": "a plain answer"},
            {"content": "an answer streamed in pieces"},
            {"content": "an async answer"},
        ]),
    );
    create_deepagents_calculator(&harness, &server).await;
    let caller = token_of(&harness, "caller").await;
    let stranger = token_of(&harness, "stranger").await;
    allow_invoke(&harness, "caller").await;
    create_deployment(
        &harness,
        "calc",
        "calculator-agent",
        json!({"environmentRef": {"name": "stand-in"}}),
    )
    .await;
    wait_for_phase(&harness, "calc", DeploymentPhase::Ready, RUN_WAIT).await;

    // OpenAI's own Python client through the gateway, to the runtime's server in its pod: the
    // model list, a completion validated strictly as `ChatCompletion`, streamed, async, and
    // each refusal raised as its error class.
    let base = format!(
        "{}/v1/namespaces/{}/deployments/calc/v1",
        harness.gateway_url(),
        harness.namespace.name()
    );
    let args = [base, caller, "calc".to_owned(), stranger];
    let openai = tokio::task::spawn_blocking(move || python_clients::openai_report(&args))
        .await
        .unwrap();
    assert_eq!(openai["models"], json!(["calc"]), "{openai}");
    python_clients::assert_openai_answers(
        &openai,
        [
            "a plain answer",
            "an answer streamed in pieces",
            "an async answer",
        ],
    );
    for (refusal, status) in [
        ("bad_request", 400),
        ("unauthenticated", 401),
        ("forbidden", 403),
    ] {
        assert_eq!(
            openai["refusals"][refusal]["status"], status,
            "{refusal}: {openai}"
        );
    }
    // Each completion was one run of the agent: the stand-in saw the config's model, the key
    // from the Secret and the agent's instructions three times, and nothing else.
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    requests.iter().for_each(assert_from_the_nemo_calculator);
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nemo_calculator_runs_as_a_deepagents_agent_in_a_pod_on_the_runtimes_image() {
    let restricted = [("pod-security.kubernetes.io/enforce", "restricted")];
    let Some(e2e) = Harness::start_with_labels("nemo-deep", &restricted, Mode::WithPods).await
    else {
        return;
    };
    let server = ModelServer::start_on(POD_GATEWAY, &calculator_script(0));
    create_deepagents_calculator(&e2e, &server).await;
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
