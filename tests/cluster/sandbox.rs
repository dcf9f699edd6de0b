//! The sandboxed runtime tier on the real node: with the installation requiring RuntimeClass `gvisor` (the test node's gVisor, `hack/testenv/up.sh`), an execution that names no class runs under gVisor, sees gVisor's kernel (`4.19.0-gvisor`) rather than the node's, and saves every result; one whose environment names another class fails `InvalidSpec` naming the field and creates nothing.

use serde_json::json;

use crate::support::cluster::BUSYBOX_IMAGE;
use crate::support::harness::{Harness, message_of, result_names};
use errand::api::Phase;
use errand::api::contract::{COMPLETED_RUN_RESULTS, Reason};
use errand::store::keys::ResultName;

/// Prints the kernel release the agent sees as its answer, keeps the full `uname` among its
/// artifacts and leaves a file in its working directory.
const KERNEL_AGENT: &str =
    "uname -a > \"$ERRAND_ARTIFACTS_DIR/uname.txt\"; echo sandboxed > left.txt; uname -r";

/// The node's own kernel release (the test node is this machine).
fn node_kernel() -> String {
    let output = std::process::Command::new("uname")
        .arg("-r")
        .output()
        .expect("running uname");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_gvisor_class_runs_every_execution_in_gvisor_and_refuses_another_class() {
    let Some(harness) =
        Harness::start_with_controller_args("sandbox", &["--execution-runtime-class=gvisor"]).await
    else {
        return;
    };
    harness
        .create_agent("kernel", BUSYBOX_IMAGE, KERNEL_AGENT)
        .await;

    // Another class than the required one: refused before anything is created.
    harness
        .create_execution(
            "other-class",
            "kernel",
            json!({"environment": {"compute": {"runtimeClassName": "runc"}}}),
        )
        .await;
    let refused = harness
        .wait_for_failure("other-class", Phase::Failed, Reason::InvalidSpec)
        .await;
    let message = message_of(&refused);
    assert!(
        message.contains("spec.environment.compute.runtimeClassName")
            && message.contains("RuntimeClass \"runc\" is not allowed")
            && message.contains("\"gvisor\""),
        "{message}"
    );
    assert!(harness.has_no_children().await, "the refused run got a Job");

    // No class named: the installation's applies, and the agent runs in gVisor's kernel.
    harness
        .create_execution("sandboxed", "kernel", json!({}))
        .await;
    let done = harness.wait_for_phase("sandboxed", Phase::Succeeded).await;
    let pod = harness.pod_of("sandboxed").await;
    assert_eq!(
        pod.spec.as_ref().unwrap().runtime_class_name.as_deref(),
        Some("gvisor")
    );
    assert_eq!(result_names(&done), COMPLETED_RUN_RESULTS);
    let record = harness.result_json(&done, ResultName::RunResult).await;
    let kernel = record["response"].as_str().unwrap_or_default().trim();
    assert!(
        kernel.ends_with("-gvisor") && kernel != node_kernel(),
        "the agent saw kernel {kernel:?}, not gVisor's: {record}"
    );
    let artifacts = harness
        .result_files(&done, ResultName::OutputArtifacts)
        .await;
    assert!(artifacts["uname.txt"].contains(kernel), "{artifacts:?}");
    let workdir = harness.result_files(&done, ResultName::OutputWorkdir).await;
    assert_eq!(workdir["left.txt"].trim(), "sandboxed");
    harness.finish().await;
}
