//! The early finish (issue 36, part 1): a run ends on its runner's report, checked against the saved manifest, before its pod is seen finished; the pod's end, once seen, wins where it disagrees.

use super::*;
use crate::runner::end_report::RunEndReport;
use crate::store::keys::ExecutionId;

/// The runner's report of a run whose agent ended at +90 as `summary` says.
fn report(summary: TerminationSummary, runner_exit_code: i32) -> RunEndReport {
    RunEndReport {
        execution: ExecutionId::test(),
        finished_at: at(90).0,
        runner_exit_code,
        summary,
    }
}

fn reported(pod: PodFacts, report: RunEndReport, offset: i64) -> Facts {
    Facts {
        report: Some(report),
        ..facts_at(job(), Some(pod), offset)
    }
}

/// [`execution`] ended on a report of success while its agent's container still ran.
fn ended_on_report() -> (AgentExecution, RunEndReport) {
    let mut e = execution();
    let success = report(summary(RunState::Succeeded, 0, ""), 0);
    let (status, _) = assess(&e, &reported(running(10), success.clone(), 91));
    e.status = Some(status);
    (e, success)
}

#[test]
fn a_reported_success_ends_the_run_before_its_pod_is_seen_finished() {
    let (e, _) = ended_on_report();
    let status = e.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(Phase::Succeeded));
    assert_eq!(
        status.completion_time,
        Some(at(90)),
        "the agent's end, as reported"
    );
    assert_eq!(status.start_time, Some(at(10)));
    assert_eq!(status.exit_code, Some(0));
    assert_eq!(status.results, results());
    let complete = condition(status, ConditionType::Complete).unwrap();
    assert_eq!(complete.status, "True");
}

#[test]
fn a_report_ends_a_run_still_shown_starting_in_one_write() {
    let e = execution();
    assert_eq!(e.status.as_ref().unwrap().phase, Some(Phase::Starting));
    let failure = report(summary(RunState::Failed, 3, "boom"), 3);
    let (status, decision) = assess(&e, &reported(running(88), failure, 91));
    assert_eq!(decision.recheck_after, None);
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(status.exit_code, Some(3));
    assert_eq!(
        condition(&status, ConditionType::Failed).unwrap().reason,
        Reason::AgentFailed.as_str()
    );
    assert!(status.message.unwrap().contains("boom"));
}

#[test]
fn a_pod_that_ends_as_reported_changes_nothing() {
    let (e, success) = ended_on_report();
    let pod = finished(0, Some(success.summary.clone()));
    let (status, decision) = assess(&e, &reported(pod, success, 95));
    assert_eq!(decision.standing, Standing::Final);
    assert_eq!(Some(status), e.status, "no status write is needed");
}

#[test]
fn a_container_killed_after_its_report_ends_as_the_pod_says() {
    let (e, success) = ended_on_report();
    let oom_killed = PodFacts {
        agent_terminated_reason: "OOMKilled".into(),
        ..finished(137, Some(success.summary.clone()))
    };
    let facts = reported(oom_killed, success, 95);
    let (status, decision) = assess(&e, &facts);
    assert!(matches!(decision.standing, Standing::Ended(_)));
    assert_eq!(status.phase, Some(Phase::Failed));
    let failed = condition(&status, ConditionType::Failed).unwrap();
    assert_eq!(
        (failed.status.as_str(), failed.reason.as_str()),
        ("True", Reason::AgentFailed.as_str())
    );
    assert!(
        failed.message.contains("exit code 137 (OOMKilled)"),
        "{}",
        failed.message
    );
    let complete = condition(&status, ConditionType::Complete).unwrap();
    assert_eq!(complete.status, "False", "no longer Complete");
    assert_eq!(status.results, results(), "the saved results stay listed");

    // Corrected once: the next look changes nothing.
    let mut corrected = e.clone();
    corrected.status = Some(status.clone());
    let (again, decision) = assess(&corrected, &facts);
    assert_eq!(decision.standing, Standing::Final);
    assert_eq!(again, status);
}

#[test]
fn a_node_lost_after_the_report_ends_the_run_node_lost() {
    let (e, success) = ended_on_report();
    let lost = PodFacts {
        node: Some("gpu-7".into()),
        deleting: true,
        disruption: Some(Cause {
            reason: "DeletionByTaintManager".into(),
            message: "Taint manager: deleting due to NoExecute taint".into(),
        }),
        ..running(10)
    };
    let (status, _) = assess(&e, &reported(lost, success, 200));
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(
        condition(&status, ConditionType::Failed).unwrap().reason,
        Reason::NodeLost.as_str()
    );
    assert!(
        status
            .message
            .unwrap()
            .contains("node gpu-7 was lost after")
    );
}

#[test]
fn a_reported_end_stays_while_the_pod_runs_on_or_is_gone() {
    let (e, success) = ended_on_report();
    for facts in [
        reported(running(10), success.clone(), 92),
        Facts {
            pod: None,
            ..reported(running(10), success.clone(), 92)
        },
        Facts {
            job: None,
            ..reported(running(10), success.clone(), 92)
        },
    ] {
        let (status, decision) = assess(&e, &facts);
        assert_eq!(decision.standing, Standing::Final);
        assert_eq!(Some(status), e.status);
    }
}

#[test]
fn a_report_waits_until_the_pod_has_shown_the_agents_start() {
    let e = execution();
    let not_started = PodFacts {
        agent_started_at: None,
        agent_image_id: None,
        ..running(10)
    };
    let success = report(summary(RunState::Succeeded, 0, ""), 0);
    let (status, decision) = assess(&e, &reported(not_started, success.clone(), 91));
    assert!(
        !matches!(decision.standing, Standing::Ended(_)),
        "{:?}",
        decision.standing
    );
    assert_eq!(status.phase, Some(Phase::Starting));
    let started = PodFacts {
        agent_image_id: Some("sha256:0123".into()),
        ..running(10)
    };
    let (status, _) = assess(&e, &reported(started, success, 91));
    assert_eq!(status.phase, Some(Phase::Succeeded));
    assert_eq!(status.start_time, Some(at(10)), "from the pod's status");
    assert_eq!(status.image_id.as_deref(), Some("sha256:0123"));
}

#[test]
fn a_run_that_ended_on_its_pod_is_not_reopened() {
    let mut e = execution();
    let pod = finished(0, Some(summary(RunState::Succeeded, 0, "")));
    e.status = Some(assess(&e, &facts_at(job(), Some(pod), 95)).0);
    let later = PodFacts {
        agent_terminated_reason: "OOMKilled".into(),
        ..finished(137, Some(summary(RunState::Succeeded, 0, "")))
    };
    let (status, decision) = assess(&e, &facts_at(job(), Some(later), 96));
    assert_eq!(
        decision.standing,
        Standing::Final,
        "no report: final as before"
    );
    assert_eq!(Some(status), e.status);
}

#[test]
fn a_success_the_container_did_not_end_with_fails_without_a_report_too() {
    let pod = PodFacts {
        agent_terminated_reason: "OOMKilled".into(),
        ..finished(137, Some(summary(RunState::Succeeded, 0, "")))
    };
    let (status, _) = assess(&execution(), &facts_at(job(), Some(pod), 95));
    assert_eq!(status.phase, Some(Phase::Failed));
    assert!(status.message.unwrap().contains("OOMKilled"));
}
