//! Executions with an extension: its condition and results, and how its failure ends the execution.

use super::*;

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
