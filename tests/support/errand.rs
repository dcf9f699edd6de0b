//! errand's own objects on the test cluster: its CRDs installed, objects created from JSON, its data API available, polling until something holds, and the one JSON answer of the `errand` command.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Api, Client, ResourceExt};

use errand::api::{Agent, AgentEnvironment, AgentExecution, Fileset};

/// The errand image `hack/images/errand-image.sh` imports into the node.
pub const ERRAND_IMAGE: &str = "errand.local/errand:dev";

/// The APIService of the data API (its name is fixed by its group and version).
pub const DATA_API_SERVICE: &str = "v1alpha1.data.errand.dev";

/// Waits until the aggregator reaches the data API: the APIService is `Available` (errand
/// serves and its CA is in the bundle).
pub async fn wait_for_data_api(client: &Client) {
    let services = Api::<APIService>::all(client.clone());
    wait_for(
        "the data API's APIService to be Available",
        Duration::from_secs(120),
        || {
            let services = services.clone();
            async move {
                let service = services.get(DATA_API_SERVICE).await.ok()?;
                let available = service
                    .status?
                    .conditions?
                    .into_iter()
                    .any(|c| c.type_ == "Available" && c.status == "True");
                available.then_some(())
            }
        },
    )
    .await;
}

/// How long [`wait_for`] polls by default.
pub const WAIT: Duration = Duration::from_secs(90);

/// Installs (or updates) the errand CRDs and waits until they serve.
pub async fn install_crds(client: &Client) {
    apply_crds(
        client,
        errand::api::crds::all().into_iter().map(|(_, crd)| crd),
    )
    .await;
}

/// Applies `crds` (server-side) and waits until each is established.
pub async fn apply_crds(client: &Client, crds: impl IntoIterator<Item = CustomResourceDefinition>) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in crds {
        let name = crd.name_any();
        api.patch(
            &name,
            &PatchParams::apply("errand-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("applying CRD {name}: {e}"));
        wait_for(&format!("CRD {name} to be established"), WAIT, || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let crd = api.get(&name).await.ok()?;
                let established = crd
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            }
        })
        .await;
    }
}

/// A manifest file of the repository (`examples/...`) as JSON.
pub fn example(path: &str) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Polls `probe` until it answers, failing the test after `limit`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {}s waiting for {what}",
            limit.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Creates an errand object (AgentSchedule too), or a Secret, ConfigMap, ServiceAccount, Role, RoleBinding or Job,
/// from its JSON form in `namespace`.
pub async fn create(client: &Client, namespace: &str, object: serde_json::Value) {
    let kind = object["kind"].as_str().expect("a kind").to_owned();
    let name = object["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    let resource = match kind.as_str() {
        "Secret" => ApiResource::erase::<Secret>(&()),
        "ConfigMap" => ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        "ServiceAccount" => ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&()),
        "Role" => ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&()),
        "RoleBinding" => ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&()),
        "Job" => ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&()),
        "Agent" => ApiResource::erase::<Agent>(&()),
        "AgentEnvironment" => ApiResource::erase::<AgentEnvironment>(&()),
        "AgentExecution" => ApiResource::erase::<AgentExecution>(&()),
        "Fileset" => ApiResource::erase::<Fileset>(&()),
        "AgentDeployment" => ApiResource::erase::<errand::api::AgentDeployment>(&()),
        "AgentSchedule" => ApiResource::erase::<errand::api::AgentSchedule>(&()),
        other => panic!("unexpected kind {other}"),
    };
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource);
    let object: DynamicObject = serde_json::from_value(object).expect("a well-formed object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"));
}

/// Runs `command` (an `errand ARGS -o json`) with `stdin` piped into it: its exit code and its
/// one JSON answer.
pub fn one_json_answer_with_stdin(
    mut command: std::process::Command,
    args: &[&str],
    stdin: &[u8],
) -> (i32, serde_json::Value) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    // A refused input may close the pipe early.
    let _ = pipe.write_all(stdin);
    drop(pipe);
    one_json_answer(args, &child.wait_with_output().unwrap())
}

/// The exit code of `errand ARGS -o json` and the one JSON answer it printed, checked to be
/// exactly one line with `schema_version`, `ok` and `type` that conforms to `errand schema`.
pub fn one_json_answer(args: &[&str], output: &std::process::Output) -> (i32, serde_json::Value) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one JSON line expected from {args:?}, got: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let value: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(value["schema_version"], 1);
    assert!(
        value["ok"].is_boolean() && value["type"].is_string(),
        "{value}"
    );
    super::answers::assert_conforms(&value);
    (output.status.code().unwrap_or(-1), value)
}

/// Points Fileset `name` in `namespace` (created when missing) at `pushed`'s digest, size and
/// file count, set by hand: for a test that runs the controller in its own process and pushes
/// into its store directly (elsewhere `errand filesets push` does this).
pub async fn record_fileset(
    client: &Client,
    namespace: &str,
    name: &str,
    pushed: &errand::store::PushedFileset,
) {
    let filesets = Api::<Fileset>::namespaced(client.clone(), namespace);
    if filesets.get_opt(name).await.unwrap().is_none() {
        create(
            client,
            namespace,
            serde_json::json!({
                "apiVersion": "errand.dev/v1alpha1", "kind": "Fileset",
                "metadata": {"name": name},
                "spec": {},
            }),
        )
        .await;
    }
    filesets
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {
                "digest": format!("sha256:{}", pushed.digest),
                "size": pushed.size,
                "fileCount": pushed.file_count,
            }})),
        )
        .await
        .unwrap_or_else(|e| panic!("the status of Fileset {name}: {e}"));
}
