//! Model credentials the agent never holds, on the test cluster with egress denied: an agent whose environment proxies its model credentials prints its whole environment, its config file and its snapshot without the key, and its chat completions (the `openai` Python client from PyPI, plain and streamed) reach a stand-in model over TLS through the egress proxy's model route, which saw the real key. Another run presenting the first one's token is refused, and so is the token once its run has ended. A model the route cannot carry is refused at create, naming the field.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::ListParams;
use serde_json::{Value, json};

use errand::api::Phase;
use errand::api::contract::{self, Reason};
use errand::egress_proxy::loopback::stand_in_model;
use errand::resolve::run_tokens::RunTokens;
use errand::store::keys::ResultName;

use crate::support::cluster;
use crate::support::harness::{Harness, SIGNING_KEY, message_of};

/// The real key, in the run's Secret.
const REAL_KEY: &str = "sk-cluster-real-key-7f3a";
/// The deepagents runtime's image: Debian's Python with the runtime's environment, which has
/// the `openai` client.
const PYTHON_IMAGE: &str = "errand.local/deepagents:test";

/// What the agent runs: prints its environment, config file and snapshot, then calls its
/// model `default` plainly and streamed with the key its variable holds, and (when `STOLEN`
/// is set) with that token instead.
const AGENT: &str = r#"
import glob, json, os, sys
sys.path[:0] = glob.glob("/opt/errand/deepagents/environments/*/lib/python3.11/site-packages")
import openai
print("ENV", json.dumps(dict(os.environ)))
config = json.load(open(os.environ["AGENT_CONFIG_PATH"]))
print("CONFIG", json.dumps(config))
print("SNAPSHOT", open("/errand/snapshot/snapshot.json").read())
model = config["models"]["default"]
key = os.environ.get("STOLEN") or os.environ[model["api_key_env"]]
client = openai.OpenAI(base_url=model["base_url"], api_key=key, max_retries=0)
messages = [{"role": "user", "content": "What is 12 multiplied by 8?"}]
try:
    plain = client.chat.completions.create(model="stand-in", messages=messages)
    print("PLAIN", plain.choices[0].message.content)
    chunks = client.chat.completions.create(model="stand-in", messages=messages, stream=True)
    print("STREAMED", "".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
except openai.APIStatusError as e:
    print("REFUSED", e.status_code)
"#;

/// The environment: egress denied, model `default` (OpenAI-compatible at `base_url`) with its
/// key bound to Secret `openai`, credentials proxied; `env` added to its variables.
fn environment(base_url: &str, provider: &str, env: Value) -> Value {
    json!({
        "modelCredentials": "Proxied",
        "overlay": {
            "secrets": {"OPENAI_API_KEY": "openai"},
            "env": env,
            "models": {"default": {"provider": provider, "model": "stand-in",
                                   "api_key_env": "OPENAI_API_KEY", "base_url": base_url}},
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxied_model_key_never_reaches_the_agent_and_its_calls_carry_the_real_one() {
    if cluster::client().await.is_none() {
        return;
    }
    // The stand-in model listens on the node, which pods reach only through the proxy.
    let model = stand_in_model(
        format!("{}:0", cluster::POD_GATEWAY).parse().unwrap(),
        &[cluster::POD_GATEWAY.to_owned()],
    )
    .await;
    let base_url = format!("https://{}/v1", model.address);
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), &model.ca_pem).unwrap();
    let proxy = cluster::free_pod_gateway_address();
    let allow_model = format!("{}/32", cluster::POD_GATEWAY);
    let proxy_url = format!("http://{proxy}");
    let args = [
        "--execution-egress",
        "deny",
        "--outbound-allow",
        &allow_model,
        "--egress-proxy-listen",
        &proxy.to_string(),
        "--egress-proxy-url",
        &proxy_url,
        "--egress-proxy-model-ca",
        ca.path().to_str().unwrap(),
    ];
    let Some(harness) = Harness::start_with_controller_args("model-keys", &args).await else {
        return;
    };
    harness
        .create(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "openai"},
                       "stringData": {"OPENAI_API_KEY": REAL_KEY}}),
        )
        .await;
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "caller"},
            "spec": {
                "runtime": {"image": PYTHON_IMAGE, "imagePullPolicy": "Never",
                            "command": ["/usr/bin/python3", "-c", AGENT]},
                "config": {"config_format": "agents-spec-v1", "name": "caller"},
            },
        }))
        .await;
    harness
        .create_execution(
            "holder",
            "caller",
            json!({"environment": environment(&base_url, "openai_compatible", json!({}))}),
        )
        .await;
    // Another run of the namespace, presenting the holder's token (made here as the
    // controller makes it: this test knows the signing key).
    let holder_uid = harness
        .api::<errand::api::AgentExecution>()
        .get("holder")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let tokens = RunTokens::models(SIGNING_KEY.as_bytes());
    let holder_token = tokens.mint(harness.namespace.name(), &holder_uid);
    harness
        .create_execution(
            "thief",
            "caller",
            json!({"environment": environment(&base_url, "openai_compatible",
                                              json!({"STOLEN": holder_token}))}),
        )
        .await;
    harness
        .create_execution(
            "unproxiable",
            "caller",
            json!({"environment": environment(&base_url, "anthropic", json!({}))}),
        )
        .await;

    let holder = harness.wait_for_phase("holder", Phase::Succeeded).await;
    let record = harness.result_json(&holder, ResultName::RunResult).await;
    let output = record["response"].as_str().unwrap_or_default().to_owned();
    assert!(output.contains("PLAIN 96"), "a plain completion: {output}");
    assert!(
        output.contains("STREAMED 96"),
        "a streamed completion: {output}"
    );
    assert!(
        !output.contains(REAL_KEY),
        "the environment, config file and snapshot hold no key: {output}"
    );
    assert!(
        output.contains(&holder_token),
        "the variable holds the placeholder: {output}"
    );
    let seen = model.seen.lock().unwrap().clone();
    assert!(
        seen.len() >= 2
            && seen
                .iter()
                .all(|header| header == &format!("Bearer {REAL_KEY}")),
        "the model saw the real key on every call: {seen:?}"
    );

    // What the run is made of says the same: no secretKeyRef for the key, the config file
    // pointed at the proxy, the snapshot recording the proxied model.
    let pods = harness
        .api::<Pod>()
        .list(
            &ListParams::default()
                .labels(&format!("{}={holder_uid}", contract::EXECUTION_UID_LABEL)),
        )
        .await
        .unwrap();
    let agent = pods.items[0]
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .find(|c| c.name == contract::AGENT_CONTAINER)
        .unwrap()
        .clone();
    let key_var = agent
        .env
        .unwrap()
        .into_iter()
        .find(|e| e.name == "OPENAI_API_KEY")
        .unwrap();
    assert_eq!(key_var.value.as_deref(), Some(holder_token.as_str()));
    assert!(key_var.value_from.is_none(), "{key_var:?}");
    let snapshot = harness
        .api::<ConfigMap>()
        .list(
            &ListParams::default()
                .labels(&format!("{}={holder_uid}", contract::EXECUTION_UID_LABEL)),
        )
        .await
        .unwrap()
        .items
        .remove(0)
        .data
        .unwrap();
    let recorded: Value = serde_json::from_str(&snapshot[contract::SNAPSHOT_KEY]).unwrap();
    assert_eq!(recorded["proxiedModels"][0]["alias"], "default");
    assert_eq!(recorded["proxiedModels"][0]["baseUrl"], base_url);
    let config: Value = serde_json::from_str(&snapshot["agent-config.json"]).unwrap();
    assert_eq!(
        config["models"]["default"]["base_url"],
        format!("{proxy_url}/models/default")
    );

    let thief = harness.wait_for_phase("thief", Phase::Succeeded).await;
    let record = harness.result_json(&thief, ResultName::RunResult).await;
    let output = record["response"].as_str().unwrap_or_default();
    assert!(
        output.contains("REFUSED 401"),
        "another run's token: {output}"
    );

    let refused = harness
        .wait_for_failure("unproxiable", Phase::Failed, Reason::InvalidSpec)
        .await;
    let message = message_of(&refused);
    assert!(
        message.contains("config.models.default.provider") && message.contains("Direct"),
        "{message}"
    );

    // The holder has ended: its token is refused, whoever presents it.
    let after = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{proxy_url}/models/default/chat/completions"))
        .bearer_auth(&holder_token)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(after.status(), 403);
    assert!(
        after
            .text()
            .await
            .unwrap()
            .contains("serves only the running pods"),
        "the ended run's token"
    );
    let calls = model.seen.lock().unwrap().len();
    assert_eq!(calls, seen.len(), "no refused call reached the model");
    harness.finish().await;
}
