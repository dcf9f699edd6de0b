//! Table-driven tests of the status decisions from plain facts, one row per way a run can go, and of the observation that turns Jobs, pods and events into those facts.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Event, ObjectReference, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};

use super::observe::pod_facts;
use super::render::format_duration;
use super::*;
use crate::api::contract::{self, COMPLETED_RUN_RESULTS, ConditionType, Reason};
use crate::api::{
    AgentExecution, AgentExecutionSpec, AgentExecutionStatus, Phase, ResultEntry, SnapshotRef,
};
use crate::resolve::{InvalidSpec, Problem};
use crate::runner::outcome::with_tail;
use crate::runner::termination::TerminationSummary;
use crate::runner::{ExtensionSummary, RunState};

const T0: i64 = 1_800_000_000;

fn at(offset: i64) -> Time {
    Time(Timestamp::from_second(T0 + offset).unwrap())
}

fn now(offset: i64) -> Timestamp {
    at(offset).0
}

/// [`AgentExecution::test`] created at +0, with a 600s run and a 120s start timeout, Starting
/// since +1 with its snapshot and Job `errand-calc`.
fn execution() -> AgentExecution {
    let mut execution = AgentExecution::test()
        .with_spec(AgentExecutionSpec::test().with_timeouts(600, 120))
        .with_creation_timestamp(at(0));
    execution.status = Some(starting(
        &execution,
        "calculator",
        SnapshotRef::test(),
        "errand-calc",
        None,
        now(1),
    ));
    execution
}

fn cancelled(mut execution: AgentExecution) -> AgentExecution {
    execution.spec.cancel = true;
    execution.metadata.generation = Some(2);
    execution
}

/// A Job created and started at +1.
fn job() -> JobFacts {
    JobFacts {
        uid: Some("job-uid".into()),
        suspended: false,
        queue: None,
        started: Some(now(1)),
        failure: None,
    }
}

/// A Job Kueue holds in LocalQueue `gpu`, created at +1 and not started.
fn suspended_job() -> JobFacts {
    JobFacts {
        suspended: true,
        queue: Some("gpu".into()),
        started: None,
        ..job()
    }
}

/// Kueue's Workload for a Job it has no quota for yet.
fn workload_without_quota() -> WorkloadFacts {
    WorkloadFacts {
        name: "job-errand-calc-3f2a1".into(),
        pending: Some(Cause {
            reason: "Pending".into(),
            message: "couldn't assign flavors to pod set main: insufficient unused quota for \
                      nvidia.com/gpu in flavor gpu, 1 more needed"
                .into(),
        }),
        admitted: false,
    }
}

fn failed_job(reason: &str) -> JobFacts {
    JobFacts {
        failure: Some(Cause {
            reason: reason.into(),
            message: "Job was active longer than specified deadline".into(),
        }),
        ..job()
    }
}

/// A pod created at +2 that nothing has happened to yet.
fn pod() -> PodFacts {
    PodFacts {
        name: "errand-calc-x7k2p".into(),
        created: Some(now(2)),
        ..PodFacts::default()
    }
}

fn waiting(container: &str, reason: &str, message: &str) -> Waiting {
    Waiting {
        container: container.into(),
        reason: reason.into(),
        message: message.into(),
    }
}

/// A pod whose agent runs since `since`.
fn running(since: i64) -> PodFacts {
    PodFacts {
        agent_started_at: Some(at(since)),
        stage_exit_code: Some(0),
        ..pod()
    }
}

/// A finished pod whose agent ran from +10 to +90.
fn finished(exit_code: i32, summary: Option<TerminationSummary>) -> PodFacts {
    PodFacts {
        finished: true,
        agent_started_at: Some(at(10)),
        agent_exit_code: Some(exit_code),
        agent_finished_at: Some(at(90)),
        stage_exit_code: Some(0),
        summary,
        ..pod()
    }
}

fn results() -> Vec<ResultEntry> {
    COMPLETED_RUN_RESULTS
        .iter()
        .map(|name| ResultEntry {
            name: (*name).into(),
            size: 100,
            sha256: "d".repeat(64),
        })
        .collect()
}

fn summary(state: RunState, exit_code: i32, stderr: &str) -> TerminationSummary {
    TerminationSummary {
        state,
        exit_code: Some(exit_code),
        timed_out: state == RunState::TimedOut,
        stderr_tail: stderr.into(),
        results: results(),
        results_error: None,
        gpu_devices: Vec::new(),
    }
}

fn facts_at(job: JobFacts, pod: Option<PodFacts>, offset: i64) -> Facts {
    Facts {
        job: Some(job),
        pod,
        workload: None,
        warnings: Vec::new(),
        now: now(offset),
    }
}

/// The decision on `facts` and the status it renders.
fn assess(execution: &AgentExecution, facts: &Facts) -> (AgentExecutionStatus, Decision) {
    let decision = decide(execution, facts);
    (render(execution, &decision.standing, facts.now), decision)
}

fn condition(status: &AgentExecutionStatus, type_: ConditionType) -> Option<&Condition> {
    conditions::get(&status.conditions, type_)
}

struct Row {
    name: &'static str,
    execution: AgentExecution,
    job: JobFacts,
    pod: Option<PodFacts>,
    at: i64,
    phase: Phase,
    reason: Option<(ConditionType, Reason)>,
    message_contains: &'static str,
    stop: Option<Stop>,
}

#[test]
fn phases_and_reasons() {
    let evicted = PodFacts {
        reason: "Evicted".into(),
        message: "The node was low on resource: memory.".into(),
        ..finished(137, None)
    };
    let unschedulable = PodFacts {
        unschedulable: Some(Cause {
            reason: "Unschedulable".into(),
            message: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.".into(),
        }),
        ..pod()
    };
    let gpu_refused = PodFacts {
        finished: true,
        reason: "OutOfnvidia.com/gpu".into(),
        ..pod()
    };
    let stage_failed = PodFacts {
        finished: true,
        stage_exit_code: Some(1),
        summary: Some(TerminationSummary {
            exit_code: None,
            ..summary(RunState::StageFailed, 1, "tar: path escapes the root")
        }),
        waiting: vec![waiting("agent", "PodInitializing", "")],
        ..pod()
    };
    let image_pull_backoff = PodFacts {
        stage_exit_code: Some(0),
        waiting: vec![waiting(
            "agent",
            "ImagePullBackOff",
            "Back-off pulling image \"nope:latest\"",
        )],
        ..pod()
    };
    let rows = vec![
        Row {
            name: "a Job that was just created is Starting",
            execution: execution(),
            job: job(),
            pod: None,
            at: 5,
            phase: Phase::Starting,
            reason: Some((ConditionType::Started, Reason::PodStarting)),
            message_contains: "",
            stop: None,
        },
        Row {
            name: "a Job held by Kueue is queued, with no start timeout",
            execution: execution(),
            job: suspended_job(),
            pod: None,
            at: 100_000,
            phase: Phase::Queued,
            reason: Some((ConditionType::Started, Reason::Queued)),
            message_contains: "waiting in Kueue LocalQueue gpu: Kueue has not created",
            stop: None,
        },
        Row {
            name: "a Job Kueue resumed after a long wait starts its start timeout then",
            execution: execution(),
            job: JobFacts {
                suspended: false,
                ..suspended_job()
            },
            pod: None,
            at: 100_000,
            phase: Phase::Starting,
            reason: Some((ConditionType::Started, Reason::PodStarting)),
            message_contains: "",
            stop: None,
        },
        Row {
            name: "a Job Kueue admitted long after its creation times out from its start",
            execution: execution(),
            job: JobFacts {
                started: Some(now(100_000)),
                ..job()
            },
            pod: None,
            at: 100_121,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::StartTimeout)),
            message_contains: "within 120s",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "staging is part of starting",
            execution: execution(),
            job: job(),
            pod: Some(PodFacts {
                waiting: vec![waiting("agent", "PodInitializing", "")],
                ..pod()
            }),
            at: 30,
            phase: Phase::Starting,
            reason: Some((ConditionType::Started, Reason::PodStarting)),
            message_contains: "",
            stop: None,
        },
        Row {
            name: "a running agent is Running",
            execution: execution(),
            job: job(),
            pod: Some(running(10)),
            at: 30,
            phase: Phase::Running,
            reason: Some((ConditionType::Started, Reason::AgentStarted)),
            message_contains: "",
            stop: None,
        },
        Row {
            name: "exit 0 with results saved is Succeeded",
            execution: execution(),
            job: job(),
            pod: Some(finished(0, Some(summary(RunState::Succeeded, 0, "")))),
            at: 95,
            phase: Phase::Succeeded,
            reason: Some((ConditionType::Complete, Reason::Succeeded)),
            message_contains: "5 results saved",
            stop: None,
        },
        Row {
            name: "a non-zero exit is AgentFailed with the stderr tail",
            execution: execution(),
            job: failed_job("BackoffLimitExceeded"),
            pod: Some(finished(
                3,
                Some(summary(
                    RunState::Failed,
                    3,
                    "Traceback...\nValueError: no numbers",
                )),
            )),
            at: 95,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::AgentFailed)),
            message_contains: "exit code 3; stderr tail:\nTraceback...\nValueError: no numbers",
            stop: None,
        },
        Row {
            name: "a failure without a summary still reports the exit code",
            execution: execution(),
            job: job(),
            pod: Some(finished(137, None)),
            at: 95,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::AgentFailed)),
            message_contains: "exit code 137",
            stop: None,
        },
        Row {
            name: "the in-pod deadline is DeadlineExceeded",
            execution: execution(),
            job: failed_job("BackoffLimitExceeded"),
            pod: Some(finished(124, Some(summary(RunState::TimedOut, 143, "")))),
            at: 700,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::DeadlineExceeded)),
            message_contains: "timeoutSeconds (600s)",
            stop: None,
        },
        Row {
            name: "the Job's backstop deadline is DeadlineExceeded",
            execution: execution(),
            job: failed_job("DeadlineExceeded"),
            pod: Some(finished(143, Some(summary(RunState::Cancelled, 143, "")))),
            at: 2000,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::DeadlineExceeded)),
            message_contains: "backstop",
            stop: None,
        },
        Row {
            name: "the backstop deadline with the pod gone is DeadlineExceeded",
            execution: execution(),
            job: failed_job("DeadlineExceeded"),
            pod: None,
            at: 2000,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::DeadlineExceeded)),
            message_contains: "deadline",
            stop: None,
        },
        Row {
            name: "an evicted pod is PodEvicted",
            execution: execution(),
            job: job(),
            pod: Some(evicted),
            at: 95,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::PodEvicted)),
            message_contains: "low on resource",
            stop: None,
        },
        Row {
            name: "a node that refuses the GPU pod is Unschedulable",
            execution: execution(),
            job: job(),
            pod: Some(gpu_refused),
            at: 10,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::Unschedulable)),
            message_contains: "OutOfnvidia.com/gpu",
            stop: None,
        },
        Row {
            name: "a failed stage container is StageFailed",
            execution: execution(),
            job: job(),
            pod: Some(stage_failed),
            at: 30,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::StageFailed)),
            message_contains: "path escapes the root",
            stop: None,
        },
        Row {
            name: "an unpullable image within the start timeout is still Starting",
            execution: execution(),
            job: job(),
            pod: Some(image_pull_backoff.clone()),
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
            pod: Some(image_pull_backoff),
            at: 123,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::ImagePullFailed)),
            message_contains: "Back-off pulling image \"nope:latest\"",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "an unschedulable pod past the start timeout is Unschedulable",
            execution: execution(),
            job: job(),
            pod: Some(unschedulable),
            at: 123,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::Unschedulable)),
            message_contains: "Insufficient nvidia.com/gpu",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "a Job that never made a pod fails with StartTimeout",
            execution: execution(),
            job: job(),
            pod: None,
            at: 122,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::StartTimeout)),
            message_contains: "no pod was created",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "cancelling a running agent deletes its pod gracefully and stays Running",
            execution: cancelled(execution()),
            job: job(),
            pod: Some(running(10)),
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
            pod: Some(finished(143, Some(summary(RunState::Cancelled, 143, "")))),
            at: 60,
            phase: Phase::Cancelled,
            reason: Some((ConditionType::Failed, Reason::Cancelled)),
            message_contains: "partial results",
            stop: None,
        },
        Row {
            name: "cancelling before the agent starts deletes the Job and is Cancelled at once",
            execution: cancelled(execution()),
            job: suspended_job(),
            pod: None,
            at: 60,
            phase: Phase::Cancelled,
            reason: Some((ConditionType::Failed, Reason::Cancelled)),
            message_contains: "cancelled while queued in Kueue; no pod ran",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "cancelling a starting pod deletes the Job and is Cancelled at once",
            execution: cancelled(execution()),
            job: job(),
            pod: Some(pod()),
            at: 60,
            phase: Phase::Cancelled,
            reason: Some((ConditionType::Failed, Reason::Cancelled)),
            message_contains: "before the agent started",
            stop: Some(Stop::DeleteJob),
        },
        Row {
            name: "a run that succeeded just as it was cancelled is Succeeded",
            execution: cancelled(execution()),
            job: job(),
            pod: Some(finished(0, Some(summary(RunState::Succeeded, 0, "")))),
            at: 95,
            phase: Phase::Succeeded,
            reason: Some((ConditionType::Complete, Reason::Succeeded)),
            message_contains: "",
            stop: None,
        },
    ];
    for row in rows {
        let (status, decision) = assess(&row.execution, &facts_at(row.job, row.pod, row.at));
        assert_eq!(status.phase, Some(row.phase), "{}", row.name);
        if let Some((type_, why)) = row.reason {
            let c = condition(&status, type_).unwrap_or_else(|| panic!("{}: no {type_}", row.name));
            assert_eq!(c.reason, why.as_str(), "{}", row.name);
        }
        let message = status.message.clone().unwrap_or_default();
        assert!(
            message.contains(row.message_contains),
            "{}: message {message:?}",
            row.name
        );
        assert!(message.len() <= MESSAGE_LIMIT, "{}", row.name);
        assert_eq!(decision.stop, row.stop, "{}", row.name);
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
    let facts = facts_at(
        job(),
        Some(finished(0, Some(summary(RunState::Succeeded, 0, "")))),
        95,
    );
    let (status, _) = assess(&execution(), &facts);
    assert_eq!(status.start_time, Some(at(10)));
    assert_eq!(status.completion_time, Some(at(90)));
    assert_eq!(status.duration.as_deref(), Some("1m20s"));
    assert_eq!(status.exit_code, Some(0));
    assert_eq!(status.results, results());
    let saved = condition(&status, ConditionType::ResultsSaved).unwrap();
    assert_eq!(
        (saved.status.as_str(), saved.reason.as_str()),
        ("True", Reason::ResultsSaved.as_str())
    );
    assert_eq!(status.job_name.as_deref(), Some("errand-calc"));
    assert_eq!(status.agent.as_deref(), Some("calculator"));
}

#[test]
fn a_queued_execution_shows_kueues_reason_until_admitted_then_starts() {
    let mut e = execution();
    e.status = Some(starting(
        &e,
        "calculator",
        SnapshotRef::test(),
        "errand-calc",
        Some("gpu"),
        now(1),
    ));
    assert_eq!(e.status.as_ref().unwrap().phase, Some(Phase::Queued));

    let mut facts = facts_at(suspended_job(), None, 30);
    facts.workload = Some(workload_without_quota());
    let (queued, decision) = assess(&e, &facts);
    assert_eq!(decision.recheck_after, None, "queue time is not start time");
    assert_eq!(queued.phase, Some(Phase::Queued));
    let started = condition(&queued, ConditionType::Started).unwrap();
    assert_eq!(
        (started.status.as_str(), started.reason.as_str()),
        ("False", "Queued")
    );
    let expected = "waiting in Kueue LocalQueue gpu (Workload job-errand-calc-3f2a1: Pending): \
                    couldn't assign flavors to pod set main: insufficient unused quota for \
                    nvidia.com/gpu in flavor gpu, 1 more needed";
    assert_eq!(started.message, expected);
    assert_eq!(queued.message.as_deref(), Some(expected));
    e.status = Some(queued.clone());
    assert_eq!(
        assess(&e, &facts).0,
        queued,
        "no new write while nothing changes"
    );

    facts.job = Some(JobFacts {
        suspended: false,
        started: Some(now(40)),
        ..suspended_job()
    });
    facts.workload = Some(WorkloadFacts {
        pending: None,
        admitted: true,
        ..workload_without_quota()
    });
    facts.now = now(45);
    let (admitted, decision) = assess(&e, &facts);
    assert_eq!(admitted.phase, Some(Phase::Starting));
    assert_eq!(admitted.message, None, "Kueue's reason goes with the queue");
    let started = condition(&admitted, ConditionType::Started).unwrap();
    assert_eq!(
        (started.reason.as_str(), started.message.as_str()),
        ("PodStarting", "")
    );
    assert_eq!(
        decision.recheck_after,
        Some(Duration::from_secs(116)),
        "the start timeout counts from Kueue's admission at +40 (looked at a second past it)"
    );
}

#[test]
fn kueues_words_are_read_from_the_workloads_conditions() {
    let workload = |conditions: serde_json::Value| -> crate::cluster::kueue::Workload {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": "job-errand-calc-3f2a1", "namespace": "team-a"},
            "spec": {},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    };
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        serde_json::json!({"type": type_, "status": status, "reason": reason,
            "message": message, "lastTransitionTime": "2026-11-30T12:00:00Z"})
    };
    let pending = workload_facts(&workload(serde_json::json!([condition(
        "QuotaReserved",
        "False",
        "Inadmissible",
        "LocalQueue gpu doesn't exist"
    )])));
    assert_eq!(
        pending.pending,
        Some(Cause {
            reason: "Inadmissible".into(),
            message: "LocalQueue gpu doesn't exist".into()
        })
    );
    assert!(!pending.admitted);
    let checks = workload_facts(&workload(serde_json::json!([
        condition(
            "QuotaReserved",
            "True",
            "QuotaReserved",
            "Quota reserved in ClusterQueue cq"
        ),
        condition(
            "Admitted",
            "False",
            "NoChecks",
            "waiting for admission checks"
        ),
    ])));
    assert_eq!(
        checks.pending.map(|c| c.message).as_deref(),
        Some("waiting for admission checks")
    );
    let admitted = workload_facts(&workload(serde_json::json!([
        condition(
            "QuotaReserved",
            "True",
            "QuotaReserved",
            "Quota reserved in ClusterQueue cq"
        ),
        condition("Admitted", "True", "Admitted", "The workload is admitted"),
    ])));
    assert_eq!((&admitted.pending, admitted.admitted), (&None, true));
    assert!(queued_message(Some("gpu"), Some(&admitted)).contains("the Job resumes"));
}

#[test]
fn the_gpus_the_agent_saw_are_in_the_status() {
    let summary = TerminationSummary {
        gpu_devices: vec!["fake-gpu-1".into()],
        ..summary(RunState::Succeeded, 0, "")
    };
    let facts = facts_at(job(), Some(finished(0, Some(summary))), 95);
    let (status, _) = assess(&execution(), &facts);
    assert_eq!(status.phase, Some(Phase::Succeeded));
    assert_eq!(status.gpu_devices, ["fake-gpu-1"]);
}

#[test]
fn results_that_could_not_be_saved_fail_a_successful_run() {
    let summary = TerminationSummary {
        results_error: Some("PUT output_workdir: 403 Forbidden".into()),
        ..summary(RunState::Succeeded, 0, "")
    };
    let facts = facts_at(job(), Some(finished(0, Some(summary))), 95);
    let (status, _) = assess(&execution(), &facts);
    assert_eq!(status.phase, Some(Phase::Failed));
    let failed = condition(&status, ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, Reason::ResultsUploadFailed.as_str());
    let saved = condition(&status, ConditionType::ResultsSaved).unwrap();
    assert_eq!(
        (saved.status.as_str(), saved.reason.as_str()),
        ("False", Reason::ResultsUploadFailed.as_str())
    );
    assert!(status.message.unwrap().contains("403 Forbidden"));
}

#[test]
fn a_pending_pod_is_rechecked_when_its_start_timeout_passes() {
    let (_, decision) = assess(&execution(), &facts_at(job(), Some(pod()), 32));
    // created at +2, limit 120s: due at +122, looked at a second past it
    assert_eq!(decision.recheck_after, Some(Duration::from_secs(91)));
}

#[test]
fn running_shows_once_the_agent_ran_for_the_window_and_is_rechecked_then() {
    let e = execution();
    // The agent started at +10 by the pod's clock; at +10.5 Running is held back.
    let mut facts = facts_at(job(), Some(running(10)), 10);
    facts.now += Duration::from_millis(500);
    let (held, decision) = assess(&e, &facts);
    assert_eq!(held, *e.status.as_ref().unwrap(), "no write while held");
    assert_eq!(
        decision.recheck_after,
        Some(RUNNING_SHOWN_AFTER - Duration::from_millis(500))
    );
    // Once the window passed, Running shows with the agent's start time.
    let shown_at = 10 + i64::try_from(RUNNING_SHOWN_AFTER.as_secs()).unwrap();
    let (shown, decision) = assess(&e, &facts_at(job(), Some(running(10)), shown_at));
    assert_eq!(shown.phase, Some(Phase::Running));
    assert_eq!(shown.start_time, Some(at(10)));
    assert_eq!(decision.recheck_after, None);
    // A cancel is not held back: the pod is stopped at once.
    let (_, decision) = assess(&cancelled(e), &facts);
    assert_eq!(
        decision.stop,
        Some(Stop::DeletePod("errand-calc-x7k2p".into()))
    );
}

#[test]
fn a_run_that_ends_within_the_window_goes_from_starting_to_succeeded_in_one_write() {
    let e = execution();
    let mut facts = facts_at(job(), Some(running(10)), 10);
    assert_eq!(
        assess(&e, &facts).0,
        *e.status.as_ref().unwrap(),
        "Running held back"
    );
    facts.pod = Some(PodFacts {
        agent_finished_at: Some(at(11)),
        ..finished(0, Some(summary(RunState::Succeeded, 0, "")))
    });
    facts.pod.as_mut().unwrap().agent_started_at = Some(at(10));
    facts.now = now(11);
    let (done, _) = assess(&e, &facts);
    assert_eq!(done.phase, Some(Phase::Succeeded));
    // What Running would have shown is all there: the start, and condition Started.
    assert_eq!(done.start_time, Some(at(10)));
    let started = condition(&done, ConditionType::Started).unwrap();
    assert_eq!(
        (started.status.as_str(), started.reason.as_str()),
        ("True", "AgentStarted")
    );
    assert_eq!(
        condition(&done, ConditionType::Complete).unwrap().status,
        "True"
    );
    assert_eq!(done.completion_time, Some(at(11)));
}

#[test]
fn a_terminal_status_is_never_recomputed() {
    let done = {
        let mut e = execution();
        let facts = facts_at(
            job(),
            Some(finished(0, Some(summary(RunState::Succeeded, 0, "")))),
            95,
        );
        e.status = Some(assess(&e, &facts).0);
        e
    };
    let (later, decision) = assess(
        &cancelled(done.clone()),
        &facts_at(failed_job("DeadlineExceeded"), None, 5000),
    );
    assert_eq!(Some(later), done.status);
    assert_eq!(decision.stop, None);
}

#[test]
fn an_unchanged_observation_gives_an_unchanged_status() {
    let mut e = execution();
    e.status = Some(assess(&e, &facts_at(job(), Some(running(10)), 30)).0);
    let (again, _) = assess(&e, &facts_at(job(), Some(running(10)), 300));
    assert_eq!(Some(again), e.status, "no status write is needed");
}

#[test]
fn a_deleted_job_fails_the_execution_and_is_not_replaced() {
    let facts = Facts {
        job: None,
        pod: None,
        workload: None,
        warnings: Vec::new(),
        now: now(50),
    };
    let (status, _) = assess(&execution(), &facts);
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(
        condition(&status, ConditionType::Failed).unwrap().reason,
        Reason::JobDeleted.as_str()
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
    for type_ in [ConditionType::Resolved, ConditionType::Failed] {
        assert_eq!(
            condition(&status, type_).unwrap().reason,
            Reason::InvalidSpec.as_str()
        );
    }
    assert_eq!(
        condition(&status, ConditionType::Resolved).unwrap().status,
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
    let pending = PodFacts {
        stage_exit_code: Some(0),
        waiting: vec![waiting("agent", "PodInitializing", "")],
        ..pod()
    };
    let mut facts = facts_at(job(), Some(pending), 123);
    let (first, decision) = assess(&e, &facts);
    assert_eq!(
        condition(&first, ConditionType::Failed).unwrap().reason,
        Reason::StartTimeout.as_str()
    );
    assert!(decision.needs_warnings(&facts));

    let event = Event {
        type_: Some("Warning".into()),
        reason: Some("ErrImageNeverPull".into()),
        message: Some("Container image \"nope:1\" is not present with pull policy of Never".into()),
        involved_object: ObjectReference {
            field_path: Some("spec.containers{agent}".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let normal = Event {
        type_: Some("Normal".into()),
        ..event.clone()
    };
    assert_eq!(Warning::from_event(&normal), None);
    let warning = Warning::from_event(&event).unwrap();
    assert_eq!(warning.container.as_deref(), Some("agent"));
    facts.warnings = vec![warning];
    let (second, decision) = assess(&e, &facts);
    let failed = condition(&second, ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, Reason::ImagePullFailed.as_str());
    assert!(
        failed
            .message
            .contains("container agent: ErrImageNeverPull"),
        "{}",
        failed.message
    );
    assert_eq!(decision.stop, Some(Stop::DeleteJob));
    assert!(!decision.needs_warnings(&facts), "read once");
}

#[test]
fn other_warnings_explain_a_start_timeout_too() {
    let mut facts = facts_at(job(), Some(pod()), 123);
    facts.warnings = vec![Warning {
        container: None,
        reason: "FailedMount".into(),
        message: "secret \"model-keys\" not found".into(),
    }];
    let (status, _) = assess(&execution(), &facts);
    let failed = condition(&status, ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, Reason::StartTimeout.as_str());
    assert!(
        failed
            .message
            .contains("FailedMount: secret \"model-keys\" not found")
    );
}

// Observation: the facts above are what real Jobs and pods say.

fn container(name: &str, state: ContainerState) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(state),
        ..Default::default()
    }
}

fn terminated_state(exit_code: i32, message: Option<String>) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            started_at: Some(at(10)),
            finished_at: Some(at(90)),
            message,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn waiting_state(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: Some(message.into()),
        }),
        ..Default::default()
    }
}

fn k8s_pod(phase: &str, init: Vec<ContainerStatus>, main: Vec<ContainerStatus>) -> Pod {
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

// Pods that Kubernetes or someone else stopped under the agent.

fn staged() -> Vec<ResultEntry> {
    results().into_iter().take(1).collect()
}

/// What the runner reports after the pod's SIGTERM stopped the agent.
fn stopped_summary() -> TerminationSummary {
    TerminationSummary {
        results: results()
            .into_iter()
            .filter(|r| r.name != "run_result")
            .chain([ResultEntry {
                name: "run_error".into(),
                size: 120,
                sha256: "e".repeat(64),
            }])
            .collect(),
        ..summary(RunState::Terminated, 143, "")
    }
}

fn disruption(reason: &str, message: &str) -> Option<Cause> {
    Some(Cause {
        reason: reason.into(),
        message: message.into(),
    })
}

/// A pod being deleted whose agent the runner stopped and reported.
fn deleted_while_running(disruption: Option<Cause>) -> PodFacts {
    PodFacts {
        deleting: true,
        disruption,
        staged: staged(),
        ..finished(143, Some(stopped_summary()))
    }
}

#[test]
fn a_pod_stopped_under_the_agent_says_by_what_and_lists_what_was_saved() {
    let stage_done = PodFacts {
        stage_exit_code: Some(0),
        staged: staged(),
        waiting: vec![waiting("agent", "ErrImageNeverPull", "not present")],
        ..pod()
    };
    let node_lost = PodFacts {
        deleting: true,
        node: Some("localhost".into()),
        disruption: disruption(
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        ),
        ..running(10)
    };
    let cases: Vec<(&str, JobFacts, PodFacts, Reason, &str, usize)> = vec![
        (
            "kubectl delete pod while the agent runs",
            failed_job("BackoffLimitExceeded"),
            deleted_while_running(None),
            Reason::PodDeleted,
            "the pod was deleted (not by errand) while the agent was running; saved: input_workdir, output_workdir, output_artifacts, manifest.json, run_error",
            5,
        ),
        (
            "deleted after staging, before the agent started",
            job(),
            PodFacts {
                finished: true,
                deleting: true,
                ..stage_done.clone()
            },
            Reason::PodDeleted,
            "the pod was deleted (not by errand) after staging, before the agent started; saved: input_workdir",
            1,
        ),
        (
            "deleted while staging",
            job(),
            PodFacts {
                finished: true,
                deleting: true,
                stage_exit_code: Some(143),
                summary: Some(TerminationSummary {
                    exit_code: None,
                    results: vec![],
                    ..summary(RunState::Terminated, 143, "")
                }),
                ..pod()
            },
            Reason::PodDeleted,
            "while the working directory was being staged; no results were saved",
            0,
        ),
        (
            "evicted through the Eviction API (a drain)",
            job(),
            deleted_while_running(disruption(
                "EvictionByEvictionAPI",
                "Eviction API: evicting",
            )),
            Reason::PodEvicted,
            "the pod was evicted (EvictionByEvictionAPI: Eviction API: evicting) while the agent was running",
            5,
        ),
        (
            "preempted by a higher-priority pod",
            job(),
            deleted_while_running(disruption(
                "PreemptionByScheduler",
                "default-scheduler: preempting to accommodate a higher priority pod",
            )),
            Reason::PodEvicted,
            "PreemptionByScheduler",
            5,
        ),
        (
            "suspended by Kueue under the agent",
            suspended_job(),
            deleted_while_running(None),
            Reason::PodEvicted,
            "the Job was suspended (Kueue preempted it)",
            5,
        ),
        (
            "its node lost: it never finishes, and the run ends with what staging saved",
            job(),
            PodFacts {
                staged: staged(),
                ..node_lost.clone()
            },
            Reason::NodeLost,
            "node localhost stopped responding for longer than the pod tolerates, and the pod was evicted from it (DeletionByTaintManager: Taint manager: deleting due to NoExecute taint) while the agent was running; errand never starts a second pod; saved: input_workdir",
            1,
        ),
        (
            "its node lost and the pod finished after all",
            job(),
            PodFacts {
                finished: true,
                ..deleted_while_running(disruption(
                    "DeletionByPodGC",
                    "PodGC: node no longer exists",
                ))
            },
            Reason::NodeLost,
            "DeletionByPodGC",
            5,
        ),
    ];
    for (name, job, pod, reason, message, saved) in cases {
        let (status, decision) = assess(&execution(), &facts_at(job, Some(pod), 60));
        assert_eq!(status.phase, Some(Phase::Failed), "{name}");
        let failed = condition(&status, ConditionType::Failed).unwrap();
        assert_eq!(failed.reason, reason.as_str(), "{name}: {}", failed.message);
        assert!(
            failed.message.contains(message),
            "{name}: {}",
            failed.message
        );
        assert_eq!(status.results.len(), saved, "{name}");
        assert_eq!(decision.stop, None, "{name}: nothing of errand's to stop");
    }
}

#[test]
fn a_run_that_ended_on_its_own_before_its_pod_was_deleted_keeps_its_outcome() {
    let pod = PodFacts {
        deleting: true,
        ..finished(3, Some(summary(RunState::Failed, 3, "boom")))
    };
    let (status, _) = assess(
        &execution(),
        &facts_at(failed_job("BackoffLimitExceeded"), Some(pod), 95),
    );
    let failed = condition(&status, ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, Reason::AgentFailed.as_str());
}

#[test]
fn a_cancel_is_still_a_cancel_although_its_runner_only_saw_the_pod_deleted() {
    let (status, _) = assess(
        &cancelled(execution()),
        &facts_at(
            failed_job("BackoffLimitExceeded"),
            Some(deleted_while_running(None)),
            60,
        ),
    );
    assert_eq!(status.phase, Some(Phase::Cancelled));
    assert_eq!(status.results.len(), 5);
}

#[test]
fn a_pod_gone_under_a_running_agent_is_a_deleted_pod() {
    let mut e = execution();
    e.status = Some(assess(&e, &facts_at(job(), Some(running(10)), 30)).0);
    let (waiting, _) = assess(&e, &facts_at(job(), None, 40));
    assert_eq!(
        waiting.phase,
        Some(Phase::Running),
        "until the Job controller has its say"
    );
    let (status, _) = assess(&e, &facts_at(failed_job("BackoffLimitExceeded"), None, 45));
    let failed = condition(&status, ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, Reason::PodDeleted.as_str());
    assert!(
        failed
            .message
            .contains("the pod was deleted before errand saw how the run ended")
    );
}

#[test]
fn a_pod_gone_after_an_eviction_is_an_evicted_pod_by_the_jobs_failure() {
    let mut e = execution();
    e.status = Some(assess(&e, &facts_at(job(), Some(running(10)), 30)).0);
    let by_policy = JobFacts {
        failure: Some(Cause {
            reason: contract::JOB_FAILED_BY_DISRUPTION.into(),
            message: "Pod team-a/errand-calc-x7k2p has condition DisruptionTarget matching \
                      FailJob rule at index 0"
                .into(),
        }),
        ..job()
    };
    let (status, _) = assess(&e, &facts_at(by_policy, None, 45));
    let failed = condition(&status, ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, Reason::PodEvicted.as_str());
    assert!(
        failed.message.contains("the pod was evicted")
            && failed.message.contains("has condition DisruptionTarget"),
        "{}",
        failed.message
    );
}

#[test]
fn a_start_timeout_without_a_pod_names_why_the_job_made_none() {
    let mut facts = facts_at(job(), None, 122);
    let (_, decision) = assess(&execution(), &facts);
    assert!(decision.needs_warnings(&facts), "the Job's events are read");
    facts.warnings = vec![Warning {
        container: None,
        reason: "FailedCreate".into(),
        message: "Error creating: pods \"errand-calc-x\" is forbidden: no PriorityClass with name batch-high was found".into(),
    }];
    let (status, decision) = assess(&execution(), &facts);
    let failed = condition(&status, ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, Reason::StartTimeout.as_str());
    assert_eq!(
        failed.message,
        "the pod did not start within 120s: no pod was created: FailedCreate: Error creating: pods \"errand-calc-x\" is forbidden: no PriorityClass with name batch-high was found"
    );
    assert_eq!(decision.stop, Some(Stop::DeleteJob));
}

#[test]
fn a_start_timeout_after_staging_lists_what_staging_saved() {
    let pending = PodFacts {
        stage_exit_code: Some(0),
        staged: staged(),
        waiting: vec![waiting("agent", "ImagePullBackOff", "Back-off")],
        ..pod()
    };
    let (status, _) = assess(&execution(), &facts_at(job(), Some(pending), 123));
    assert_eq!(status.results, staged());
}

fn retrying_again(
    execution: &AgentExecution,
    attempt: u32,
    error: &str,
) -> Option<AgentExecutionStatus> {
    retrying(execution, attempt, error, now(50))
}

#[test]
fn retrying_shows_the_last_error_until_a_reconcile_succeeds() {
    let e = execution();
    let quota = "creating Job errand-calc: exceeded quota: jobs";
    let retrying = retrying(&e, 3, quota, now(40)).expect("shown from the third attempt");
    let condition_of =
        |status: &AgentExecutionStatus| condition(status, ConditionType::Retrying).cloned();
    let shown = condition_of(&retrying).unwrap();
    assert_eq!(
        (shown.status.as_str(), shown.reason.as_str()),
        ("True", Reason::ReconcileError.as_str())
    );
    assert_eq!(
        shown.message,
        "reconciling failed 3 times in a row; retrying with backoff. Last error: creating Job \
         errand-calc: exceeded quota: jobs"
    );
    assert_eq!(
        retrying.phase,
        e.status.as_ref().unwrap().phase,
        "the phase stays"
    );

    let mut stuck = e.clone();
    stuck.status = Some(retrying);
    // A status write wakes the controller past its backoff: nothing is written again for the
    // same error, and a new one shows only at attempts 4, 8, 16, ...
    for attempt in 4..=9 {
        assert_eq!(retrying_again(&stuck, attempt, quota), None, "{attempt}");
    }
    let conflict = "patching status: conflict";
    for attempt in [5, 6, 7] {
        assert_eq!(retrying_again(&stuck, attempt, conflict), None, "{attempt}");
    }
    let newer = retrying_again(&stuck, 8, conflict).expect("a new error at attempt 8");
    assert!(
        condition_of(&newer)
            .unwrap()
            .message
            .ends_with("Last error: patching status: conflict")
    );
    let (recovered, _) = assess(&stuck, &facts_at(job(), Some(pod()), 45));
    assert_eq!(
        condition_of(&recovered),
        None,
        "gone once a reconcile renders a status"
    );
    assert_ne!(
        Some(&recovered),
        stuck.status.as_ref(),
        "so the status is written"
    );
}

#[test]
fn a_child_refused_for_good_fails_the_execution_with_the_api_servers_words() {
    let mut e = execution();
    e.status = None;
    let message = "the API server refused to create Job errand-calc: admission policy denies Jobs";
    let status = rejected(&e, message, now(3));
    assert_eq!(status.phase, Some(Phase::Failed));
    let failed = condition(&status, ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, Reason::CreateRejected.as_str());
    assert_eq!(failed.message, message);
    assert_eq!(status.message.as_deref(), Some(message));
    assert_eq!(status.snapshot, None, "nothing of it is left");
}

#[test]
fn the_stages_termination_message_lists_what_it_saved() {
    let message =
        crate::runner::termination::StagedSummary { staged: staged() }.to_termination_message();
    let pending = k8s_pod(
        "Pending",
        vec![container(
            "errand-stage",
            terminated_state(0, Some(message)),
        )],
        vec![container("agent", waiting_state("ContainerCreating", ""))],
    );
    let facts = pod_facts(&pending);
    assert_eq!(facts.staged, staged());
    assert_eq!(facts.summary, None, "staging's report is not the runner's");
}

/// A finished pod whose agent succeeded (its results without the manifest, which the step
/// writes) and whose extension's container ended as `extension` says.
fn finished_with_extension(extension: ExtensionFacts) -> PodFacts {
    let mut agent = summary(RunState::Succeeded, 0, "");
    agent.results.retain(|r| r.name != "manifest.json");
    PodFacts {
        extension: Some(extension),
        ..finished(0, Some(agent))
    }
}

fn step(state: RunState, failure: Option<&str>, results: &[&str]) -> ExtensionSummary {
    ExtensionSummary {
        kind: "analysis".into(),
        name: "analysis".into(),
        state,
        exit_code: Some(if failure.is_some() { 3 } else { 0 }),
        failure: failure.map(str::to_owned),
        stderr_tail: if failure.is_some() {
            "cannot analyse".into()
        } else {
            String::new()
        },
        results: results
            .iter()
            .map(|name| ResultEntry {
                name: (*name).into(),
                size: 7,
                sha256: "e".repeat(64),
            })
            .collect(),
    }
}

#[test]
fn a_succeeded_extension_adds_its_condition_and_results() {
    let ran = ExtensionFacts {
        exit_code: 0,
        summary: Some(step(
            RunState::Succeeded,
            None,
            &["analysis-report", "manifest.json"],
        )),
        message: String::new(),
    };
    let facts = facts_at(job(), Some(finished_with_extension(ran)), 95);
    let (status, _) = assess(&execution(), &facts);
    assert_eq!(status.phase, Some(Phase::Succeeded));
    let condition = condition(&status, ConditionType::ExtensionSucceeded).unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", Reason::ExtensionSucceeded.as_str())
    );
    let names: Vec<&str> = status.results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "input_workdir",
            "output_workdir",
            "output_artifacts",
            "run_result",
            "analysis-report",
            "manifest.json"
        ]
    );
}

#[test]
fn a_failed_extension_fails_the_execution_as_on_the_local_backend() {
    let ran = ExtensionFacts {
        exit_code: 1,
        summary: Some(step(
            RunState::Failed,
            Some("exited with code 3"),
            &["manifest.json"],
        )),
        message: String::new(),
    };
    let facts = facts_at(job(), Some(finished_with_extension(ran)), 95);
    let (status, _) = assess(&execution(), &facts);
    assert_eq!(status.phase, Some(Phase::Failed));
    let failed = condition(&status, ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, Reason::ExtensionFailed.as_str());
    let message = status.message.clone().unwrap();
    assert!(
        message.contains("failed after the agent succeeded: exited with code 3")
            && message.contains("cannot analyse"),
        "{message}"
    );
    let extension = condition(&status, ConditionType::ExtensionSucceeded).unwrap();
    assert_eq!(
        (extension.status.as_str(), extension.reason.as_str()),
        ("False", Reason::ExtensionFailed.as_str())
    );
    assert!(status.results.iter().any(|r| r.name == "run_result"));

    // A container that reported no step after the agent succeeded failed it, saying why.
    let silent = ExtensionFacts {
        exit_code: 0,
        summary: None,
        message: "the extension did not run: run_result says the run ended Failed".into(),
    };
    let facts = facts_at(job(), Some(finished_with_extension(silent)), 95);
    let (status, _) = assess(&execution(), &facts);
    assert_eq!(status.phase, Some(Phase::Failed));
    assert!(
        status.message.unwrap().contains("run_result says"),
        "the container's words are the failure"
    );
}

#[test]
fn an_extension_is_ignored_after_a_failed_agent() {
    let ran = ExtensionFacts {
        exit_code: 0,
        summary: None,
        message: "the extension did not run: the agent's run ended Failed".into(),
    };
    let pod = PodFacts {
        extension: Some(ran),
        ..finished(3, Some(summary(RunState::Failed, 3, "boom")))
    };
    let (status, _) = assess(&execution(), &facts_at(job(), Some(pod), 95));
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(
        condition(&status, ConditionType::Failed).unwrap().reason,
        Reason::AgentFailed.as_str()
    );
    assert!(condition(&status, ConditionType::ExtensionSucceeded).is_none());
}
