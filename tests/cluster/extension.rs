//! Extensions on the real test cluster: the `errand controller` process runs each execution in a
//! real pod, where the `errand-extension` container runs the AgentExtension's step on its own
//! image (the busybox test image, imported, never pulled) once the agent's run succeeded, with
//! grants of its own; the agent's container gets none of them.

use crate::support::cluster;
use crate::support::harness::{Harness, Mode, message_of, reason_of, result_names};
use crate::support::store::manifest_names;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use errand::api::contract::{self, ConditionType, Reason};
use errand::api::{AgentExtension, Phase};
use errand::store::keys::ResultName;

/// An agent that leaves a file in its workdir and records what of errand's store access it can
/// see: the grants directory's entries, the extension's grants directory, its environment.
const AGENT: &str = "echo 96 > answer.txt; ls -A /errand/grants > grants-seen.txt; \
                     ls -A /errand/extension-grants > extension-grants-seen.txt 2>&1 || true; \
                     env | grep -c -i -e signature -e grants > env-grants.txt || true";

/// Installs an AgentExtension of kind `kind` running `sh -c script` on the busybox test image,
/// declaring `analysis-report`; removed again by [`uninstall`].
async fn install(e2e: &Harness, kind: &str, script: &str) -> Api<AgentExtension> {
    let api = Api::<AgentExtension>::all(e2e.client.clone());
    let extension: AgentExtension = serde_json::from_value(json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExtension",
        "metadata": {"name": kind},
        "spec": {
            "extensionKind": kind,
            "image": cluster::BUSYBOX_IMAGE,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", script],
            "results": ["analysis-report"],
            "timeoutSeconds": 120,
        },
    }))
    .unwrap();
    let _ = api.delete(kind, &DeleteParams::default()).await;
    api.create(&PostParams::default(), &extension)
        .await
        .unwrap();
    api
}

async fn uninstall(api: &Api<AgentExtension>, kind: &str) {
    let _ = api.delete(kind, &DeleteParams::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_turns_output_workdir_into_an_analysis_report_and_the_agent_gets_no_grants() {
    let Some(e2e) = Harness::start("ext-report", Mode::WithPods).await else {
        return;
    };
    let kind = format!("report-{}", e2e.namespace.name());
    let api = install(
        &e2e,
        &kind,
        "set -eu; { echo \"report of $ERRAND_EXECUTION_NAME\"; \
         tar -tzf \"$ERRAND_EXTENSION_RESULTS_DIR/output_workdir.tar.gz\" | sort; } \
         > \"$ERRAND_EXTENSION_OUTPUT_DIR/analysis-report\"",
    )
    .await;
    e2e.create_agent("writer", cluster::BUSYBOX_IMAGE, AGENT)
        .await;
    e2e.create_execution("analysed", "writer", json!({"extension": {"kind": kind}}))
        .await;
    let done = e2e.wait_for_phase("analysed", Phase::Succeeded).await;
    assert_eq!(
        reason_of(&done, ConditionType::ExtensionSucceeded),
        Some(Reason::ExtensionSucceeded.as_str()),
        "{}",
        message_of(&done)
    );
    let names = result_names(&done);
    for name in [
        "output_workdir",
        "run_result",
        "analysis-report",
        "manifest.json",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }

    // The report is downloadable like any result, and lists the agent's workdir.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.txt");
    let output = e2e
        .command(&[
            "results",
            "download",
            "analysis-report",
            "--execution",
            "analysed",
            "--out",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let report = std::fs::read_to_string(&file).unwrap();
    assert!(report.starts_with("report of analysed\n"), "{report}");
    assert!(report.contains("answer.txt"), "{report}");
    let manifest = e2e.result_json(&done, ResultName::Manifest).await;
    let listed = manifest_names(&manifest);
    assert!(listed.contains(&"analysis-report"), "{manifest}");
    assert!(listed.contains(&"output_workdir"), "{manifest}");
    let (code, listing) = e2e.cli(&["results", "list", "analysed"]);
    assert_eq!(code, 0, "{listing}");
    assert!(listing.to_string().contains("analysis-report"), "{listing}");

    // The agent found no grants: its own were removed before it started, the extension's are
    // in a volume its container does not mount, and nothing signed is in its environment.
    let workdir = e2e.result_files(&done, ResultName::OutputWorkdir).await;
    assert_eq!(workdir["grants-seen.txt"], "", "{workdir:?}");
    assert!(
        workdir["extension-grants-seen.txt"].contains("No such file"),
        "{workdir:?}"
    );
    assert_eq!(workdir["env-grants.txt"].trim(), "0", "{workdir:?}");
    let pod = e2e.pod_of("analysed").await;
    let spec = pod.spec.unwrap();
    let agent = spec
        .containers
        .iter()
        .find(|c| c.name == contract::AGENT_CONTAINER)
        .unwrap();
    let mounted: Vec<&str> = agent
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.name.as_str())
        .collect();
    assert!(
        !mounted.contains(&contract::EXTENSION_GRANTS_VOLUME)
            && !mounted.contains(&contract::GRANT_TOKEN_VOLUME),
        "{mounted:?}"
    );
    assert_eq!(spec.automount_service_account_token, Some(false));
    let extension = spec
        .containers
        .iter()
        .find(|c| c.name == contract::EXTENSION_CONTAINER)
        .expect("the extension's container");
    assert_eq!(extension.image.as_deref(), Some(cluster::BUSYBOX_IMAGE));
    assert!(extension.env.is_none(), "no Secret reaches the step");
    uninstall(&api, &kind).await;
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_extension_fails_the_execution_and_the_agents_results_stay() {
    let Some(e2e) = Harness::start("ext-broken", Mode::WithPods).await else {
        return;
    };
    let kind = format!("broken-{}", e2e.namespace.name());
    let api = install(&e2e, &kind, "echo 'cannot analyse this' >&2; exit 3").await;
    e2e.create_agent("writer", cluster::BUSYBOX_IMAGE, AGENT)
        .await;
    e2e.create_execution("broken", "writer", json!({"extension": {"kind": kind}}))
        .await;
    let done = e2e
        .wait_for_failure("broken", Phase::Failed, Reason::ExtensionFailed)
        .await;
    let message = message_of(&done);
    assert!(
        message.contains("failed after the agent succeeded")
            && message.contains("exited with code 3")
            && message.contains("cannot analyse this"),
        "{message}"
    );
    let condition = done
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::ExtensionSucceeded.as_str())
        .cloned()
        .expect("condition ExtensionSucceeded");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "ExtensionFailed")
    );
    // The agent's run succeeded and its results stay; the manifest lists them.
    assert_eq!(
        e2e.result_json(&done, ResultName::RunResult).await["state"],
        "Succeeded"
    );
    let names = result_names(&done);
    assert!(!names.iter().any(|n| n == "analysis-report"), "{names:?}");
    for name in ["output_workdir", "run_result", "manifest.json"] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
    uninstall(&api, &kind).await;
    e2e.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_does_not_run_after_a_failed_agent_and_an_unknown_kind_runs_nothing() {
    let Some(e2e) = Harness::start("ext-skip", Mode::WithPods).await else {
        return;
    };
    let kind = format!("skipped-{}", e2e.namespace.name());
    let api = install(
        &e2e,
        &kind,
        "echo ran > \"$ERRAND_EXTENSION_OUTPUT_DIR/analysis-report\"",
    )
    .await;
    e2e.create_agent("failer", cluster::BUSYBOX_IMAGE, "echo no >&2; exit 4")
        .await;
    e2e.create_execution(
        "agent-failed",
        "failer",
        json!({"extension": {"kind": kind}}),
    )
    .await;
    let done = e2e
        .wait_for_failure("agent-failed", Phase::Failed, Reason::AgentFailed)
        .await;
    assert_eq!(reason_of(&done, ConditionType::ExtensionSucceeded), None);
    let names = result_names(&done);
    assert!(!names.iter().any(|n| n == "analysis-report"), "{names:?}");
    assert!(names.iter().any(|n| n == "manifest.json"), "{names:?}");

    // Past the webhook (this harness runs none; `chart.rs` shows the create refused), the
    // controller fails an unknown kind before anything is created, listing the installed kinds.
    e2e.create_execution(
        "unknown-kind",
        "failer",
        json!({"extension": {"kind": "no-such-kind"}}),
    )
    .await;
    let refused = e2e
        .wait_for_failure("unknown-kind", Phase::Failed, Reason::InvalidSpec)
        .await;
    let message = message_of(&refused);
    assert!(
        message.contains("spec.extension.kind") && message.contains(&kind),
        "{message}"
    );
    uninstall(&api, &kind).await;
    e2e.finish().await;
}
