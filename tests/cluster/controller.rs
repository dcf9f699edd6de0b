//! Cluster tests of the controller: it runs in this process against the real API server of
//! the test environment (`hack/testenv/up.sh`), one namespace and one controller per test.
//!
//! These tests cover what does not need a pod to run, with an errand image the node does not
//! have: invalid specs, children and their owners, create-only across a restart, snapshot
//! immutability, secret hygiene, start timeout, children the API server refuses (for good or
//! for now), Kueue-held cancel, deletion, and deletion when a finished execution's lifetime
//! runs out. Runs of real pods are in `e2e.rs`.

use std::time::Duration;

use crate::support::cluster;
use crate::support::errand::{WAIT, wait_for};
use crate::support::harness::{Harness, Mode, message_of, phase_of, reason_of};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ResourceQuota, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use errand::api::contract::{ConditionType, Reason};
use errand::api::{AgentEnvironment, AgentExecution, Phase};
use errand::resolve::conditions;

const SECRET_VALUE: &str = "sk-cluster-secret-value-4242";

/// Creates a Secret, an Agent and an AgentEnvironment that binds the Secret.
async fn create_catalog(harness: &Harness) {
    harness
        .create(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "model-keys"},
            "stringData": {"openai": SECRET_VALUE},
        }))
        .await;
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": "calculator"},
            "spec": {
                "runtime": {"image": cluster::BUSYBOX_IMAGE, "command": ["sh", "-c", "echo 96"], "imagePullPolicy": "Never"},
                "config": {"config_format": "agents-spec-v1", "name": "calculator", "provider": "openai"},
            },
        }))
        .await;
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment",
            "metadata": {"name": "prod"},
            "spec": {
                "overlay": {"env": {"PRECISION": "2"}, "secrets": {"OPENAI_API_KEY": "model-keys#openai"}},
                "compute": {"resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
            },
        }))
        .await;
}

/// Creates an execution of the catalog's calculator in its environment, with the fields of
/// `extra` added to (or replacing those of) its spec.
async fn create_calculation(harness: &Harness, name: &str, extra: serde_json::Value) {
    let mut spec = json!({"environmentRef": {"name": "prod"}, "startTimeoutSeconds": 3600});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    harness.create_execution(name, "calculator", spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_fails_with_invalid_spec_and_creates_nothing() {
    let Some(harness) = Harness::start("ctl-invalid", Mode::WithoutPods).await else {
        return;
    };
    harness
        .create(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution",
            "metadata": {"name": "bad-ref"},
            "spec": {"agentRef": {"name": "no-such-agent"}, "input": "hi"},
        }))
        .await;
    let execution = harness
        .wait_for_failure("bad-ref", Phase::Failed, Reason::InvalidSpec)
        .await;
    assert_eq!(
        reason_of(&execution, ConditionType::Resolved),
        Some("InvalidSpec")
    );
    let message = execution.status.as_ref().unwrap().message.clone().unwrap();
    assert!(
        message.contains("spec.agentRef.name") && message.contains("no-such-agent"),
        "{message}"
    );
    assert!(
        execution.finalizers().is_empty(),
        "nothing to clean up, so no finalizer"
    );
    let events = harness.events().await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("InvalidSpec")),
        "an InvalidSpec event is published"
    );

    // Give the controller time to misbehave before checking that it created nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        harness.has_no_children().await,
        "no Job, ConfigMap or Secret"
    );
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_are_created_once_and_the_snapshot_holds_across_a_restart() {
    let Some(mut harness) = Harness::start("ctl-children", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    create_calculation(&harness, "calc", json!({})).await;
    let execution = harness.wait_for_phase("calc", Phase::Starting).await;
    let uid = execution.uid().unwrap();
    let status = execution.status.clone().unwrap();
    assert_eq!(status.job_name.as_deref(), Some("errand-calc"));
    assert_eq!(status.agent.as_deref(), Some("calculator"));
    assert_eq!(status.observed_generation, execution.metadata.generation);
    assert_eq!(
        reason_of(&execution, ConditionType::Resolved),
        Some("Resolved")
    );
    assert!(
        execution.finalizers().is_empty(),
        "the controller never writes to the execution's metadata"
    );

    let jobs = harness.namespace.managed::<Job>().await;
    let config_maps = harness.namespace.managed::<ConfigMap>().await;
    let secrets = harness.namespace.managed::<Secret>().await;
    assert_eq!(
        (jobs.len(), config_maps.len(), secrets.len()),
        (1, 1, 0),
        "no grants Secret: the pod asks for its grants when it starts"
    );
    for owners in [
        jobs[0].owner_references(),
        config_maps[0].owner_references(),
    ] {
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].uid, uid);
        assert_eq!(owners[0].controller, Some(true));
    }
    let snapshot_ref = status.snapshot.clone().unwrap();
    assert_eq!(snapshot_ref.config_map, config_maps[0].name_any());
    assert_eq!(config_maps[0].immutable, Some(true));
    assert_eq!(
        config_maps[0].finalizers(),
        ["errand.dev/results".to_owned()],
        "the snapshot holds the results finalizer from its creation"
    );
    let snapshot_json = config_maps[0].data.as_ref().unwrap()["snapshot.json"].clone();
    let job_uid = jobs[0].uid().unwrap();

    // Crash the controller, change the environment, start a new controller.
    harness.kill_controller().await;
    harness
        .merge_patch::<AgentEnvironment>(
            "prod",
            json!({"spec": {"overlay": {"env": {"PRECISION": "9"}}}}),
        )
        .await;
    harness.start_controller().await;
    // The new controller reconciles every execution when its caches fill; cancelling then
    // proves it acts, and the snapshot and the Job must be the ones from before.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let jobs = harness.namespace.managed::<Job>().await;
    assert_eq!(
        jobs.len(),
        1,
        "a restarted controller never creates a second Job"
    );
    assert_eq!(jobs[0].uid().unwrap(), job_uid);
    let config_map = harness
        .api::<ConfigMap>()
        .get(&snapshot_ref.config_map)
        .await
        .unwrap();
    assert_eq!(
        config_map.data.unwrap()["snapshot.json"],
        snapshot_json,
        "the snapshot never changes"
    );
    assert!(
        snapshot_json.contains("\"PRECISION\":\"2\""),
        "{snapshot_json}"
    );
    let after = harness.api::<AgentExecution>().get("calc").await.unwrap();
    assert_eq!(
        after.status.as_ref().unwrap().snapshot.as_ref(),
        Some(&snapshot_ref)
    );

    // Secret values appear in no status, event, snapshot, Job or Secret of errand's.
    let events = harness.events().await;
    let texts = [
        serde_json::to_string(&after).unwrap(),
        serde_json::to_string(&events).unwrap(),
        snapshot_json.clone(),
        serde_json::to_string(&jobs[0]).unwrap(),
        serde_json::to_string(&harness.namespace.managed::<Secret>().await).unwrap(),
    ];
    for text in &texts {
        assert!(!text.contains(SECRET_VALUE));
    }
    let env = jobs[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap();
    let bound = env.iter().find(|e| e.name == "OPENAI_API_KEY").unwrap();
    assert_eq!(
        bound
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap()
            .name,
        "model-keys"
    );

    harness.cancel("calc").await;
    harness
        .wait_for_failure("calc", Phase::Cancelled, Reason::Cancelled)
        .await;
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_fails_after_the_start_timeout() {
    let Some(harness) = Harness::start("ctl-pull", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    create_calculation(&harness, "stuck", json!({"startTimeoutSeconds": 5})).await;
    let execution = harness
        .wait_for_failure("stuck", Phase::Failed, Reason::ImagePullFailed)
        .await;
    let message = execution.status.unwrap().message.unwrap();
    assert!(
        message.contains("ErrImageNeverPull") && message.contains("errand-stage"),
        "{message}"
    );
    harness.wait_for_no_jobs().await;
    harness.finish().await;
}

/// A ValidatingAdmissionPolicy that refuses every Job created in `namespace`, removed again
/// when dropped (it is cluster-scoped).
struct JobsRefused {
    client: kube::Client,
    name: String,
}

/// What the policy answers.
const REFUSED_BY_POLICY: &str = "Jobs are not allowed in this namespace (test policy)";

impl JobsRefused {
    async fn install(harness: &Harness) -> Self {
        let namespace = harness.namespace.name();
        let name = format!("refuse-jobs-{namespace}");
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["batch"], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["jobs"],
                }]},
                "validations": [{"expression": "false", "message": REFUSED_BY_POLICY}],
            },
        }))
        .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": namespace},
                }},
            },
        }))
        .unwrap();
        let client = harness.client.clone();
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        // The API server loads a policy within a second or so: wait until a dry run is refused.
        let jobs = harness.api::<Job>();
        let probe: Job = serde_json::from_value(json!({
            "metadata": {"name": "probe"},
            "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "probe", "image": cluster::BUSYBOX_IMAGE}],
            }}},
        }))
        .unwrap();
        wait_for("the policy to refuse Jobs", WAIT, || {
            let jobs = jobs.clone();
            let probe = probe.clone();
            async move {
                let dry_run = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                match jobs.create(&dry_run, &probe).await {
                    Err(kube::Error::Api(status)) if status.code == 422 => Some(()),
                    _ => None,
                }
            }
        })
        .await;
        Self { client, name }
    }

    async fn remove(self) {
        let params = DeleteParams::default();
        Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .delete(&self.name, &params)
            .await
            .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(self.client.clone())
            .delete(&self.name, &params)
            .await
            .unwrap();
    }
}

/// What admission cannot foresee (here a cluster policy) and the API server then refuses for
/// good fails the execution with the API server's words, and no half-created child stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_refused_for_good_fails_the_execution_with_the_refusal_and_leaves_no_children() {
    let Some(harness) = Harness::start("ctl-refused", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    let policy = JobsRefused::install(&harness).await;
    create_calculation(&harness, "refused", json!({})).await;
    let execution = harness
        .wait_for_failure("refused", Phase::Failed, Reason::CreateRejected)
        .await;
    let message = message_of(&execution);
    assert!(
        message.contains(REFUSED_BY_POLICY) && message.contains("Job"),
        "{message}"
    );
    harness.wait_for_no_children().await;
    policy.remove().await;
    harness.finish().await;
}

/// A refusal that may pass with time (a quota) is retried, and the status shows it after a few
/// attempts; once it passes, the run goes on. A Job whose pod can never be created (a pod quota
/// of 0) ends at its start timeout with the Job controller's reason, read from the Job's events
/// with the chart's permissions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_shows_as_retrying_and_a_pod_that_is_never_created_fails_naming_why() {
    let Some(harness) = Harness::start("ctl-quota", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    // The namespace's own kube-root-ca.crt takes the one ConfigMap allowed.
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "tight"},
        "spec": {"hard": {"configmaps": "1", "pods": "0"}},
    }))
    .unwrap();
    let quotas = harness.api::<ResourceQuota>();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    wait_for("the quota to count kube-root-ca.crt", WAIT, || {
        let quotas = quotas.clone();
        async move {
            let used = quotas.get("tight").await.ok()?.status?.used?;
            (used.get("configmaps")?.0 == "1").then_some(())
        }
    })
    .await;
    create_calculation(&harness, "squeezed", json!({"startTimeoutSeconds": 5})).await;
    let retrying = harness
        .wait_for_execution("squeezed", "to show that it is retrying", |e| {
            reason_of(e, ConditionType::Retrying).is_some()
        })
        .await;
    assert_eq!(phase_of(&retrying), None, "nothing started yet");
    let status = retrying.status.as_ref().unwrap();
    let condition = conditions::get(&status.conditions, ConditionType::Retrying).unwrap();
    assert!(
        condition.message.contains("exceeded quota"),
        "the last error: {}",
        condition.message
    );
    // Written once for the same error: a status write wakes the controller past its backoff.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = harness
        .api::<AgentExecution>()
        .get("squeezed")
        .await
        .unwrap();
    assert_eq!(
        later.resource_version(),
        retrying.resource_version(),
        "no status write while the error stays the same"
    );

    quotas
        .patch(
            "tight",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"configmaps": null}}})),
        )
        .await
        .unwrap();
    let execution = harness
        .wait_for_failure("squeezed", Phase::Failed, Reason::StartTimeout)
        .await;
    let message = message_of(&execution);
    assert!(
        message.contains("no pod was created")
            && message.contains("FailedCreate")
            && message.contains("exceeded quota"),
        "{message}"
    );
    assert!(
        reason_of(&execution, ConditionType::Retrying).is_none(),
        "the condition goes once a reconcile succeeds"
    );
    harness.wait_for_no_jobs().await;
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_execution_is_held_suspended_and_can_be_cancelled() {
    let Some(harness) = Harness::start("ctl-queue", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    create_calculation(&harness, "queued", json!({"queueName": "team-queue"})).await;
    let execution = harness
        .wait_for_execution("queued", "to be queued", |e| {
            reason_of(e, ConditionType::Started) == Some("Queued")
        })
        .await;
    assert_eq!(phase_of(&execution), Some(Phase::Queued));
    assert!(
        message_of(&execution).starts_with("waiting in Kueue LocalQueue team-queue"),
        "{}",
        message_of(&execution)
    );
    let job = &harness.namespace.managed::<Job>().await[0];
    assert_eq!(job.spec.as_ref().unwrap().suspend, Some(true));
    assert_eq!(job.labels()["kueue.x-k8s.io/queue-name"], "team-queue");
    harness.cancel("queued").await;
    let cancelled = harness.wait_for_phase("queued", Phase::Cancelled).await;
    assert!(cancelled.status.unwrap().completion_time.is_some());
    harness.wait_for_no_jobs().await;
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_execution_deletes_its_results_and_children() {
    let Some(harness) = Harness::start("ctl-delete", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    create_calculation(&harness, "doomed", json!({})).await;
    let execution = harness.wait_for_phase("doomed", Phase::Starting).await;
    let prefix = store_a_result(&harness, &execution).await;
    let store = harness.store();

    // Foreground, as `errand delete` does: the snapshot ConfigMap blocks its owner's deletion
    // until its finalizer has deleted the results, so they are gone when the execution is.
    harness
        .api::<AgentExecution>()
        .delete("doomed", &DeleteParams::foreground())
        .await
        .unwrap();
    harness.wait_until_gone("doomed").await;
    assert!(
        store.list(&prefix).await.unwrap().is_empty(),
        "the finalizer deleted the results"
    );
    harness.wait_for_no_children().await;
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_is_admitted_under_the_restricted_pod_security_standard() {
    let restricted = [("pod-security.kubernetes.io/enforce", "restricted")];
    let Some(harness) = Harness::start_with_labels("ctl-pss", &restricted, Mode::WithoutPods).await
    else {
        return;
    };
    create_catalog(&harness).await;
    create_calculation(&harness, "secure", json!({})).await;
    let execution = harness.wait_for_phase("secure", Phase::Starting).await;
    let selector = format!("errand.dev/execution-uid={}", execution.uid().unwrap());
    let pod = wait_for("the Job's pod to be admitted", WAIT, || {
        let api = harness.api::<Pod>();
        let selector = selector.clone();
        async move {
            api.list(&ListParams::default().labels(&selector))
                .await
                .ok()?
                .items
                .into_iter()
                .next()
        }
    })
    .await;
    let spec = pod.spec.unwrap();
    assert_eq!(spec.automount_service_account_token, Some(false));
    // The one token is the stage container's, for errand's grant endpoint only: no API
    // server token, and nothing the agent's container mounts.
    let projected: Vec<_> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.projected.is_some())
        .collect();
    assert!(
        spec.volumes
            .iter()
            .flatten()
            .all(|v| !v.name.starts_with("kube-api-access")),
        "no API token volume"
    );
    assert_eq!(projected.len(), 1, "{projected:?}");
    assert_eq!(projected[0].name, "errand-grant-token");
    let sources = projected[0]
        .projected
        .as_ref()
        .unwrap()
        .sources
        .as_ref()
        .unwrap();
    let token = sources[0].service_account_token.as_ref().unwrap();
    assert_eq!(token.audience.as_deref(), Some("errand.dev/grants"));
    let mounts_token = |c: &k8s_openapi::api::core::v1::Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "errand-grant-token")
    };
    assert!(mounts_token(&spec.init_containers.as_ref().unwrap()[0]));
    assert!(
        !mounts_token(&spec.containers[0]),
        "the agent gets no token"
    );
    harness.finish().await;
}

/// Right after a start every execution's reconcile waits for the Job and Pod caches at once.
/// kube-runtime 5.0.0's own wait woke one of them and the others slept until the 30 s reconcile
/// timeout (issue 12, part 2); now every one of them goes on as soon as the caches are filled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_every_execution_is_reconciled_as_soon_as_the_caches_are_filled() {
    const EXECUTIONS: usize = 12;
    let Some(mut harness) = Harness::start("ctl-restart-stall", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    let names: Vec<String> = (0..EXECUTIONS).map(|i| format!("waiting-{i}")).collect();
    for name in &names {
        create_calculation(&harness, name, json!({})).await;
    }
    for name in &names {
        harness
            .wait_for_execution(name, "to have its Job", |e| {
                e.status.as_ref().is_some_and(|s| s.job_name.is_some())
            })
            .await;
    }
    harness.kill_controller().await;
    // Each execution now needs a reconcile that reads the caches: its cancel.
    for name in &names {
        harness.cancel(name).await;
    }
    let restarted = tokio::time::Instant::now();
    harness.start_controller().await;
    let mut cancelled_after = Vec::new();
    for name in &names {
        harness.wait_for_phase(name, Phase::Cancelled).await;
        cancelled_after.push(restarted.elapsed());
    }
    let last = cancelled_after.iter().max().unwrap();
    println!(
        "{EXECUTIONS} executions cancelled after a restart: the last {:.2}s after the start",
        last.as_secs_f64()
    );
    // The caches fill in well under a second here; the old stall was the 30 s timeout.
    assert!(
        *last < Duration::from_secs(10),
        "every reconcile went on once the caches were filled: {cancelled_after:?}"
    );
    harness.finish().await;
}

/// Puts a stand-in `run_result` into the store under `execution`'s results; returns the prefix.
async fn store_a_result(harness: &Harness, execution: &AgentExecution) -> String {
    let prefix = format!(
        "results/{}/{}/{}/",
        harness.namespace.name(),
        execution.name_any(),
        execution.uid().unwrap()
    );
    let record = bytes::Bytes::from_static(b"{\"state\":\"Succeeded\"}");
    let body = futures::stream::iter([Ok::<_, std::io::Error>(record)]).boxed();
    let store = harness.store();
    store
        .put_new(&format!("{prefix}run_result"), body)
        .await
        .unwrap();
    assert_eq!(store.list(&prefix).await.unwrap().len(), 1);
    prefix
}

/// Creates a queued calculation (Kueue is not installed, so its Job stays suspended), gives it
/// a result and cancels it; returns it Cancelled with the prefix of its result.
async fn create_finished(
    harness: &Harness,
    name: &str,
    extra: serde_json::Value,
) -> (AgentExecution, String) {
    let mut spec = json!({"queueName": "team-queue"});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    create_calculation(harness, name, spec).await;
    let starting = harness.wait_for_phase(name, Phase::Queued).await;
    let prefix = store_a_result(harness, &starting).await;
    harness.cancel(name).await;
    let cancelled = harness.wait_for_phase(name, Phase::Cancelled).await;
    (cancelled, prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_execution_goes_with_its_results_when_its_lifetime_runs_out() {
    let Some(harness) = Harness::start("ctl-ttl", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    let (finished, prefix) = create_finished(
        &harness,
        "short-lived",
        json!({"ttlSecondsAfterFinished": 3}),
    )
    .await;
    let completed = finished.status.unwrap().completion_time.unwrap().0;

    harness.wait_until_gone("short-lived").await;
    let lived = jiff::Timestamp::now().duration_since(completed);
    assert!(
        lived.as_secs() >= 3,
        "deleted {lived:?} after finishing, before its lifetime of 3s"
    );
    assert!(
        harness.store().list(&prefix).await.unwrap().is_empty(),
        "the results went with the execution"
    );
    harness.wait_for_no_children().await;
    eprintln!(
        "ttlSecondsAfterFinished=3: deleted with its results {:.1}s after finishing",
        lived.as_secs_f64()
    );
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_lifetime_takes_finished_executions_that_set_none_of_their_own() {
    let Some(harness) = Harness::start("ctl-ns-ttl", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    let (_, inherits) = create_finished(&harness, "inherits", json!({})).await;
    let (_, keeps) = create_finished(
        &harness,
        "own-lifetime",
        json!({"ttlSecondsAfterFinished": 3600}),
    )
    .await;
    // Both are finished and kept (no lifetime anywhere yet): setting one on the namespace
    // afterwards reaches them.
    Api::<Namespace>::all(harness.client.clone())
        .patch(
            harness.namespace.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                errand::api::contract::NAMESPACE_TTL_ANNOTATION: "1",
            }}})),
        )
        .await
        .unwrap();
    harness.wait_until_gone("inherits").await;
    assert!(harness.store().list(&inherits).await.unwrap().is_empty());
    let kept = harness
        .api::<AgentExecution>()
        .get_opt("own-lifetime")
        .await
        .unwrap();
    assert!(
        kept.is_some_and(|e| e.metadata.deletion_timestamp.is_none()),
        "an execution's own lifetime wins over its namespace's"
    );
    assert_eq!(harness.store().list(&keeps).await.unwrap().len(), 1);
    harness.finish().await;
}

/// `errand admin sweep-store` against this test's cluster namespace and store; returns the
/// groups it removed (or would), as (kind, id), sorted.
fn sweep_store(harness: &Harness, extra: &[&str]) -> Vec<(String, String)> {
    let args: Vec<&str> = ["admin", "sweep-store", "--grace", "0"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let (code, answer) = harness.cli(&args);
    assert_eq!(code, 0, "{answer}");
    let mut groups: Vec<(String, String)> = answer["sweep"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let field = |name: &str| g[name].as_str().unwrap().to_owned();
            (field("kind"), field("id"))
        })
        .collect();
    groups.sort();
    groups
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_sweep_keeps_what_executions_filesets_and_snapshots_reference() {
    let Some(harness) = Harness::start("ctl-sweep", Mode::WithoutPods).await else {
        return;
    };
    create_catalog(&harness).await;
    // A live execution stages Fileset repo at its first content; a second push replaces it,
    // so only the execution's snapshot pins the first blob.
    let first = harness.push_fileset("repo", "examples/workdir/repo").await;
    create_calculation(
        &harness,
        "live",
        json!({"queueName": "team-queue", "workdir": {"base": "repo"}}),
    )
    .await;
    let live = harness.wait_for_phase("live", Phase::Queued).await;
    let live_results = store_a_result(&harness, &live).await;
    let second = harness
        .push_fileset("repo", "examples/workdir/datasets")
        .await;
    // Results of an execution that is gone, and a blob no Fileset points at.
    let ghost_uid = "0b6c0a4e-8c43-4d7a-9a55-00000000dead";
    let record = bytes::Bytes::from_static(b"{}");
    let body = futures::stream::iter([Ok::<_, std::io::Error>(record)]).boxed();
    let ghost = format!("results/{}/ghost/{ghost_uid}/", harness.namespace.name());
    let store = harness.store();
    store
        .put_new(&format!("{ghost}run_result"), body)
        .await
        .unwrap();
    let loose = store
        .push_fileset(
            harness.namespace.name(),
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/calculator"),
        )
        .await
        .unwrap()
        .digest;

    let unreferenced = vec![
        ("fileset".to_owned(), loose.clone()),
        ("results".to_owned(), ghost_uid.to_owned()),
    ];
    assert_eq!(sweep_store(&harness, &["--dry-run"]), unreferenced);
    assert_eq!(
        store.list(&ghost).await.unwrap().len(),
        1,
        "a dry run removes nothing"
    );
    assert_eq!(sweep_store(&harness, &[]), unreferenced);
    assert!(store.list(&ghost).await.unwrap().is_empty());
    let blobs = store
        .list(&format!("filesets/{}/", harness.namespace.name()))
        .await
        .unwrap();
    let kept = |digest: &str| blobs.iter().any(|b| b.key.contains(digest));
    assert!(!kept(&loose), "{blobs:?}");
    assert!(kept(&first), "the live snapshot's blob was removed");
    assert!(kept(&second), "the Fileset's blob was removed");
    assert_eq!(store.list(&live_results).await.unwrap().len(), 1);
    assert_eq!(sweep_store(&harness, &[]), vec![], "nothing left to sweep");
    harness.finish().await;
}
