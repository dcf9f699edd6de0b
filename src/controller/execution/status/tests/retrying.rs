//! Reconciles that failed: the retrying status, children the API server refused for good, and what a failed stage saved.

use super::*;

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
