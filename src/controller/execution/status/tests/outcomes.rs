//! What a decided status records and when the execution is looked at again: times, exit code, results, Kueue's reasons, the running window, start timeouts and terminal statuses.

use super::*;

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
        report: None,
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
