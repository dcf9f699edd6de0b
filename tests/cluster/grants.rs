//! Store grants issued when a pod starts, on the real test cluster: the `errand-stage` init
//! container trades its projected ServiceAccount token for its execution's signed URLs at the
//! controller's `/grants` endpoint (real TokenReviews, real kubelet-issued tokens, real Kueue
//! holding Jobs back), so how long a run waited never decides whether it can save its results.

use crate::support;

use errand::api::contract::COMPLETED_RUN_RESULTS;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::support::cluster::{self, BUSYBOX_IMAGE, TestNamespace};
use crate::support::errand::{self as errand_support, ERRAND_IMAGE, install_crds, wait_for};
use crate::support::harness::{Harness, RUN_WAIT, execution_id, phase_of, result_names, tail};
use crate::support::writes::{Tally, Writes};

use errand::api::contract::{GRANT_TOKEN_AUDIENCE, Reason};
use errand::api::{AgentExecution, Phase};
use errand::controller::names::job_name;
use errand::store::Store;
use errand::store::grants::Grants;
use errand::store::keys::{ExecutionId, ResultName};

/// The agent every test runs: it reads the staged workdir and answers.
const AGENT: &str =
    "cat question.txt; echo 96 > \"$ERRAND_RESPONSE_FILE\"; echo answered > answer.txt";

/// Creates the Agent `calculator` running [`AGENT`] on busybox, and a base Fileset `question`
/// holding `question.txt`, so that every run stages through a signed GET and saves through
/// signed PUTs.
async fn create_calculator(harness: &Harness) {
    harness
        .create_agent("calculator", BUSYBOX_IMAGE, AGENT)
        .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("question.txt"), "What is 12 x 8?\n").unwrap();
    harness
        .push_fileset("question", dir.path().to_str().unwrap())
        .await;
}

/// Checks that the run staged the Fileset and saved every result.
async fn assert_staged_and_saved(harness: &Harness, done: &AgentExecution) {
    assert_eq!(result_names(done), COMPLETED_RUN_RESULTS);
    let input = harness.result_files(done, ResultName::InputWorkdir).await;
    assert_eq!(input["question.txt"], "What is 12 x 8?\n");
    let record = harness.result_json(done, ResultName::RunResult).await;
    assert_eq!(record["response"], "96", "{record}");
    let output = harness.result_files(done, ResultName::OutputWorkdir).await;
    assert_eq!(output["answer.txt"], "answered\n");
}

/// The pods of the execution's Job.
async fn pods_of(client: &Client, namespace: &str, execution: &str) -> Vec<Pod> {
    cluster::job_pods(client, namespace, &job_name(execution)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_asks_for_its_grants_when_its_pod_starts_and_writes_four_objects_and_no_secret() {
    let Some(client) = cluster::client().await else {
        return;
    };
    install_crds(&client).await;
    // Kueue's Job webhook refuses every Job create while Kueue installs (another test of this
    // file installs it), and a refused create retried is a write more: install it first.
    cluster::ensure_kueue().await;
    let namespace = TestNamespace::create(&client, "grants-writes").await;
    let ns = namespace.name().to_owned();
    // The controller in this process, with a client that tallies every request but GETs
    // (reads, lists and watches), as the benchmarks count writes.
    let writes = Writes::default();
    let dir = tempfile::tempdir().unwrap();
    let store_url = format!("file://{}", dir.path().display());
    let controller = support::harness::spawn_controller(
        writes.client(&cluster::kubeconfig_path()).await,
        &ns,
        Store::open(&store_url).unwrap(),
        ERRAND_IMAGE,
        Some(cluster::free_pod_gateway_address()),
    );
    let store = Store::open(&store_url).unwrap();
    create_busybox_agent(&client, &ns, "calculator", AGENT).await;
    create_busybox_agent(&client, &ns, "broken", "echo broken >&2; exit 3").await;
    let question = tempfile::tempdir().unwrap();
    std::fs::write(question.path().join("question.txt"), "What is 12 x 8?\n").unwrap();
    let pushed = store.push_fileset(&ns, question.path()).await.unwrap();
    errand_support::record_fileset(&client, &ns, "question", &pushed).await;
    // Created after the catalog, so only the execution's own requests are counted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    writes.take();
    let done = run_to_end(&client, &ns, "calc", "calculator").await;
    assert_eq!(phase_of(&done), Some(Phase::Succeeded), "{:?}", done.status);
    let succeeded = writes.take();
    // The snapshot ConfigMap, the Job, `Starting` and `Succeeded` (a run this short shows no
    // `Running`), and the pod's one TokenReview, which stores nothing: no Secret.
    assert_eq!(
        succeeded,
        Tally::of(&[
            ("create configmaps", 1),
            ("create jobs", 1),
            ("create tokenreviews", 1),
            ("patch agentexecutions/status", 2),
        ]),
        "the controller's writes for one successful execution"
    );
    assert_eq!(succeeded.total(), 4);

    // A failed run costs the same and its one Warning event.
    let failed = run_to_end(&client, &ns, "broken-run", "broken").await;
    assert_eq!(
        phase_of(&failed),
        Some(Phase::Failed),
        "{:?}",
        failed.status
    );
    let failed_writes = writes.take();
    controller.abort();
    assert_eq!(
        failed_writes,
        Tally::of(&[
            ("create configmaps", 1),
            ("create events", 1),
            ("create jobs", 1),
            ("create tokenreviews", 1),
            ("patch agentexecutions/status", 2),
        ]),
        "the controller's writes for one failed execution"
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        secrets.items.is_empty(),
        "no Secret in the namespace: {:?}",
        secrets
            .items
            .iter()
            .map(|s| s.name_any())
            .collect::<Vec<_>>()
    );

    // The results are in the store, staged and saved through the pod's grants.
    let id = execution_id(&ns, &done);
    let read = |name: ResultName| {
        let store = store.clone();
        let id = id.clone();
        async move {
            let key = errand::store::keys::result(&id, name).unwrap();
            support::store::read_all(&store, &key).await
        }
    };
    let input = support::store::tar_files(&read(ResultName::InputWorkdir).await);
    assert_eq!(input["question.txt"], "What is 12 x 8?\n");
    let record: Value = serde_json::from_slice(&read(ResultName::RunResult).await).unwrap();
    assert_eq!(record["response"], "96", "{record}");

    // Only the stage container mounts the token; nothing in the pod automounts one.
    let pod = &pods_of(&client, &ns, "calc").await[0];
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.automount_service_account_token, Some(false));
    let token_mounts = |c: &k8s_openapi::api::core::v1::Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.name == "errand-grant-token" || m.mount_path.contains("serviceaccount"))
            .count()
    };
    assert_eq!(token_mounts(&spec.init_containers.as_ref().unwrap()[0]), 1);
    assert_eq!(
        token_mounts(&spec.containers[0]),
        0,
        "the agent gets no token"
    );
    namespace.delete().await;
}

/// Creates the Agent `name` running `script` with `sh -c` on busybox.
async fn create_busybox_agent(client: &Client, namespace: &str, name: &str, script: &str) {
    errand_support::create(
        client,
        namespace,
        json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name},
            "spec": {
                "runtime": {"image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", script]},
                "config": {"config_format": "agents-spec-v1", "name": name},
            },
        }),
    )
    .await;
}

/// Runs execution `name` of `agent` on the base Fileset `question` until it ends, and then
/// a little longer, so the controller's writes for it have settled (a finished execution
/// gets none).
async fn run_to_end(client: &Client, namespace: &str, name: &str, agent: &str) -> AgentExecution {
    errand_support::create(
        client,
        namespace,
        json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution",
            "metadata": {"name": name},
            "spec": {"agentRef": {"name": agent}, "input": "What is 12 x 8?",
                     "workdir": {"base": "question"}},
        }),
    )
    .await;
    let api = Api::<AgentExecution>::namespaced(client.clone(), namespace);
    let ended = wait_for(&format!("{name} to end"), RUN_WAIT, || async {
        let execution = api.get(name).await.ok()?;
        phase_of(&execution)?.is_terminal().then_some(execution)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ended
}

/// A token of the namespace's `default` ServiceAccount for `audience`, bound to `pod` if given.
async fn token(client: &Client, namespace: &str, audience: &str, pod: Option<&Pod>) -> String {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            expiration_seconds: Some(600),
            bound_object_ref: pod.map(|pod| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name_any()),
                uid: pod.uid(),
            }),
        },
        ..TokenRequest::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request("default", &PostParams::default(), &request)
        .await
        .expect("a token request")
        .status
        .expect("an issued token")
        .token
}

/// Asks the controller for the grants of `execution` with `token`; the status and the body.
async fn ask(url: &str, token: Option<&str>, execution: &ExecutionId) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/grants"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(execution).unwrap());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("the controller answers");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_token_of_the_executions_own_pod_for_errands_audience_gets_its_grants() {
    let Some(harness) = Harness::start("grants-refused", support::harness::Mode::WithPods).await
    else {
        return;
    };
    create_calculator(&harness).await;
    let workdir = json!({"workdir": {"base": "question"}});
    harness
        .create_execution("first", "calculator", workdir.clone())
        .await;
    harness
        .create_execution("second", "calculator", workdir)
        .await;
    // A pod that is no execution's.
    let bystander: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "bystander"},
        "spec": {"automountServiceAccountToken": false, "containers": [{
            "name": "sleep", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
            "command": ["sleep", "3600"],
        }]},
    }))
    .unwrap();
    harness
        .api::<Pod>()
        .create(&PostParams::default(), &bystander)
        .await
        .expect("the bystander pod");
    let first = harness.wait_for_phase("first", Phase::Succeeded).await;
    let second = harness.wait_for_phase("second", Phase::Succeeded).await;
    assert_staged_and_saved(&harness, &first).await;
    assert_staged_and_saved(&harness, &second).await;

    let (client, ns) = (&harness.client, harness.namespace.name());
    let first_pod = pods_of(client, ns, "first").await.remove(0);
    let second_pod = pods_of(client, ns, "second").await.remove(0);
    let bystander = Api::<Pod>::namespaced(client.clone(), ns)
        .get("bystander")
        .await
        .unwrap();
    let first_id = harness.execution_id(&first);
    let url = harness.controller_url();

    let own = token(client, ns, GRANT_TOKEN_AUDIENCE, Some(&first_pod)).await;
    let (status, body) = ask(&url, Some(&own), &first_id).await;
    assert_eq!(status, 200, "{body}");
    let grants: Grants = serde_json::from_str(&body).unwrap();
    assert_eq!(grants.execution, first_id);
    assert_eq!(grants.inputs.len(), 1);
    assert_eq!(grants.results.len(), ResultName::ALL.len());
    assert!(grants.expires_at > Timestamp::now());

    let refusals = [
        (
            "a token for the API server's audience",
            Some(
                token(
                    client,
                    ns,
                    "https://kubernetes.default.svc.cluster.local",
                    Some(&first_pod),
                )
                .await,
            ),
            first_id.clone(),
            403,
            "is not valid for audience errand.dev/grants",
        ),
        (
            "a token of another pod",
            Some(token(client, ns, GRANT_TOKEN_AUDIENCE, Some(&bystander)).await),
            first_id.clone(),
            403,
            "is not controlled by Job errand-first",
        ),
        (
            "a token of another execution's pod",
            Some(token(client, ns, GRANT_TOKEN_AUDIENCE, Some(&second_pod)).await),
            first_id.clone(),
            403,
            "is not controlled by Job errand-first",
        ),
        (
            "the right pod's token for a re-created execution of the same name",
            Some(own.clone()),
            ExecutionId {
                uid: "00000000-0000-0000-0000-000000000000".into(),
                ..first_id.clone()
            },
            403,
            "is not controlled by the execution with uid",
        ),
        (
            "a ServiceAccount token bound to no pod",
            Some(token(client, ns, GRANT_TOKEN_AUDIENCE, None).await),
            first_id.clone(),
            403,
            "not bound to a pod",
        ),
        ("no token", None, first_id.clone(), 401, "no bearer token"),
    ];
    for (what, token, execution, code, reason) in refusals {
        let (status, body) = ask(&url, token.as_deref(), &execution).await;
        assert_eq!(status, code, "{what}: {body}");
        assert!(body.contains(reason), "{what}: {body}");
        assert!(!body.contains("signature="), "{what}: no URL in a refusal");
    }
    harness.finish().await;
}

/// Kueue objects of one test: a ResourceFlavor, a ClusterQueue for the test's namespace only
/// with no quota at first, and a LocalQueue `team-queue` in the namespace.
struct Queue {
    client: Client,
    name: String,
}

fn kueue_api(client: &Client, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta1", kind));
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn cluster_queue_spec(name: &str, namespace: &str, cpu: &str, memory: &str) -> Value {
    json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": name, "resources": [
                {"name": "cpu", "nominalQuota": cpu},
                {"name": "memory", "nominalQuota": memory},
            ]}],
        }],
    })
}

impl Queue {
    /// Installs Kueue if needed and creates the queue objects, with no quota.
    async fn closed(client: &Client, namespace: &str) -> Queue {
        cluster::ensure_kueue().await;
        let name = namespace.to_owned();
        let apply = |kind: &str, ns: Option<&str>, object: Value| {
            let api = kueue_api(client, kind, ns);
            let name = name.clone();
            async move {
                api.patch(
                    &name,
                    &PatchParams::apply("errand-grants-test").force(),
                    &Patch::Apply(object),
                )
                .await
                .unwrap_or_else(|e| panic!("applying the {name} queue objects: {e}"));
            }
        };
        apply(
            "ResourceFlavor",
            None,
            json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                   "metadata": {"name": name}}),
        )
        .await;
        apply(
            "ClusterQueue",
            None,
            json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                   "metadata": {"name": name},
                   "spec": cluster_queue_spec(&name, namespace, "0", "0")}),
        )
        .await;
        kueue_api(client, "LocalQueue", Some(namespace))
            .patch(
                "team-queue",
                &PatchParams::apply("errand-grants-test").force(),
                &Patch::Apply(json!({
                    "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                    "metadata": {"name": "team-queue"},
                    "spec": {"clusterQueue": name},
                })),
            )
            .await
            .expect("the LocalQueue");
        Queue {
            client: client.clone(),
            name,
        }
    }

    /// Gives the ClusterQueue room for a run, so Kueue admits (unsuspends) the waiting Job.
    async fn open(&self) {
        kueue_api(&self.client, "ClusterQueue", None)
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "spec": cluster_queue_spec(&self.name, &self.name, "2", "2Gi"),
                })),
            )
            .await
            .expect("raising the ClusterQueue's quota");
    }

    /// Deletes the cluster-scoped objects (the namespace takes the LocalQueue).
    async fn delete(self) {
        for kind in ["ClusterQueue", "ResourceFlavor"] {
            let _ = kueue_api(&self.client, kind, None)
                .delete(&self.name, &DeleteParams::default())
                .await;
        }
    }
}

/// The spec fields of a queued run small enough for Kueue's quota: it stages the Fileset.
fn queued_run(timeouts: Value) -> Value {
    let mut spec = json!({
        "queueName": "team-queue",
        "workdir": {"base": "question"},
        "environment": {"compute": {"resources": {"limits": {"cpu": "200m", "memory": "128Mi"}}}},
    });
    spec.as_object_mut()
        .unwrap()
        .extend(timeouts.as_object().unwrap().clone());
    spec
}

/// Waits until the execution's Job is there, held (suspended) by Kueue, and the execution
/// waits for it (not started, not ended).
async fn wait_until_queued(harness: &Harness, name: &str) {
    harness
        .wait_for_execution(name, "to have its Job", |e| {
            e.status
                .as_ref()
                .and_then(|s| s.job_name.as_ref())
                .is_some()
        })
        .await;
    assert_still_queued(harness, name).await;
}

/// Checks that the execution has not started: its Job is suspended, it has no pod, and its
/// phase is one of waiting.
async fn assert_still_queued(harness: &Harness, name: &str) {
    let execution = harness.api::<AgentExecution>().get(name).await.unwrap();
    let phase = phase_of(&execution);
    assert!(
        phase.is_some_and(|p| !p.is_terminal() && p != Phase::Running),
        "{name} is {phase:?}"
    );
    let job = harness
        .api::<k8s_openapi::api::batch::v1::Job>()
        .get(&job_name(name))
        .await
        .unwrap();
    assert_eq!(
        job.spec.as_ref().unwrap().suspend,
        Some(true),
        "Kueue holds the Job"
    );
    assert!(
        pods_of(&harness.client, harness.namespace.name(), name)
            .await
            .is_empty()
    );
}

/// How long grants may last in [`an_execution_queued_longer_than_the_grant_lifetime_still_stages_and_saves`]:
/// its start timeout 45 s + timeout 15 s + staging budget 30 s + the harness's termination
/// grace 30 s.
const GRANT_LIFETIME: i64 = 120;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_queued_longer_than_the_grant_lifetime_still_stages_and_saves() {
    let lifetime = GRANT_LIFETIME.to_string();
    let Some(harness) = Harness::start_with_controller_args(
        "grants-queued",
        &[
            "--staging-budget-seconds",
            "30",
            "--max-grant-lifetime-seconds",
            &lifetime,
        ],
    )
    .await
    else {
        return;
    };
    create_calculator(&harness).await;
    let queue = Queue::closed(&harness.client, harness.namespace.name()).await;
    // A run whose grants would have to last longer than the configured lifetime is refused
    // (by the webhook when it runs; this controller runs none, so before anything is created).
    harness
        .create_execution(
            "too-long",
            "calculator",
            json!({"timeoutSeconds": 3600, "startTimeoutSeconds": 45}),
        )
        .await;
    let refused = harness
        .wait_for_failure("too-long", Phase::Failed, Reason::InvalidSpec)
        .await;
    let message = support::harness::message_of(&refused);
    assert!(
        message.contains("spec.timeoutSeconds") && message.contains("at most 120s"),
        "{message}"
    );

    harness
        .create_execution(
            "patient",
            "calculator",
            queued_run(json!({"timeoutSeconds": 15, "startTimeoutSeconds": 45})),
        )
        .await;
    wait_until_queued(&harness, "patient").await;
    let queued_at = Timestamp::now();
    // Held by Kueue longer than any grant may last: grants signed at admission would have
    // expired before the pod could use them.
    tokio::time::sleep(Duration::from_secs(GRANT_LIFETIME as u64 + 10)).await;
    assert_still_queued(&harness, "patient").await;
    queue.open().await;
    let done = harness.wait_for_phase("patient", Phase::Succeeded).await;
    assert_staged_and_saved(&harness, &done).await;
    let created = done.metadata.creation_timestamp.clone().unwrap().0;
    let completed = done
        .status
        .as_ref()
        .unwrap()
        .completion_time
        .clone()
        .unwrap()
        .0;
    let waited = completed.duration_since(created).as_secs();
    eprintln!(
        "created {created}, queued from {queued_at}, completed {completed}: {waited} s after creation, grants last at most {GRANT_LIFETIME} s"
    );
    assert!(
        waited > GRANT_LIFETIME,
        "the results were saved {waited} s after the execution was created, past any grant \
         signed at admission"
    );
    queue.delete().await;
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_asks_while_the_controller_is_down_asks_again_and_succeeds() {
    let Some(mut harness) =
        Harness::start("grants-restart", support::harness::Mode::WithPods).await
    else {
        return;
    };
    create_calculator(&harness).await;
    let queue = Queue::closed(&harness.client, harness.namespace.name()).await;
    harness
        .create_execution("resilient", "calculator", queued_run(json!({})))
        .await;
    wait_until_queued(&harness, "resilient").await;
    // The controller goes; Kueue admits the Job meanwhile and its pod starts asking.
    harness.kill_controller().await;
    queue.open().await;
    let (client, ns) = (harness.client.clone(), harness.namespace.name().to_owned());
    let pod = wait_for("the stage container to run", RUN_WAIT, || async {
        let pods = pods_of(&client, &ns, "resilient").await;
        let pod = pods.into_iter().next()?;
        let staging = pod
            .status
            .as_ref()?
            .init_container_statuses
            .as_ref()?
            .first()?
            .state
            .as_ref()?
            .running
            .is_some();
        staging.then_some(pod)
    })
    .await;
    let asked_again = wait_for("the pod to ask again", RUN_WAIT, || async {
        let log = cluster::pod_logs(&client, &ns, &pod.name_any(), Some("errand-stage")).await;
        log.contains("asking for the grants again").then_some(log)
    })
    .await;
    eprintln!(
        "stage log while the controller is down:\n{}",
        tail(&asked_again, 5)
    );
    harness.start_controller().await;
    let done = harness.wait_for_phase("resilient", Phase::Succeeded).await;
    assert_staged_and_saved(&harness, &done).await;
    let log = cluster::pod_logs(&client, &ns, &pod.name_any(), Some("errand-stage")).await;
    assert!(log.contains("got the grants"), "{log}");
    queue.delete().await;
    harness.finish().await;
}
