//! The execution's Job: run once, never retried, deadline as a backstop, Kueue-aware.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{child_meta, pod};
use crate::api::contract;
use crate::controller::build::ExecutionOwner;
use crate::controller::config::ControllerConfig;
use crate::controller::names;
use crate::resolve::{RunBudget, Snapshot};

/// The Job that runs the execution once.
///
/// An agent run is not idempotent, so the Job never retries (`backoffLimit: 0`) and never
/// starts a replacement pod while the old one is still terminating. Its deadline counts from
/// the Job's start, which includes scheduling and image pulls, so it is the run's whole
/// [`RunBudget`] but the termination grace: the runner's in-pod deadline always fires first and
/// saves results. A pod Kubernetes disrupts (evicts, preempts, loses with its node: its
/// `DisruptionTarget` condition) fails the Job by its pod failure policy, so the Job's failure
/// reason ([`contract::JOB_FAILED_BY_DISRUPTION`]) still tells an eviction from a deletion
/// once the pod is gone.
pub fn job(execution: &ExecutionOwner, snapshot: &Snapshot, config: &ControllerConfig) -> Job {
    let mut meta = child_meta(
        execution,
        names::job_name(&execution.name),
        &snapshot.agent.name,
    );
    let annotations = BTreeMap::from([
        (
            contract::EXECUTION_NAME_ANNOTATION.to_owned(),
            execution.name.clone(),
        ),
        (
            contract::SNAPSHOT_DIGEST_ANNOTATION.to_owned(),
            snapshot.digest(),
        ),
    ]);
    let pod_labels = meta.labels.clone();
    let mut pod_annotations = annotations.clone();
    pod_annotations.extend(crate::controller::build::egress::proxy_annotations(
        snapshot, config,
    ));
    if let Some(queue) = &snapshot.queue_name {
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(contract::KUEUE_QUEUE_LABEL.to_owned(), queue.clone());
    }
    meta.annotations = Some(annotations.clone());
    let deadline = RunBudget::of(snapshot, config.allowance()).job_deadline_seconds();
    Job {
        metadata: meta,
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            completions: Some(1),
            parallelism: Some(1),
            pod_replacement_policy: Some("Failed".to_owned()),
            pod_failure_policy: Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "FailJob".to_owned(),
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".to_owned(),
                        status: "True".to_owned(),
                    }]),
                    on_exit_codes: None,
                }],
            }),
            active_deadline_seconds: Some(deadline),
            suspend: snapshot.queue_name.is_some().then_some(true),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: pod_labels,
                    annotations: Some(pod_annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod::pod_spec(execution, snapshot, config)),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}
