//! The table of the status decisions: one row per way a run can go, with its phase, reason, message and what to stop.

use super::*;

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
            name: "a deadline set with `errand deadline set` names itself, not timeoutSeconds",
            execution: with_changed_deadline(),
            job: failed_job("BackoffLimitExceeded"),
            pod: Some(finished(124, Some(summary(RunState::TimedOut, 143, "")))),
            at: 310,
            phase: Phase::Failed,
            reason: Some((ConditionType::Failed, Reason::DeadlineExceeded)),
            message_contains: "the deadline set with `errand deadline set` (",
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
