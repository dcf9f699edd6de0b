//! Control of executions on the real test cluster, through the `errand` command line: a deadline extended past the original one and a shortened one (the runner in the pod learns both through the pod's control annotation, and the Job's backstop moves), `kill` with KILL and the signals a cluster refuses, `create` held as phase `Created` until `start`, `restart` refused pointing at `rerun`, and `delete --all --dry-run`.

use std::time::{Duration, Instant};

use crate::support::cluster;
use crate::support::harness::{Harness, Mode, RUN_WAIT};
use k8s_openapi::api::batch::v1::Job;
use serde_json::Value;

use errand::api::{AgentExecution, Phase};
use errand::store::keys::ResultName;

/// The Job's `activeDeadlineSeconds` and start of execution `name`.
async fn backstop(harness: &Harness, name: &str) -> (i64, jiff::Timestamp) {
    let execution = harness.api::<AgentExecution>().get(name).await.unwrap();
    let job_name = execution.status.unwrap().job_name.unwrap();
    let job = harness.api::<Job>().get(&job_name).await.unwrap();
    (
        job.spec.unwrap().active_deadline_seconds.unwrap(),
        job.status.unwrap().start_time.unwrap().0,
    )
}

fn timestamp(value: &Value) -> jiff::Timestamp {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not a time: {value}"))
        .parse()
        .unwrap()
}

/// Starts Agent `agent` as execution `name` with `--timeout-seconds timeout` and waits until
/// its agent runs.
async fn start_running(harness: &Harness, agent: &str, name: &str, timeout: &str) {
    let (code, answer) = harness.cli(&[
        "execute",
        "--agent",
        agent,
        "--input",
        "x",
        "--name",
        name,
        "--timeout-seconds",
        timeout,
        "--no-wait",
    ]);
    assert_eq!(code, 0, "{answer}");
    harness.wait_for_phase(name, Phase::Running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_is_extended_past_the_original_and_shortened_in_the_pod() {
    let Some(harness) = Harness::start("control-deadline", Mode::WithPods).await else {
        return;
    };
    harness
        .create_agent(
            "late",
            cluster::BUSYBOX_IMAGE,
            "echo ready; sleep 40; echo finished",
        )
        .await;
    harness
        .create_agent("endless", cluster::BUSYBOX_IMAGE, "echo ready; sleep 600")
        .await;

    // Extended: 25 s of timeoutSeconds, moved to 120 s from its acceptance; the agent's 40 s
    // run finishes.
    start_running(&harness, "late", "extended", "25").await;
    let (original, _) = backstop(&harness, "extended").await;
    let (code, answer) = harness.cli(&[
        "deadline",
        "set",
        "extended",
        "--in",
        "120",
        "--acknowledge-result-loss",
    ]);
    assert_eq!(code, 0, "{answer}");
    let changed = &answer["deadline"];
    assert_eq!(
        (&changed["execution"], &changed["cleared"]),
        (&Value::from("extended"), &Value::from(false))
    );
    let accepted = timestamp(&changed["accepted_at"]);
    let deadline = timestamp(&changed["deadline_at"]);
    assert_eq!(deadline.duration_since(accepted).as_secs(), 120, "{answer}");
    let execution = harness
        .api::<AgentExecution>()
        .get("extended")
        .await
        .unwrap();
    let answered = execution.status.unwrap().deadline.unwrap();
    assert_eq!(
        answered.deadline.map(|t| t.0),
        Some(deadline),
        "status.deadline records it"
    );
    // The backstop moves with it: the time from the Job's start to the new deadline plus the
    // staging allowance (120 s in the harness). The first one also held the start timeout.
    let (moved, job_started) = backstop(&harness, "extended").await;
    let until = job_started.duration_until(deadline).as_secs();
    assert_ne!(moved, original, "activeDeadlineSeconds moved");
    assert_eq!(
        moved,
        until + 120,
        "activeDeadlineSeconds {original} -> {moved}, deadline {until}s after the Job's start"
    );
    let done = harness.wait_for_phase("extended", Phase::Succeeded).await;
    // The answer the agent gave once its original deadline had passed (a cluster `status`
    // answer carries no response: it is read from the run record).
    assert_eq!(
        harness.result_json(&done, ResultName::RunResult).await["response"]
            .as_str()
            .map(str::trim),
        Some("ready\nfinished")
    );
    let status = done.status.unwrap();
    let ran = status
        .completion_time
        .unwrap()
        .0
        .duration_since(status.start_time.unwrap().0);
    assert!(
        ran.as_secs() >= 30,
        "it ran past its original 25 s: {ran:?}"
    );

    // Shortened: an hour of timeoutSeconds, cut to 5 s; the runner stops it as a timeout.
    start_running(&harness, "endless", "shortened", "3600").await;
    let (original, _) = backstop(&harness, "shortened").await;
    let asked = Instant::now();
    let (code, answer) = harness.cli(&[
        "deadline",
        "set",
        "shortened",
        "--in",
        "5",
        "--acknowledge-result-loss",
    ]);
    assert_eq!(code, 0, "{answer}");
    let (moved, _) = backstop(&harness, "shortened").await;
    assert!(
        moved < original,
        "activeDeadlineSeconds {original} -> {moved}"
    );
    let done = harness
        .wait_for_failure(
            "shortened",
            Phase::Failed,
            errand::api::contract::Reason::DeadlineExceeded,
        )
        .await;
    assert!(
        asked.elapsed() < Duration::from_secs(60),
        "stopped {:?} after the change",
        asked.elapsed()
    );
    assert!(
        done.status
            .unwrap()
            .results
            .iter()
            .any(|r| r.name == "output_artifacts"),
        "results saved"
    );

    // After the end a change is refused.
    let (code, answer) = harness.cli(&["deadline", "clear", "shortened"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &Value::from("invalid_state")),
        "{answer}"
    );
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_skips_the_grace_and_other_signals_are_refused_naming_the_flag() {
    let Some(harness) = Harness::start("control-kill", Mode::WithPods).await else {
        return;
    };
    harness
        .create_agent(
            "stubborn",
            cluster::BUSYBOX_IMAGE,
            "trap '' TERM; echo ready; sleep 600",
        )
        .await;
    start_running(&harness, "stubborn", "killed", "3600").await;

    let (code, answer) = harness.cli(&["kill", "killed", "--signal", "USR1"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (2, &Value::from("invalid_argument")),
        "{answer}"
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("--signal USR1: on a cluster only TERM"),
        "{answer}"
    );

    // The agent ignores SIGTERM: a cancel would take its 10 s grace; KILL does not.
    let asked = Instant::now();
    let (code, answer) = harness.cli(&["kill", "killed", "--signal", "KILL"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["killed"]["effect"], "cancel_without_grace");
    assert_eq!(answer["killed"]["phase"], "Cancelled");
    let (_, status) = harness.cli(&["status", "killed"]);
    assert_eq!(status["execution"]["exit_code"], 137, "SIGKILL: {status}");
    assert!(asked.elapsed() < RUN_WAIT, "{:?}", asked.elapsed());
    let execution = harness.api::<AgentExecution>().get("killed").await.unwrap();
    assert!(execution.spec.cancel && execution.spec.kill);
    let results = &execution.status.as_ref().unwrap().results;
    assert!(
        results.iter().any(|r| r.name == "output_artifacts"),
        "partial results saved: {results:?}"
    );
    // The runner read the kill from the pod's annotation (the pod was not deleted).
    let error = harness.result_json(&execution, ResultName::RunError).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("killed (SIGKILL, no grace)"),
        "{error}"
    );
    harness.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_holds_an_execution_until_start_and_restart_points_at_rerun() {
    let Some(harness) = Harness::start("control-create", Mode::WithPods).await else {
        return;
    };
    harness
        .create_agent("calc", cluster::BUSYBOX_IMAGE, "echo 96")
        .await;
    let (code, answer) = harness.cli(&[
        "create", "--agent", "calc", "--input", "x", "--name", "later",
    ]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["execution"]["name"], "later");
    harness.wait_for_phase("later", Phase::Created).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        harness
            .api::<Job>()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "a held execution has no Job"
    );
    let (_, answer) = harness.cli(&["status", "later"]);
    assert_eq!(answer["execution"]["phase"], "Created", "{answer}");

    let (code, answer) = harness.cli(&["start", "later"]);
    assert_eq!(code, 0, "{answer}");
    harness.wait_for_phase("later", Phase::Succeeded).await;
    let (code, answer) = harness.cli(&["start", "later"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &Value::from("invalid_state")),
        "{answer}"
    );

    let (code, answer) = harness.cli(&["restart", "later"]);
    assert_eq!(
        (code, &answer["error"]["code"]),
        (4, &Value::from("not_supported")),
        "{answer}"
    );
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("errand rerun later"),
        "{answer}"
    );

    // delete --all: the finished one goes (a dry run first), a held one stays.
    let (code, _) = harness.cli(&[
        "create", "--agent", "calc", "--input", "x", "--name", "held",
    ]);
    assert_eq!(code, 0);
    let (code, answer) = harness.cli(&["delete", "--all", "--dry-run"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        answer["deleted_all"]["executions"][0]["execution"], "later",
        "{answer}"
    );
    assert_eq!(
        answer["deleted_all"]["kept_running"],
        serde_json::json!(["held"])
    );
    let (code, answer) = harness.cli(&["rm", "--all"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["deleted_all"]["dry_run"], false);
    let (_, answer) = harness.cli(&["list"]);
    let names: Vec<&str> = answer["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["held"]);
    harness.finish().await;
}
