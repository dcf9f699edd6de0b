//! The observation: the facts the decisions take are what real Jobs, pods and Workloads say.

use super::*;

#[test]
fn a_finished_pod_yields_the_agents_times_exit_code_and_summary() {
    let message = summary(RunState::Failed, 3, "boom").to_termination_message();
    let finished = k8s_pod(
        "Failed",
        vec![container("errand-stage", terminated_state(0, None))],
        vec![container("agent", terminated_state(3, Some(message)))],
    );
    assert_eq!(
        pod_facts(&finished),
        PodFacts {
            finished: true,
            agent_started_at: Some(at(10)),
            agent_exit_code: Some(3),
            agent_finished_at: Some(at(90)),
            stage_exit_code: Some(0),
            summary: Some(summary(RunState::Failed, 3, "boom")),
            ..pod()
        }
    );
}

const AGENT_IMAGE_ID: &str = "docker.io/library/agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

#[test]
fn the_agents_image_digest_goes_from_its_container_status_into_the_status() {
    let with_image = |mut status: ContainerStatus, image_id: &str| {
        status.image_id = image_id.to_owned();
        status
    };
    let message = summary(RunState::Succeeded, 0, "").to_termination_message();
    let pod = k8s_pod(
        "Succeeded",
        vec![with_image(
            container("errand-stage", terminated_state(0, None)),
            "errand@sha256:feed",
        )],
        vec![with_image(
            container("agent", terminated_state(0, Some(message))),
            AGENT_IMAGE_ID,
        )],
    );
    let facts = pod_facts(&pod);
    assert_eq!(facts.agent_image_id.as_deref(), Some(AGENT_IMAGE_ID));
    let (status, _) = assess(&execution(), &facts_at(job(), Some(facts), 100));
    assert_eq!(status.phase, Some(Phase::Succeeded));
    assert_eq!(status.image_id.as_deref(), Some(AGENT_IMAGE_ID));

    // While it runs, the status already says it; a container the kubelet has not created yet
    // reports an empty imageID, which is no digest.
    let running = PodFacts {
        agent_image_id: Some(AGENT_IMAGE_ID.to_owned()),
        ..running(10)
    };
    let (status, _) = assess(&execution(), &facts_at(job(), Some(running), 20));
    assert_eq!(status.image_id.as_deref(), Some(AGENT_IMAGE_ID));
    let waiting = k8s_pod(
        "Pending",
        vec![],
        vec![container("agent", waiting_state("", ""))],
    );
    assert_eq!(pod_facts(&waiting).agent_image_id, None);
}

#[test]
fn a_failed_stage_reports_through_its_own_termination_message() {
    let message = summary(RunState::StageFailed, 1, "tar: path escapes the root");
    let stage_failed = k8s_pod(
        "Failed",
        vec![container(
            "errand-stage",
            terminated_state(1, Some(message.to_termination_message())),
        )],
        vec![container("agent", waiting_state("PodInitializing", ""))],
    );
    let facts = pod_facts(&stage_failed);
    assert_eq!(facts.stage_exit_code, Some(1));
    assert_eq!(facts.summary, Some(message));
    assert_eq!(facts.agent_started_at, None);
    assert_eq!(facts.waiting, vec![waiting("agent", "PodInitializing", "")]);
}

#[test]
fn a_waiting_pod_yields_why_it_waits() {
    let mut waiting_pod = k8s_pod(
        "Pending",
        vec![container(
            "errand-stage",
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(at(5)),
                }),
                ..Default::default()
            },
        )],
        vec![container(
            "agent",
            waiting_state("ImagePullBackOff", "Back-off pulling image"),
        )],
    );
    let status = waiting_pod.status.as_mut().unwrap();
    status.reason = Some("Evicted".into());
    status.message = Some("The node was low on resource: memory.".into());
    status.conditions = Some(vec![
        PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("0/1 nodes are available".into()),
            ..Default::default()
        },
        PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("TerminationByKubelet".into()),
            message: Some("The node was low on resource: memory.".into()),
            ..Default::default()
        },
    ]);
    waiting_pod.metadata.deletion_timestamp = Some(at(40));
    let facts = pod_facts(&waiting_pod);
    assert!(!facts.finished);
    assert!(facts.deleting);
    assert_eq!(
        facts.disruption,
        Some(Cause {
            reason: "TerminationByKubelet".into(),
            message: "The node was low on resource: memory.".into(),
        })
    );
    assert!(!facts.node_lost());
    assert_eq!(
        facts.agent_started_at, None,
        "the stage's start is not the agent's"
    );
    assert_eq!(
        facts.waiting,
        vec![waiting(
            "agent",
            "ImagePullBackOff",
            "Back-off pulling image"
        )]
    );
    assert_eq!(
        facts.unschedulable,
        Some(Cause {
            reason: "Unschedulable".into(),
            message: "0/1 nodes are available".into(),
        })
    );
    assert_eq!(facts.reason, "Evicted");
    assert_eq!(facts.message, "The node was low on resource: memory.");
}

#[test]
fn the_newest_pod_and_the_jobs_failure_are_observed() {
    let older = k8s_pod(
        "Failed",
        vec![],
        vec![container("agent", terminated_state(1, None))],
    );
    let mut newer = k8s_pod("Pending", vec![], vec![]);
    newer.metadata.name = Some("errand-calc-b2".into());
    newer.metadata.creation_timestamp = Some(at(50));
    let job = Job {
        metadata: ObjectMeta {
            name: Some("errand-calc".into()),
            uid: Some("job-uid".into()),
            creation_timestamp: Some(at(1)),
            ..Default::default()
        },
        spec: Some(JobSpec {
            suspend: Some(true),
            ..Default::default()
        }),
        status: Some(JobStatus {
            conditions: Some(vec![
                JobCondition {
                    type_: "Suspended".into(),
                    status: "True".into(),
                    ..Default::default()
                },
                JobCondition {
                    type_: "FailureTarget".into(),
                    status: "True".into(),
                    reason: Some("DeadlineExceeded".into()),
                    message: Some("Job was active longer than specified deadline".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
    };
    let observed = facts(Some(&job), &[&older, &newer], None, now(60));
    assert_eq!(
        observed.pod.map(|p| p.name).as_deref(),
        Some("errand-calc-b2")
    );
    assert_eq!(
        observed.job,
        Some(JobFacts {
            uid: Some("job-uid".into()),
            suspended: true,
            queue: None,
            started: None,
            failure: Some(Cause {
                reason: "DeadlineExceeded".into(),
                message: "Job was active longer than specified deadline".into(),
            }),
        }),
        "a Job that was held starts when the Job controller starts it, not at its creation"
    );
    let mut created = job.clone();
    created.status = None;
    created.spec = None;
    assert_eq!(
        facts(Some(&created), &[], None, now(60))
            .job
            .unwrap()
            .started,
        Some(now(1)),
        "a Job that was never held counts from its creation until it starts"
    );
    assert_eq!(facts(None, &[], None, now(60)).job, None);
}

#[test]
fn a_job_kueue_let_go_counts_its_start_from_its_resume_not_its_creation() {
    let job = |suspend: bool, condition: Option<(&str, i64)>, start: Option<i64>| Job {
        metadata: ObjectMeta {
            name: Some("errand-calc".into()),
            creation_timestamp: Some(at(1)),
            ..Default::default()
        },
        spec: Some(JobSpec {
            suspend: Some(suspend),
            ..Default::default()
        }),
        status: Some(JobStatus {
            start_time: start.map(at),
            conditions: condition.map(|(status, since)| {
                vec![JobCondition {
                    type_: "Suspended".into(),
                    status: status.into(),
                    last_transition_time: Some(at(since)),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }),
    };
    let started = |job: &Job| facts(Some(job), &[], None, now(600)).job.unwrap().started;
    assert_eq!(
        started(&job(true, Some(("True", 1)), None)),
        None,
        "held by Kueue: not started"
    );
    assert_eq!(
        started(&job(false, Some(("True", 1)), None)),
        None,
        "just unsuspended: the wait in the queue does not count"
    );
    assert_eq!(
        started(&job(false, Some(("False", 500)), None)),
        Some(now(500))
    );
    assert_eq!(
        started(&job(false, Some(("False", 500)), Some(510))),
        Some(now(510))
    );
    assert_eq!(started(&job(false, None, None)), Some(now(1)));
}
