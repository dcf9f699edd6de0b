//! End-to-end runs on the real test cluster: the `errand controller` binary runs as a process
//! against the API server, its `file://` store and signed-URL blob endpoint served on the pod
//! bridge's host address, and every execution runs as a real pod on the node with the errand
//! image (`hack/images/errand-image.sh`) staging the workdir and running the agent.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::cluster::{self, kubectl};
use crate::support::errand::{example, wait_for};
use crate::support::harness::{
    Harness, Mode, RUN_WAIT, message_of, phase_of, reason_of, record_uids, result_names, tail,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::ResourceExt;
use kube::api::{DeleteParams, EvictParams};
use serde_json::json;

use errand::api::contract::{
    self, COMPLETED_RUN_RESULTS, ConditionType, INTERRUPTED_RUN_RESULTS, Reason,
};
use errand::api::{AgentEnvironment, AgentExecution, Phase};
use errand::store::keys::ResultName;

const SECRET_VALUE: &str = "sk-e2e-secret-value-7a7a7a";
/// An agent that leaves a file and a line of output, then runs until it is stopped.
const PATIENT_AGENT: &str = "echo partial > partial.txt; echo working; sleep 600";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_calculator_succeeds_with_its_answer_saved_and_delete_removes_everything() {
    let Some(e2e) = Harness::start("e2e-calc", Mode::WithPods).await else {
        return;
    };
    let (name, done) = run_the_calculator(&e2e).await;
    assert_eq!(reason_of(&done, ConditionType::Complete), Some("Succeeded"));
    assert_eq!(
        reason_of(&done, ConditionType::ResultsSaved),
        Some("ResultsSaved")
    );
    let status = done.status.clone().unwrap();
    assert_eq!(status.exit_code, Some(0));
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    assert_eq!(result_names(&done), COMPLETED_RUN_RESULTS);
    let record = e2e.result_json(&done, ResultName::RunResult).await;
    assert_eq!(record["response"], "96", "{record}");
    assert_eq!(record["state"], "Succeeded");
    let artifacts = e2e.result_files(&done, ResultName::OutputArtifacts).await;
    assert_eq!(artifacts["calculation.txt"].trim(), "12 * 8 = 96");
    assert!(
        artifacts["stdout.log"].contains("12 * 8 = 96"),
        "{artifacts:?}"
    );
    // As kubectl shows it: waiting for the Complete condition returns at once, and the wide
    // listing has every printer column.
    let namespace = e2e.namespace.name();
    let waited = kubectl(&[
        "wait",
        "--for=condition=Complete",
        &format!("agentexecution/{name}"),
        "--namespace",
        namespace,
        "--timeout=30s",
    ]);
    assert!(waited.contains("condition met"), "{waited}");
    let wide = kubectl(&[
        "get",
        "agentexecutions",
        "--namespace",
        namespace,
        "-o",
        "wide",
    ]);
    let mut lines = wide.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    for column in [
        "NAME", "AGENT", "PHASE", "AGE", "DURATION", "MESSAGE", "RERUN-OF",
    ] {
        assert!(header.contains(&column), "{column}: {wide}");
    }
    let row = lines
        .find(|l| l.starts_with(name.as_str()))
        .unwrap_or_default();
    let agent = status.agent.as_deref().unwrap();
    for value in [agent, "Succeeded"] {
        assert!(
            row.split_whitespace().any(|v| v == value),
            "{value}: {wide}"
        );
    }
    // The sizes in the status are those of the stored objects.
    for entry in &status.results {
        let bytes = e2e
            .result(&done, ResultName::parse(&entry.name).unwrap())
            .await;
        assert_eq!(entry.size, bytes.len() as u64, "{}", entry.name);
    }

    let prefix = errand::store::keys::results_prefix(&e2e.execution_id(&done)).unwrap();
    e2e.api::<AgentExecution>()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    e2e.wait_until_gone(&name).await;
    // A background delete (kubectl's default) returns at once; the snapshot ConfigMap's
    // finalizer deletes the results right after.
    wait_for("the finalizer to delete the results", RUN_WAIT, || async {
        e2e.store()
            .list(&prefix)
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
    e2e.wait_for_no_children().await;
    e2e.finish().await;
}

/// Runs the calculator example to `Succeeded`: its execution's name and the execution then.
async fn run_the_calculator(e2e: &Harness) -> (String, AgentExecution) {
    e2e.create(example("examples/calculator/agent.yaml")).await;
    let execution = example("examples/calculator/execution.yaml");
    let name = execution["metadata"]["name"].as_str().unwrap().to_owned();
    e2e.create(execution).await;
    let done = e2e.wait_for_phase(&name, Phase::Succeeded).await;
    (name, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_namespace_deletes_the_results_of_its_executions() {
    let Some(e2e) = Harness::start("e2e-nsdel", Mode::WithPods).await else {
        return;
    };
    let (_, done) = run_the_calculator(&e2e).await;
    let prefix = errand::store::keys::results_prefix(&e2e.execution_id(&done)).unwrap();
    let saved = e2e.store().list(&prefix).await.unwrap();
    assert!(!saved.is_empty(), "the run saved its results");

    // The namespace controller deletes the snapshot ConfigMaps before the executions: their
    // results must go all the same, not stay in the store with nothing left to delete them.
    e2e.delete_namespace().await;
    let left = e2e.store().list(&prefix).await.unwrap();
    assert!(
        left.is_empty(),
        "results left after the namespace went: {left:?}"
    );
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workdir_is_staged_from_filesets_in_the_pod() {
    let Some(e2e) = Harness::start("e2e-workdir", Mode::WithPods).await else {
        return;
    };
    e2e.push_fileset("repo", "examples/workdir/repo").await;
    e2e.push_fileset("datasets", "examples/workdir/datasets")
        .await;
    let mut execution = example("examples/workdir/execution.yaml");
    // The example names a public image; the node has only the local busybox.
    execution["spec"]["agent"]["runtime"]["image"] = json!(cluster::BUSYBOX_IMAGE);
    execution["spec"]["agent"]["runtime"]["imagePullPolicy"] = json!("Never");
    let name = execution["metadata"]["name"].as_str().unwrap().to_owned();
    e2e.create(execution).await;

    let done = e2e.wait_for_phase(&name, Phase::Succeeded).await;
    let staged = e2e.result_files(&done, ResultName::InputWorkdir).await;
    let paths: Vec<&str> = staged.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "README.md",
            "data/eval/questions.csv",
            "src/calc.py",
            "vendor/datasets/eval/questions.csv",
            "vendor/datasets/train.txt",
        ]
    );
    assert_eq!(
        staged["src/calc.py"],
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples/workdir/repo/src/calc.py")
        )
        .unwrap()
    );
    let artifacts = e2e.result_files(&done, ResultName::OutputArtifacts).await;
    assert!(
        artifacts["files.txt"].contains("./data/eval/questions.csv"),
        "the agent saw the staged tree: {artifacts:?}"
    );
    assert_eq!(
        e2e.result_json(&done, ResultName::RunResult).await["response"],
        "5"
    );

    // A subpath the Fileset does not hold is refused from the path index pushed beside its
    // blob, naming the field, before any pod runs.
    let mut missing = example("examples/workdir/execution.yaml");
    missing["metadata"]["name"] = json!("missing-subpath");
    missing["spec"]["workdir"]["artifactMounts"][0]["ref"] = json!("datasets#no-such-dir/");
    e2e.create(missing).await;
    let refused = e2e.wait_for_phase("missing-subpath", Phase::Failed).await;
    let message = message_of(&refused);
    assert!(
        message.contains(
            "spec.workdir.artifactMounts[0].ref: Fileset \"datasets\" has no path \"no-such-dir/\""
        ),
        "{message}"
    );
    assert!(
        refused.status.as_ref().unwrap().job_name.is_none(),
        "no Job"
    );
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_runs_the_snapshot_on_the_image_digest_its_original_ran() {
    let Some(e2e) = Harness::start("e2e-rerun", Mode::WithPods).await else {
        return;
    };
    let script = "ls | tr '\\n' ' '";
    e2e.create_agent("lister", cluster::BUSYBOX_IMAGE, script)
        .await;
    e2e.push_fileset("ws", "examples/workdir/repo").await;
    e2e.create_execution("first", "lister", json!({"workdir": {"base": "ws"}}))
        .await;
    let first = e2e.wait_for_phase("first", Phase::Succeeded).await;
    let status = first.status.clone().unwrap();
    let image_id = status.image_id.clone().expect("status.imageID");
    eprintln!("the kubelet reported imageID {image_id}");
    let pinned = errand::resolve::pin_image(cluster::BUSYBOX_IMAGE, &image_id).unwrap();
    let record = e2e.result_json(&first, ResultName::RunResult).await;
    assert_eq!(record["image"], cluster::BUSYBOX_IMAGE, "{record}");
    assert_eq!(record["snapshot_digest"], status.snapshot.unwrap().digest);
    assert_eq!(record["command"], json!(["sh", "-c", script]));
    let listing = record["response"].clone();

    // The Fileset moves on; the rerun stages what the original staged, on its image digest.
    e2e.push_fileset("ws", "examples/workdir/datasets").await;
    let (code, answer) = e2e.cli(&["rerun", "first", "--name", "again"]);
    assert_eq!(code, 0, "{answer}");
    let again = &answer["execution"];
    assert_eq!(
        (again["rerun_of"].as_str(), again["image_id"].as_str()),
        (Some("first"), Some(image_id.as_str())),
        "{answer}"
    );
    let done = e2e.api::<AgentExecution>().get("again").await.unwrap();
    assert_eq!(done.spec.rerun_of.as_ref().unwrap().name, "first");
    let record = e2e.result_json(&done, ResultName::RunResult).await;
    assert_eq!(
        (&record["response"], &record["image"]),
        (&listing, &json!(pinned))
    );
    let pod = e2e.pod_of("again").await;
    let containers = pod.spec.unwrap().containers;
    let agent = containers
        .iter()
        .find(|c| c.name == contract::AGENT_CONTAINER)
        .unwrap();
    assert_eq!(agent.image.as_deref(), Some(pinned.as_str()));
    eprintln!("rerun \"again\" ran {pinned} and answered {listing}");

    // Once the original is gone, its snapshot went with it: refused, naming the field.
    e2e.api::<AgentExecution>()
        .delete("first", &DeleteParams::foreground())
        .await
        .unwrap();
    e2e.wait_until_gone("first").await;
    let (code, answer) = e2e.cli(&["rerun", "first", "--name", "orphan"]);
    assert_ne!(code, 0, "{answer}");
    let text = answer.to_string();
    assert!(
        text.contains("spec.rerunOf.name: execution \\\"first\\\" not found"),
        "{answer}"
    );
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_agent_fails_with_its_stderr_and_keeps_its_results() {
    let Some(e2e) = Harness::start("e2e-fail", Mode::WithPods).await else {
        return;
    };
    e2e.create_agent(
        "divider",
        cluster::BUSYBOX_IMAGE,
        "echo half-done > notes.txt; echo 'divider: cannot divide 12 by zero' >&2; exit 3",
    )
    .await;
    e2e.create_execution("divide", "divider", json!({})).await;
    let done = e2e
        .wait_for_failure("divide", Phase::Failed, Reason::AgentFailed)
        .await;
    assert_eq!(done.status.as_ref().unwrap().exit_code, Some(3));
    let message = message_of(&done);
    assert!(
        message.contains("exit code 3") && message.contains("cannot divide 12 by zero"),
        "{message}"
    );
    let names = result_names(&done);
    for name in ["output_workdir", "output_artifacts", "run_result"] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
    let artifacts = e2e.result_files(&done, ResultName::OutputArtifacts).await;
    assert!(artifacts["stderr.log"].contains("cannot divide 12 by zero"));
    let workdir = e2e.result_files(&done, ResultName::OutputWorkdir).await;
    assert_eq!(workdir["notes.txt"], "half-done\n");
    assert_eq!(
        e2e.result_json(&done, ResultName::RunResult).await["exit_code"],
        3
    );
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_pod_deadline_stops_the_agent_and_saves_its_results() {
    let Some(e2e) = Harness::start("e2e-timeout", Mode::WithPods).await else {
        return;
    };
    e2e.create_agent(
        "slow",
        cluster::BUSYBOX_IMAGE,
        "echo thinking; echo draft > draft.txt; sleep 600",
    )
    .await;
    e2e.create_execution("slow", "slow", json!({"timeoutSeconds": 3}))
        .await;
    let done = e2e
        .wait_for_failure("slow", Phase::Failed, Reason::DeadlineExceeded)
        .await;
    assert!(
        message_of(&done).contains("timeoutSeconds (3s)"),
        "the runner's deadline, not the Job's backstop: {}",
        message_of(&done)
    );
    let error = e2e.result_json(&done, ResultName::RunError).await;
    assert_eq!(error["type"], "DeadlineExceeded");
    assert_eq!(error["timed_out"], true);
    let workdir = e2e.result_files(&done, ResultName::OutputWorkdir).await;
    assert_eq!(workdir["draft.txt"], "draft\n");
    let artifacts = e2e.result_files(&done, ResultName::OutputArtifacts).await;
    assert!(artifacts["stdout.log"].contains("thinking"));
    assert!(result_names(&done).iter().any(|n| n == "run_error"));
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_execution_saves_its_partial_results() {
    let Some(e2e) = Harness::start("e2e-cancel", Mode::WithPods).await else {
        return;
    };
    e2e.create_agent("patient", cluster::BUSYBOX_IMAGE, PATIENT_AGENT)
        .await;
    e2e.create_execution("patient", "patient", json!({})).await;
    e2e.wait_for_phase("patient", Phase::Running).await;
    // Running means the container started; give the agent a moment to write its file.
    tokio::time::sleep(Duration::from_secs(2)).await;
    e2e.cancel("patient").await;
    let done = e2e
        .wait_for_failure("patient", Phase::Cancelled, Reason::Cancelled)
        .await;
    assert!(message_of(&done).contains("partial results saved"));
    // A cancel reaches the pod as its deletion; the runner cannot tell the two apart and
    // records that its pod was stopped, the status says why.
    let error = e2e.result_json(&done, ResultName::RunError).await;
    assert_eq!(error["type"], "Terminated", "{error}");
    let workdir = e2e.result_files(&done, ResultName::OutputWorkdir).await;
    assert_eq!(workdir["partial.txt"], "partial\n");
    let artifacts = e2e.result_files(&done, ResultName::OutputArtifacts).await;
    assert!(artifacts["stdout.log"].contains("working"));
    e2e.finish().await;
}

/// Checks that a run whose pod was taken away under the agent lists the results the runner
/// saved on its way out, and that its `run_error` agrees with the status.
async fn assert_stopped_with_its_results(e2e: &Harness, done: &AgentExecution) {
    let message = message_of(done);
    assert!(
        message.contains("while the agent was running") && message.contains("input_workdir"),
        "{message}"
    );
    let names = result_names(done);
    for name in &INTERRUPTED_RUN_RESULTS[..4] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
    let error = e2e.result_json(done, ResultName::RunError).await;
    assert_eq!(error["type"], "Terminated", "{error}");
    let workdir = e2e.result_files(done, ResultName::OutputWorkdir).await;
    assert_eq!(workdir["partial.txt"], "partial\n");
}

/// `kubectl delete pod` and an eviction during a run are reported as what they are, not as the
/// agent failing (exit code 143), with the results saved on the way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_evicted_pod_is_reported_as_such_with_the_results_it_saved() {
    let Some(e2e) = Harness::start("e2e-disrupt", Mode::WithPods).await else {
        return;
    };
    e2e.create_agent("patient", cluster::BUSYBOX_IMAGE, PATIENT_AGENT)
        .await;
    e2e.create_execution("deleted", "patient", json!({})).await;
    e2e.create_execution("evicted", "patient", json!({})).await;
    e2e.wait_for_phase("deleted", Phase::Running).await;
    e2e.wait_for_phase("evicted", Phase::Running).await;
    // Running means the container started; give the agent a moment to write its file.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pods = e2e.api::<Pod>();
    pods.delete(
        &e2e.pod_of("deleted").await.name_any(),
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    pods.evict(
        &e2e.pod_of("evicted").await.name_any(),
        &EvictParams::default(),
    )
    .await
    .unwrap();

    let deleted = e2e
        .wait_for_failure("deleted", Phase::Failed, Reason::PodDeleted)
        .await;
    assert!(
        message_of(&deleted).contains("the pod was deleted (not by errand)"),
        "{}",
        message_of(&deleted)
    );
    assert_stopped_with_its_results(&e2e, &deleted).await;
    let evicted = e2e
        .wait_for_failure("evicted", Phase::Failed, Reason::PodEvicted)
        .await;
    assert!(
        message_of(&evicted).contains("EvictionByEvictionAPI"),
        "the pod's DisruptionTarget condition: {}",
        message_of(&evicted)
    );
    assert_stopped_with_its_results(&e2e, &evicted).await;
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_image_that_cannot_be_pulled_fails_after_the_start_timeout() {
    let Some(e2e) = Harness::start("e2e-pull", Mode::WithPods).await else {
        return;
    };
    e2e.create_agent("absent", "errand.local/no-such-agent:1", "true")
        .await;
    e2e.create_execution("absent", "absent", json!({"startTimeoutSeconds": 30}))
        .await;
    let started = tokio::time::Instant::now();
    let done = e2e
        .wait_for_failure("absent", Phase::Failed, Reason::ImagePullFailed)
        .await;
    let message = message_of(&done);
    assert!(
        message.contains("within 30s")
            && message.contains("container agent")
            && message.contains("ErrImageNeverPull"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "fails soon after the start timeout, no hang"
    );
    e2e.wait_for_no_jobs().await;
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_finishes_the_run_with_one_job_its_snapshot_and_no_leaked_secret() {
    let Some(mut e2e) = Harness::start("e2e-restart", Mode::WithPods).await else {
        return;
    };
    let (jobs_seen, job_watch) = record_uids(e2e.api::<Job>());
    e2e.create(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "model-keys"},
        "stringData": {"openai": SECRET_VALUE},
    }))
    .await;
    e2e.create_agent(
        "steady",
        cluster::BUSYBOX_IMAGE,
        // Proves the secret arrived without ever printing it.
        r#"echo "precision $PRECISION key-length ${#OPENAI_API_KEY}"; sleep 8; echo done"#,
    )
    .await;
    e2e.create(json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment",
        "metadata": {"name": "prod"},
        "spec": {"overlay": {
            "env": {"PRECISION": "2"},
            "secrets": {"OPENAI_API_KEY": "model-keys#openai"},
        }},
    }))
    .await;
    e2e.create_execution(
        "steady",
        "steady",
        json!({"environmentRef": {"name": "prod"}}),
    )
    .await;
    e2e.wait_for_phase("steady", Phase::Running).await;

    e2e.kill_controller().await;
    e2e.merge_patch::<AgentEnvironment>(
        "prod",
        json!({"spec": {"overlay": {"env": {"PRECISION": "9"}}}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    e2e.start_controller().await;

    let done = e2e.wait_for_phase("steady", Phase::Succeeded).await;
    let artifacts = e2e.result_files(&done, ResultName::OutputArtifacts).await;
    assert!(
        artifacts["stdout.log"].contains(&format!("precision 2 key-length {}", SECRET_VALUE.len())),
        "the run kept its snapshot and got the secret: {artifacts:?}"
    );
    job_watch.abort();
    let jobs_seen = jobs_seen.lock().unwrap().clone();
    assert_eq!(
        jobs_seen.values().map(BTreeSet::len).sum::<usize>(),
        1,
        "exactly one Job ever existed: {jobs_seen:?}"
    );

    let snapshot = done.status.as_ref().unwrap().snapshot.clone().unwrap();
    let config_map = e2e
        .api::<ConfigMap>()
        .get(&snapshot.config_map)
        .await
        .unwrap();
    let snapshot_json = &config_map.data.as_ref().unwrap()["snapshot.json"];
    assert!(
        snapshot_json.contains("\"PRECISION\":\"2\""),
        "{snapshot_json}"
    );
    let events = e2e.events().await;
    let log = e2e.controller_log();
    assert!(
        log.contains("reconciling AgentExecutions"),
        "the controller log was captured: {log}"
    );
    let places = [
        ("status", serde_json::to_string(&done).unwrap()),
        ("events", serde_json::to_string(&events).unwrap()),
        (
            "snapshot ConfigMap",
            serde_json::to_string(&config_map).unwrap(),
        ),
        (
            "Secrets of errand's",
            serde_json::to_string(&e2e.namespace.managed::<Secret>().await).unwrap(),
        ),
        ("controller log", log),
        (
            "run_result",
            String::from_utf8_lossy(&e2e.result(&done, ResultName::RunResult).await).into_owned(),
        ),
    ];
    for (place, text) in &places {
        assert!(
            !text.contains(SECRET_VALUE),
            "the secret value is in the {place}"
        );
    }
    e2e.finish().await;
}

/// Bytes of random data the bulky agent leaves in its workdir: gzip cannot shrink them, so its
/// `output_workdir` is larger than this and every smaller file in the store is another result
/// or an upload still on its way.
const BULK: u64 = 48_000_000;

/// The size of the largest file under `dir` of at least `at_least` bytes and under [`BULK`]:
/// the bulky upload while it is on its way (wherever the store keeps it until it is complete).
fn upload_in_flight(dir: &std::path::Path, at_least: u64) -> Option<u64> {
    let mut dirs = vec![dir.to_path_buf()];
    let mut found = None;
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            if metadata.is_dir() {
                dirs.push(entry.path());
            } else if (at_least..BULK).contains(&metadata.len()) {
                found = found.max(Some(metadata.len()));
            }
        }
    }
    found
}

/// Every regular file under `dir`, by path relative to it.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut dirs = vec![dir.to_path_buf()];
    let mut files = Vec::new();
    while let Some(current) = dirs.pop() {
        for entry in std::fs::read_dir(&current).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            } else {
                let path = entry.path();
                files.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    files
}

/// Issue 12, part 1: the controller (whose blob endpoint takes the pod's uploads of a `file://`
/// store) is SIGKILLed three times while the pod uploads a 48 MB result, at 1, 16 and 40 MiB.
/// Each cut-off upload is sent again once the controller is back, the run succeeds with every
/// result whole, and deleting it leaves nothing in the store, not even a partial write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_killed_during_a_result_upload_loses_no_result() {
    let Some(mut e2e) = Harness::start("e2e-upload-kill", Mode::WithPods).await else {
        return;
    };
    e2e.create_agent(
        "bulky",
        cluster::BUSYBOX_IMAGE,
        &format!("head -c {BULK} /dev/urandom > bulk.bin; echo 96"),
    )
    .await;
    e2e.create_execution("bulky", "bulky", json!({})).await;
    let store_dir = e2e.store_dir();
    for at_least in [1 << 20, 16 << 20, 40 << 20] {
        let deadline = tokio::time::Instant::now() + RUN_WAIT;
        let size = loop {
            if let Some(size) = upload_in_flight(&store_dir, at_least) {
                break size;
            }
            let execution = e2e.api::<AgentExecution>().get("bulky").await.unwrap();
            assert!(
                !phase_of(&execution).is_some_and(|p| p.is_terminal())
                    && tokio::time::Instant::now() < deadline,
                "waiting for an upload past {at_least} bytes; status {}\ncontroller log tail:\n{}",
                serde_json::to_string_pretty(&execution.status).unwrap(),
                tail(&e2e.controller_log(), 30)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        e2e.kill_controller().await;
        println!("killed the controller with {size} bytes of output_workdir received");
        e2e.start_controller().await;
    }

    let done = e2e.wait_for_phase("bulky", Phase::Succeeded).await;
    let manifest = e2e.result_json(&done, ResultName::Manifest).await;
    let listed = manifest["results"].as_array().unwrap();
    let names: Vec<&str> = listed.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, COMPLETED_RUN_RESULTS[..4]);
    for entry in listed {
        let name = entry["name"].as_str().unwrap();
        let bytes = e2e.result(&done, ResultName::parse(name).unwrap()).await;
        assert_eq!(entry["size"], bytes.len() as u64, "{name}");
        assert_eq!(
            entry["sha256"].as_str().unwrap(),
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
            "{name}"
        );
    }
    let workdir = e2e.result(&done, ResultName::OutputWorkdir).await;
    assert!(workdir.len() as u64 > BULK, "the whole workdir arrived");

    e2e.api::<AgentExecution>()
        .delete("bulky", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the store to be empty", RUN_WAIT, || async {
        files_under(&store_dir).is_empty().then_some(())
    })
    .await;
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_wait_returns_a_running_execution_with_its_log_and_the_run_goes_on() {
    let Some(e2e) = Harness::start("e2e-wait", Mode::WithPods).await else {
        return;
    };
    e2e.create_agent(
        "stepper",
        cluster::BUSYBOX_IMAGE,
        "echo begin; sleep 15; echo finished",
    )
    .await;
    let args = [
        "execute", "--agent", "stepper", "--input", "x", "--name", "stepping",
    ];
    let (code, answer) = e2e.cli(&[&args[..], &["--until", "1"]].concat());
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        answer["execution"]["observation"]["ended"], false,
        "{answer}"
    );

    // Bounded waits while it runs return it running, with the pod's one log as its excerpt.
    let deadline = std::time::Instant::now() + RUN_WAIT;
    let running = loop {
        let (code, answer) = e2e.cli(&["wait", "stepping", "--until", "2", "--poll", "0.5"]);
        assert_eq!(code, 0, "{answer}");
        let execution = answer["execution"].clone();
        let excerpt = &execution["output"][0]["excerpt"];
        if execution["phase"] == "Running" && excerpt["data"].as_str() == Some("begin\n") {
            break execution;
        }
        assert!(
            execution["phase"] != "Succeeded",
            "the wait missed the run: {answer}"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "never Running: {answer}"
        );
    };
    assert_eq!(running["observation"]["ended"], false);
    assert_eq!(running["output"][0]["stream"], "stdout+stderr");
    assert_eq!(running["output"][0]["total_bytes"], 6);
    assert_eq!(running["output"][0]["excerpt"]["encoding"], "utf8");

    // status never reads the log, and a pod's log has no size the API reports.
    let (_, answer) = e2e.cli(&["status", "stepping"]);
    assert_eq!(
        answer["execution"]["output"],
        json!([{"stream": "stdout+stderr", "total_bytes": null}])
    );

    // A long enough wait sees the end; --from-byte continues after the first excerpt, within
    // --max-bytes (errand's own last log line follows the agent's in the pod's log).
    let (code, answer) = e2e.cli(&[
        "wait",
        "stepping",
        "--until",
        "120",
        "--from-byte",
        "6",
        "--max-bytes",
        "9",
    ]);
    assert_eq!(code, 0, "{answer}");
    let execution = &answer["execution"];
    assert_eq!(
        (&execution["phase"], &execution["observation"]["ended"]),
        (&json!("Succeeded"), &json!(true)),
        "{answer}"
    );
    assert_eq!(
        execution["output"][0]["excerpt"],
        json!({"start": 6, "end": 15, "truncated": true, "encoding": "utf8", "data": "finished\n"})
    );
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_runs_an_agent_on_the_cluster_and_the_run_outlives_the_server() {
    let Some(e2e) = Harness::start("e2e-mcp", Mode::WithPods).await else {
        return;
    };
    e2e.create_agent(
        "mcp-agent",
        cluster::BUSYBOX_IMAGE,
        "sleep 5; echo from-the-pod",
    )
    .await;
    let mcp = support::mcp::McpSession::start(e2e.command(&["mcp", "--max-wait", "20"])).await;
    let (error, answer) = mcp
        .call(
            "execute",
            json!({"agent": "mcp-agent", "input": "x", "name": "via-mcp", "until": 1}),
        )
        .await;
    assert!(!error, "{answer}");
    assert_eq!(
        answer["execution"]["observation"]["ended"], false,
        "{answer}"
    );
    // The server goes away; the controller runs the execution on.
    assert!(mcp.close().await.success());

    let mcp = support::mcp::McpSession::start(e2e.command(&["mcp", "--max-wait", "20"])).await;
    let deadline = std::time::Instant::now() + RUN_WAIT;
    let execution = loop {
        let (error, answer) = mcp
            .call("wait", json!({"name": "via-mcp", "until": 15}))
            .await;
        assert!(!error, "{answer}");
        if answer["execution"]["observation"]["ended"] == true {
            break answer["execution"].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never ended: {answer}"
        );
    };
    assert_eq!(execution["phase"], "Succeeded", "{execution}");
    // The pod's log: the agent's output, then errand's own last line (a wait's answer carries
    // the log's excerpt, not the response).
    let log = execution["output"][0]["excerpt"]["data"]
        .as_str()
        .unwrap_or_default();
    assert!(log.starts_with("from-the-pod\n"), "{execution}");
    let (_, answer) = mcp.call("results_list", json!({"name": "via-mcp"})).await;
    assert!(
        answer["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "run_result"),
        "{answer}"
    );
    let (error, answer) = mcp.call("status", json!({"name": "nothing-like-it"})).await;
    assert!(error);
    assert_eq!(answer["error"]["code"], "not_found");
    assert!(mcp.close().await.success());
    e2e.finish().await;
}
