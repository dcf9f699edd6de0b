//! The early finish (issue 36, part 1) on the test cluster: a run ends on its runner's report, checked against the saved manifest, before the kubelet reports its pod's end; a report the pod's end contradicts is corrected, and a report a tenant forges is ignored.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use errand::api::contract::{self, ConditionType, Reason};
use errand::api::{AgentExecution, Phase};
use errand::resolve::run_tokens::RunTokens;
use errand::runner::RunState;
use errand::runner::end_report::RunEndReport;
use errand::runner::termination::TerminationSummary;
use errand::store::keys::ResultName;

use crate::support::cluster::{self, BUSYBOX_IMAGE};
use crate::support::harness::{Harness, Mode, SIGNING_KEY, execution_id, phase_of, reason_of};
use crate::support::webhook_receiver::Receiver;

/// The etcd revision at which the first object `api` watches with `config` satisfied
/// `finished`: revisions are one sequence across kinds, so they order the writes.
fn first_revision<K>(
    api: Api<K>,
    config: watcher::Config,
    finished: fn(&K) -> bool,
) -> tokio::task::JoinHandle<u64>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        let mut objects = watcher(api, config).applied_objects().boxed();
        while let Some(object) = objects.try_next().await.expect("the watch runs") {
            if finished(&object) {
                let version = object.meta().resource_version.clone().unwrap_or_default();
                return version.parse().expect("a numeric resourceVersion");
            }
        }
        panic!("the watch ended");
    })
}

fn pod_succeeded(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
}

fn execution_succeeded(execution: &AgentExecution) -> bool {
    phase_of(execution) == Some(Phase::Succeeded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_ends_on_its_runners_report_before_the_kubelet_reports_its_pod_and_writes_nothing_more()
 {
    let Some(harness) = Harness::start("early-finish", Mode::WithPods).await else {
        return;
    };
    harness
        .create_agent(
            "answer",
            BUSYBOX_IMAGE,
            "echo 96 > \"$ERRAND_RESPONSE_FILE\"",
        )
        .await;
    harness.create_execution("quick", "answer", json!({})).await;
    let created = harness.api::<AgentExecution>().get("quick").await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let execution_done = first_revision(
        harness.api::<AgentExecution>(),
        watcher::Config::default().fields("metadata.name=quick"),
        execution_succeeded,
    );
    let pod_done = first_revision(
        harness.api::<Pod>(),
        watcher::Config::default().labels(&format!("{}={uid}", contract::EXECUTION_UID_LABEL)),
        pod_succeeded,
    );
    let done = harness.wait_for_phase("quick", Phase::Succeeded).await;
    let (execution_at, pod_at) = (execution_done.await.unwrap(), pod_done.await.unwrap());
    assert!(
        execution_at < pod_at,
        "the execution ended at revision {execution_at}, before the kubelet reported the pod's \
         end at {pod_at}"
    );
    let log = harness.controller_log();
    assert!(log.contains("recorded a run-ended report"), "{log}");
    // The one replica reconciles, so the report was handed over in memory: no annotation.
    assert_eq!(
        done.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(contract::RUN_ENDED_ANNOTATION)),
        None
    );
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.exit_code, Some(0));
    assert!(
        status
            .results
            .iter()
            .any(|r| r.name == ResultName::Manifest.as_str()),
        "{:?}",
        status.results
    );
    let record = harness.result_json(&done, ResultName::RunResult).await;
    assert_eq!(record["response"], "96", "{record}");
    // The pod's end, seen since, agrees: nothing changes.
    let pod = harness.pod_of("quick").await;
    assert!(pod_succeeded(&pod));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = harness.api::<AgentExecution>().get("quick").await.unwrap();
    assert_eq!(after.status, done.status);
    harness.finish().await;
}

/// A report of success as `run-agent` would send it, sealed under `key`.
fn sealed_success(harness: &Harness, execution: &AgentExecution, key: &str) -> String {
    let report = RunEndReport {
        execution: execution_id(harness.namespace.name(), execution),
        finished_at: Timestamp::now(),
        runner_exit_code: 0,
        summary: TerminationSummary {
            state: RunState::Succeeded,
            exit_code: Some(0),
            timed_out: false,
            stderr_tail: String::new(),
            results: Vec::new(),
            results_error: None,
            gpu_devices: Vec::new(),
        },
    };
    report.seal(&RunTokens::run_ended(key.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_the_pods_end_contradicts_is_corrected_and_a_forged_one_is_ignored() {
    // Its webhook receiver is on the pod bridge, which the operator allows.
    let allow = format!("--outbound-allow={}/32", cluster::POD_GATEWAY);
    let Some(harness) = Harness::start_with_controller_args("early-correct", &[&allow]).await
    else {
        return;
    };
    let receiver = Receiver::start(cluster::POD_GATEWAY, &[204]).await;
    harness
        .create(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hook"},
            "stringData": {"signing": "early-finish-webhook-key"},
        }))
        .await;
    // Runs long enough to be reported on while it runs, then fails.
    harness
        .create_agent(
            "late-failure",
            BUSYBOX_IMAGE,
            "sleep 15; echo broke >&2; exit 3",
        )
        .await;
    harness
        .create_execution(
            "contradicted",
            "late-failure",
            json!({"notify": {"webhook": {"url": receiver.url("/hooks/errand"),
                "signingSecretRef": {"name": "hook", "key": "signing"}}}}),
        )
        .await;
    let running = harness.wait_for_phase("contradicted", Phase::Running).await;

    // A tenant's own seal is not errand's: the run goes on.
    let forged = sealed_success(&harness, &running, "a tenant's key, as long as errand's");
    harness
        .merge_patch::<AgentExecution>(
            "contradicted",
            json!({"metadata": {"annotations": {contract::RUN_ENDED_ANNOTATION: forged}}}),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = harness
        .api::<AgentExecution>()
        .get("contradicted")
        .await
        .unwrap();
    assert_eq!(phase_of(&still), Some(Phase::Running), "{:?}", still.status);

    // A report recorded as a standby replica records it (sealed with the shared key) ends the
    // run while its agent still runs, as a runner's report would before a late OOM kill.
    let sealed = sealed_success(&harness, &running, SIGNING_KEY);
    harness
        .merge_patch::<AgentExecution>(
            "contradicted",
            json!({"metadata": {"annotations": {contract::RUN_ENDED_ANNOTATION: sealed}}}),
        )
        .await;
    let ended = harness
        .wait_for_phase("contradicted", Phase::Succeeded)
        .await;
    let pod = harness.pod_of("contradicted").await;
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running"),
        "it ended on the report while the agent ran"
    );
    assert_eq!(ended.status.as_ref().unwrap().exit_code, Some(0));

    // The container's end says otherwise, and wins.
    let corrected = harness
        .wait_for_execution("contradicted", "to be Failed", |e| {
            phase_of(e) == Some(Phase::Failed)
        })
        .await;
    let status = corrected.status.as_ref().unwrap();
    assert_eq!(status.exit_code, Some(3), "{status:?}");
    assert_eq!(
        reason_of(&corrected, ConditionType::Failed),
        Some(Reason::AgentFailed.as_str())
    );
    let complete = status
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Complete.as_str())
        .expect("a Complete condition");
    assert_eq!(complete.status, "False", "no longer Complete");
    // The webhook told the end the pod confirmed, once: never the report's success.
    receiver.wait_for(1, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let received = receiver.received();
    assert_eq!(received.len(), 1, "{received:?}");
    let event: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(event["data"]["phase"], "Failed", "{event}");
    harness.finish().await;
}
