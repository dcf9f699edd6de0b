//! Table-driven tests of the status computation, one row per way a run can go.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;
use crate::api::{AgentExecution, AgentExecutionSpec, Phase, ResultEntry, SnapshotRef};
use crate::resolve::{InvalidSpec, Problem};

const T0: i64 = 1_800_000_000;

fn at(offset: i64) -> Time {
    Time(Timestamp::from_second(T0 + offset).unwrap())
}

fn now(offset: i64) -> Timestamp {
    at(offset).0
}

fn execution() -> AgentExecution {
    let mut execution = AgentExecution {
        metadata: ObjectMeta {
            name: Some("calc".into()),
            namespace: Some("team-a".into()),
            uid: Some("uid-1".into()),
            generation: Some(1),
            creation_timestamp: Some(at(0)),
            ..Default::default()
        },
        spec: AgentExecutionSpec {
            timeout_seconds: 600,
            start_timeout_seconds: Some(120),
            ..Default::default()
        },
        status: None,
    };
    let snapshot = SnapshotRef {
        config_map: "errand-calc-snapshot".into(),
        digest: "sha256:00".into(),
    };
    execution.status = Some(starting(
        &execution,
        "calculator",
        snapshot,
        "errand-calc",
        false,
        now(1),
    ));
    execution
}

fn cancelled(mut execution: AgentExecution) -> AgentExecution {
    execution.spec.cancel = true;
    execution.metadata.generation = Some(2);
    execution
}

fn job() -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some("errand-calc".into()),
            creation_timestamp: Some(at(1)),
            ..Default::default()
        },
        spec: Some(JobSpec::default()),
        status: Some(JobStatus {
            start_time: Some(at(1)),
            ..Default::default()
        }),
    }
}

fn suspended_job() -> Job {
    let mut job = job();
    job.spec.as_mut().unwrap().suspend = Some(true);
    job.status = None;
    job
}

fn failed_job(reason: &str) -> Job {
    let mut job = job();
    job.status.as_mut().unwrap().conditions = Some(vec![JobCondition {
        type_: "Failed".into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some("Job was active longer than specified deadline".into()),
        ..Default::default()
    }]);
    job
}

fn waiting(name: &str, reason: &str, message: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: Some(message.into()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn running_agent(since: i64) -> ContainerStatus {
    ContainerStatus {
        name: "agent".into(),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(at(since)),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn terminated(name: &str, exit_code: i32, message: Option<String>) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code,
                started_at: Some(at(10)),
                finished_at: Some(at(90)),
                message,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pod(phase: &str, init: Vec<ContainerStatus>, main: Vec<ContainerStatus>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("errand-calc-x7k2p".into()),
            creation_timestamp: Some(at(2)),
            ..Default::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some(phase.into()),
            init_container_statuses: Some(init),
            container_statuses: Some(main),
            ..Default::default()
        }),
    }
}

fn staged() -> ContainerStatus {
    terminated("errand-stage", 0, None)
}

fn results() -> Vec<ResultEntry> {
    [
        "input_workdir",
        "output_workdir",
        "output_artifacts",
        "run_result",
        "manifest.json",
    ]
    .iter()
    .map(|name| ResultEntry {
        name: (*name).into(),
        size: 100,
        sha256: "d".repeat(64),
    })
    .collect()
}

fn summary(state: RunState, exit_code: i32, stderr: &str) -> Option<String> {
    Some(
        TerminationSummary {
            state,
            exit_code: Some(exit_code),
            timed_out: state == RunState::TimedOut,
            stderr_tail: stderr.into(),
            results: results(),
            results_error: None,
        }
        .to_termination_message(),
    )
}

fn finished_pod(phase: &str, exit_code: i32, message: Option<String>) -> Pod {
    pod(
        phase,
        vec![staged()],
        vec![terminated("agent", exit_code, message)],
    )
}

fn assess_at(execution: &AgentExecution, job: &Job, pods: &[Pod], offset: i64) -> Assessment {
    let pods: Vec<&Pod> = pods.iter().collect();
    assess(Observed {
        execution,
        job: JobObservation::Present(job),
        pods: &pods,
        pod_warnings: &[],
        now: now(offset),
    })
}

fn condition<'a>(
    status: &'a AgentExecutionStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions::get(&status.conditions, type_)
}

struct Row {
    name: &'static str,
    execution: AgentExecution,
    job: Job,
    pods: Vec<Pod>,
    at: i64,
    phase: Phase,
    reason: Option<(&'static str, &'static str)>,
    message_contains: &'static str,
    stop: Option<Stop>,
}

#[test]
fn phases_and_reasons() {
    let mut evicted = finished_pod("Failed", 137, None);
    evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
    evicted.status.as_mut().unwrap().message = Some("The node was low on resource: memory.".into());
    let mut unschedulable = pod("Pending", vec![], vec![]);
    unschedulable.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.".into()),
        ..Default::default()
    }]);
    let mut gpu_refused = pod("Failed", vec![], vec![]);
    gpu_refused.status.as_mut().unwrap().reason = Some("OutOfnvidia.com/gpu".into());
    let mut stage_failed_summary = TerminationSummary::parse(
        &summary(RunState::StageFailed, 1, "tar: path escapes the root").unwrap(),
    )
    .unwrap();
    stage_failed_summary.exit_code = None;
    let rows = vec![
        Row {
            name: "a Job that was just created is Starting",
            execution: execution(),
            job: job(),
            pods: vec![],
            at: 5,
            phase: Phase::Starting,
            reason: Some((conditions::STARTED, reason::POD_STARTING)),
            message_contains: "",
            stop: None,
        },
        Row {
            name: "a Job held by Kueue is queued, with no start timeout",
            execution: execution(),
            job: suspended_job(),
            pods: vec![],
            at: 100_000,
            phase: Phase::Starting,
            reason: Some((conditions::STARTED, reason::QUEUED)),
            message_contains: "",
            stop: None,
        },
        Row {
            name: "staging is part of starting",
            execution: execution(),
            job: job(),
            pods: vec![pod(
                "Pending",
                vec![running_agent(5)]
                    .into_iter()
                    .map(|mut c| {
                        c.name = "errand-stage".into();
                        c
                    })
                    .collect(),
                vec![waiting("agent", "PodInitializing", "")],
            )],
            at: 30,
            phase: Phase::Starting,
            reason: Some((conditions::STARTED, reason::POD_STARTING)),
            message_contains: "",
            stop: None,
        },
        Row {
            name: "a running agent is Running",
            execution: execution(),
            job: job(),
            pods: vec![pod("Running", vec![staged()], vec![running_agent(10)])],
            at: 30,
            phase: Phase::Running,
            reason: Some((conditions::STARTED, reason::AGENT_STARTED)),
            message_contains: "",
            stop: None,
        },
        Row {
            name: "exit 0 with results saved is Succeeded",
            execution: execution(),
            job: job(),
            pods: vec![finished_pod(
                "Succeeded",
                0,
                summary(RunState::Succeeded, 0, ""),
            )],
            at: 95,
            phase: Phase::Succeeded,
            reason: Some((conditions::COMPLETE, reason::SUCCEEDED)),
            message_contains: "5 results saved",
            stop: None,
        },
        Row {
            name: "a non-zero exit is AgentFailed with the stderr tail",
            execution: execution(),
            job: failed_job("BackoffLimitExceeded"),
            pods: vec![finished_pod(
                "Failed",
                3,
                summary(RunState::Failed, 3, "Traceback...\nValueError: no numbers"),
            )],
            at: 95,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::AGENT_FAILED)),
            message_contains: "exit code 3; stderr tail:\nTraceback...\nValueError: no numbers",
            stop: None,
        },
        Row {
            name: "a failure without a summary still reports the exit code",
            execution: execution(),
            job: job(),
            pods: vec![finished_pod("Failed", 137, None)],
            at: 95,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::AGENT_FAILED)),
            message_contains: "exit code 137",
            stop: None,
        },
        Row {
            name: "the in-pod deadline is DeadlineExceeded",
            execution: execution(),
            job: failed_job("BackoffLimitExceeded"),
            pods: vec![finished_pod(
                "Failed",
                124,
                summary(RunState::TimedOut, 143, ""),
            )],
            at: 700,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::DEADLINE_EXCEEDED)),
            message_contains: "timeoutSeconds (600s)",
            stop: None,
        },
        Row {
            name: "the Job's backstop deadline is DeadlineExceeded",
            execution: execution(),
            job: failed_job("DeadlineExceeded"),
            pods: vec![finished_pod(
                "Failed",
                143,
                summary(RunState::Cancelled, 143, ""),
            )],
            at: 2000,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::DEADLINE_EXCEEDED)),
            message_contains: "backstop",
            stop: None,
        },
        Row {
            name: "the backstop deadline with the pod gone is DeadlineExceeded",
            execution: execution(),
            job: failed_job("DeadlineExceeded"),
            pods: vec![],
            at: 2000,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::DEADLINE_EXCEEDED)),
            message_contains: "deadline",
            stop: None,
        },
        Row {
            name: "an evicted pod is PodEvicted",
            execution: execution(),
            job: job(),
            pods: vec![evicted],
            at: 95,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::POD_EVICTED)),
            message_contains: "low on resource",
            stop: None,
        },
        Row {
            name: "a node that refuses the GPU pod is Unschedulable",
            execution: execution(),
            job: job(),
            pods: vec![gpu_refused],
            at: 10,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::UNSCHEDULABLE)),
            message_contains: "OutOfnvidia.com/gpu",
            stop: None,
        },
        Row {
            name: "a failed stage container is StageFailed",
            execution: execution(),
            job: job(),
            pods: vec![pod(
                "Failed",
                vec![terminated(
                    "errand-stage",
                    1,
                    Some(serde_json::to_string(&stage_failed_summary).unwrap()),
                )],
                vec![waiting("agent", "PodInitializing", "")],
            )],
            at: 30,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::STAGE_FAILED)),
            message_contains: "path escapes the root",
            stop: None,
        },
        Row {
            name: "an unpullable image within the start timeout is still Starting",
            execution: execution(),
            job: job(),
            pods: vec![pod(
                "Pending",
                vec![staged()],
                vec![waiting(
                    "agent",
                    "ImagePullBackOff",
                    "Back-off pulling image \"nope:latest\"",
                )],
            )],
            at: 100,
            phase: Phase::Starting,
            reason: None,
            message_contains: "",
            stop: None,
        },
        Row {
            name: "an unpullable image past the start timeout is ImagePullFailed",
            execution: execution(),
            job: job(),
            pods: vec![pod(
                "Pending",
                vec![staged()],
                vec![waiting(
                    "agent",
                    "ImagePullBackOff",
                    "Back-off pulling image \"nope:latest\"",
                )],
            )],
            at: 123,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::IMAGE_PULL_FAILED)),
            message_contains: "Back-off pulling image \"nope:latest\"",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "an unschedulable pod past the start timeout is Unschedulable",
            execution: execution(),
            job: job(),
            pods: vec![unschedulable],
            at: 123,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::UNSCHEDULABLE)),
            message_contains: "Insufficient nvidia.com/gpu",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "a Job that never made a pod fails with StartTimeout",
            execution: execution(),
            job: job(),
            pods: vec![],
            at: 122,
            phase: Phase::Failed,
            reason: Some((conditions::FAILED, reason::START_TIMEOUT)),
            message_contains: "no pod was created",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "cancelling a running agent deletes its pod gracefully and stays Running",
            execution: cancelled(execution()),
            job: job(),
            pods: vec![pod("Running", vec![staged()], vec![running_agent(10)])],
            at: 30,
            phase: Phase::Running,
            reason: None,
            message_contains: "",
            stop: Some(Stop::DeletePod("errand-calc-x7k2p".into())),
        },
        Row {
            name: "a cancelled run that ended is Cancelled with its partial results",
            execution: cancelled(execution()),
            job: failed_job("BackoffLimitExceeded"),
            pods: vec![finished_pod(
                "Failed",
                143,
                summary(RunState::Cancelled, 143, ""),
            )],
            at: 60,
            phase: Phase::Cancelled,
            reason: Some((conditions::FAILED, reason::CANCELLED)),
            message_contains: "partial results",
            stop: None,
        },
        Row {
            name: "cancelling before the agent starts deletes the Job and is Cancelled at once",
            execution: cancelled(execution()),
            job: suspended_job(),
            pods: vec![],
            at: 60,
            phase: Phase::Cancelled,
            reason: Some((conditions::FAILED, reason::CANCELLED)),
            message_contains: "before the agent started",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "a run that succeeded just as it was cancelled is Succeeded",
            execution: cancelled(execution()),
            job: job(),
            pods: vec![finished_pod(
                "Succeeded",
                0,
                summary(RunState::Succeeded, 0, ""),
            )],
            at: 95,
            phase: Phase::Succeeded,
            reason: Some((conditions::COMPLETE, reason::SUCCEEDED)),
            message_contains: "",
            stop: None,
        },
    ];
    for row in rows {
        let assessment = assess_at(&row.execution, &row.job, &row.pods, row.at);
        let status = &assessment.status;
        assert_eq!(status.phase, Some(row.phase), "{}", row.name);
        if let Some((type_, why)) = row.reason {
            let c = condition(status, type_).unwrap_or_else(|| panic!("{}: no {type_}", row.name));
            assert_eq!(c.reason, why, "{}", row.name);
        }
        let message = status.message.clone().unwrap_or_default();
        assert!(
            message.contains(row.message_contains),
            "{}: message {message:?}",
            row.name
        );
        assert!(message.len() <= MESSAGE_LIMIT, "{}", row.name);
        assert_eq!(assessment.stop, row.stop, "{}", row.name);
        assert_eq!(
            status.observed_generation, row.execution.metadata.generation,
            "{}",
            row.name
        );
        if row.phase.is_terminal() {
            assert!(status.completion_time.is_some(), "{}", row.name);
            assert!(status.duration.is_some(), "{}", row.name);
        }
    }
}

#[test]
fn a_finished_run_records_times_exit_code_and_results() {
    let status = assess_at(
        &execution(),
        &job(),
        &[finished_pod(
            "Succeeded",
            0,
            summary(RunState::Succeeded, 0, ""),
        )],
        95,
    )
    .status;
    assert_eq!(status.start_time, Some(at(10)));
    assert_eq!(status.completion_time, Some(at(90)));
    assert_eq!(status.duration.as_deref(), Some("1m20s"));
    assert_eq!(status.exit_code, Some(0));
    assert_eq!(status.results, results());
    let saved = condition(&status, conditions::RESULTS_SAVED).unwrap();
    assert_eq!(
        (saved.status.as_str(), saved.reason.as_str()),
        ("True", reason::RESULTS_SAVED)
    );
    assert_eq!(status.job_name.as_deref(), Some("errand-calc"));
    assert_eq!(status.agent.as_deref(), Some("calculator"));
}

#[test]
fn results_that_could_not_be_saved_fail_a_successful_run() {
    let mut summary =
        TerminationSummary::parse(&summary(RunState::Succeeded, 0, "").unwrap()).unwrap();
    summary.results_error = Some("PUT output_workdir: 403 Forbidden".into());
    let pod = finished_pod("Succeeded", 0, Some(summary.to_termination_message()));
    let status = assess_at(&execution(), &job(), &[pod], 95).status;
    assert_eq!(status.phase, Some(Phase::Failed));
    let failed = condition(&status, conditions::FAILED).unwrap();
    assert_eq!(failed.reason, reason::RESULTS_UPLOAD_FAILED);
    let saved = condition(&status, conditions::RESULTS_SAVED).unwrap();
    assert_eq!(
        (saved.status.as_str(), saved.reason.as_str()),
        ("False", reason::RESULTS_UPLOAD_FAILED)
    );
    assert!(status.message.unwrap().contains("403 Forbidden"));
}

#[test]
fn a_pending_pod_is_rechecked_when_its_start_timeout_passes() {
    let pods = [pod("Pending", vec![], vec![])];
    let assessment = assess_at(&execution(), &job(), &pods, 32);
    // created at +2, limit 120s
    assert_eq!(assessment.recheck_after, Some(Duration::from_secs(90)));
}

#[test]
fn a_terminal_status_is_never_recomputed() {
    let done = {
        let mut e = execution();
        e.status = Some(
            assess_at(
                &e,
                &job(),
                &[finished_pod(
                    "Succeeded",
                    0,
                    summary(RunState::Succeeded, 0, ""),
                )],
                95,
            )
            .status,
        );
        e
    };
    let later = assess_at(
        &cancelled(done.clone()),
        &failed_job("DeadlineExceeded"),
        &[],
        5000,
    );
    assert_eq!(Some(later.status), done.status);
    assert_eq!(later.stop, None);
}

#[test]
fn an_unchanged_observation_gives_an_unchanged_status() {
    let mut e = execution();
    let pods = [pod("Running", vec![staged()], vec![running_agent(10)])];
    e.status = Some(assess_at(&e, &job(), &pods, 30).status);
    let again = assess_at(&e, &job(), &pods, 300).status;
    assert_eq!(Some(again), e.status, "no status write is needed");
}

#[test]
fn a_deleted_job_fails_the_execution_and_is_not_replaced() {
    let e = execution();
    let assessment = assess(Observed {
        execution: &e,
        job: JobObservation::Gone,
        pods: &[],
        pod_warnings: &[],
        now: now(50),
    });
    assert_eq!(assessment.status.phase, Some(Phase::Failed));
    assert_eq!(
        condition(&assessment.status, conditions::FAILED)
            .unwrap()
            .reason,
        reason::JOB_DELETED
    );
}

#[test]
fn an_invalid_spec_fails_with_every_problem() {
    let mut e = execution();
    e.status = None;
    let error = InvalidSpec {
        problems: vec![Problem::new(
            "spec.agentRef.name",
            "Agent \"nope\" not found in namespace \"team-a\"",
        )],
    };
    let status = invalid(&e, &error, now(3));
    assert_eq!(status.phase, Some(Phase::Failed));
    for type_ in [conditions::RESOLVED, conditions::FAILED] {
        assert_eq!(
            condition(&status, type_).unwrap().reason,
            reason::INVALID_SPEC
        );
    }
    assert_eq!(
        condition(&status, conditions::RESOLVED).unwrap().status,
        "False"
    );
    assert!(status.message.unwrap().contains("spec.agentRef.name"));
    assert_eq!(status.completion_time, Some(at(3)));
    assert_eq!(status.job_name, None);
}

#[test]
fn a_long_message_keeps_its_start_and_the_end_of_stderr() {
    let stderr = format!("{}\nFinal error line", "noise ".repeat(2000));
    let message = with_tail("the agent failed with exit code 1", &stderr);
    assert!(message.len() <= MESSAGE_LIMIT);
    assert!(message.starts_with("the agent failed with exit code 1"));
    assert!(message.ends_with("Final error line"));
}

#[test]
fn durations_read_like_kubectl() {
    assert_eq!(format_duration(45), "45s");
    assert_eq!(format_duration(125), "2m5s");
    assert_eq!(format_duration(3723), "1h2m3s");
    assert_eq!(format_duration(-3), "0s");
}

#[test]
fn a_start_timeout_without_a_reason_in_the_status_takes_it_from_the_pods_warnings() {
    let e = execution();
    // Between two pull attempts the kubelet reports the agent as PodInitializing again.
    let pods = [pod(
        "Pending",
        vec![staged()],
        vec![waiting("agent", "PodInitializing", "")],
    )];
    let pod_refs: Vec<&Pod> = pods.iter().collect();
    let job = job();
    let mut observed = Observed {
        execution: &e,
        job: JobObservation::Present(&job),
        pods: &pod_refs,
        pod_warnings: &[],
        now: now(123),
    };
    let first = assess(observed);
    assert_eq!(
        condition(&first.status, conditions::FAILED).unwrap().reason,
        reason::START_TIMEOUT
    );
    assert!(needs_pod_warnings(&observed, &first));

    let event = k8s_openapi::api::core::v1::Event {
        type_: Some("Warning".into()),
        reason: Some("ErrImageNeverPull".into()),
        message: Some("Container image \"nope:1\" is not present with pull policy of Never".into()),
        involved_object: k8s_openapi::api::core::v1::ObjectReference {
            field_path: Some("spec.containers{agent}".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let normal = k8s_openapi::api::core::v1::Event {
        type_: Some("Normal".into()),
        ..event.clone()
    };
    assert_eq!(PodWarning::from_event(&normal), None);
    let warnings = [PodWarning::from_event(&event).unwrap()];
    assert_eq!(warnings[0].container.as_deref(), Some("agent"));
    observed.pod_warnings = &warnings;
    let second = assess(observed);
    let failed = condition(&second.status, conditions::FAILED).unwrap();
    assert_eq!(failed.reason, reason::IMAGE_PULL_FAILED);
    assert!(
        failed
            .message
            .contains("container agent: ErrImageNeverPull"),
        "{}",
        failed.message
    );
    assert_eq!(second.stop, Some(Stop::DeleteJob));
    assert!(!needs_pod_warnings(&observed, &second), "read once");
}

#[test]
fn other_warnings_explain_a_start_timeout_too() {
    let e = execution();
    let pods = [pod("Pending", vec![], vec![])];
    let pod_refs: Vec<&Pod> = pods.iter().collect();
    let job = job();
    let warnings = [PodWarning {
        container: None,
        reason: "FailedMount".into(),
        message: "secret \"model-keys\" not found".into(),
    }];
    let assessment = assess(Observed {
        execution: &e,
        job: JobObservation::Present(&job),
        pods: &pod_refs,
        pod_warnings: &warnings,
        now: now(123),
    });
    let failed = condition(&assessment.status, conditions::FAILED).unwrap();
    assert_eq!(failed.reason, reason::START_TIMEOUT);
    assert!(
        failed
            .message
            .contains("FailedMount: secret \"model-keys\" not found")
    );
}
