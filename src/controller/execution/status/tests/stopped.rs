//! Pods that Kubernetes or someone else stopped under the agent, and start timeouts with and without a pod.

use super::*;

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
