//! Presigned grants against a real S3 protocol server on loopback (moto): the controller's
//! [`PresignedSigner`](errand::store::PresignedSigner) signs, the real `errand stage` and
//! `errand run-agent` binaries (the pod side) download and upload through the URLs, and
//! [`Store`] reads what they wrote.
//!
//! Not proved here: that the server refuses a URL for another key, with a tampered signature
//! or past its expiry. moto does not check presigned URLs (`support::s3`), so such a test
//! would pass whatever the URLs were; that the signature covers method, path and expiry rests
//! on object_store's SigV4 signer.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use reqwest::StatusCode;
use serde_json::json;

use errand::resolve::Snapshot;
use errand::runner::ResultSink;
use errand::runner::RunState;
use errand::runner::signed::SignedUrls;
use errand::runner::termination::TerminationSummary;
use errand::store::grants::{Grants, UploadMode, issue_grants};
use errand::store::keys::{self, ExecutionId, ResultName};
use errand::store::{Store, StoreError};
use support::s3::{self, BUCKET, S3Server};

const NAMESPACE: &str = "team-a";
/// The store URL's path: every key must land under it, as `Store` addresses them.
const PREFIX: &str = "tenant-1";

fn execution() -> ExecutionId {
    ExecutionId {
        namespace: NAMESPACE.into(),
        name: "calc".into(),
        uid: "0d9f6a52-1111-2222-3333-444455556666".into(),
    }
}

fn open_store(server: &S3Server, url: &str) -> Store {
    let options = server.options();
    let options: Vec<(&str, &str)> = options.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Store::open_with_options(url, &options).unwrap()
}

async fn read(store: &Store, key: &str) -> Vec<u8> {
    let chunks: Vec<Bytes> = store
        .get(key)
        .await
        .unwrap_or_else(|e| panic!("{key}: {e}"))
        .into_stream()
        .try_collect()
        .await
        .unwrap();
    chunks.concat()
}

fn soon() -> Timestamp {
    Timestamp::now() + SignedDuration::from_mins(10)
}

/// Writes the files the controller would mount into the pod (snapshot, agent config, grants)
/// and the pod's directories under `root`.
fn mount(root: &Path, snapshot: &Snapshot, grants: &Grants) {
    for sub in ["bin", "workspace", "scratch", "mounted"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    let mounted = [
        ("snapshot.json", snapshot.canonical_json()),
        (
            "agent-config.json",
            serde_json::to_vec(&snapshot.config).unwrap(),
        ),
        ("grants.json", serde_json::to_vec(grants).unwrap()),
    ];
    for (name, bytes) in mounted {
        std::fs::write(root.join("mounted").join(name), bytes).unwrap();
    }
}

/// `errand <command>` with the flags errand's containers get, run on the blocking pool.
async fn errand(binary: PathBuf, root: &Path, args: &[&str]) -> std::process::Output {
    let path = |sub: &str| root.join(sub).display().to_string();
    let mut command = Command::new(binary);
    command.args(&args[..1]);
    if args[0] == "stage" {
        command.args(["--bin-dir", &path("bin")]);
    } else {
        command.args(["--agent-config", &path("mounted/agent-config.json")]);
    }
    command
        .args(["--snapshot", &path("mounted/snapshot.json")])
        .args(["--grants", &path("mounted/grants.json")])
        .args(["--workspace", &path("workspace")])
        .args(["--scratch", &path("scratch")])
        .args(["--termination-log", &path(&format!("{}.log", args[0]))])
        .args(&args[1..])
        .current_dir(root.join("workspace"));
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pod_stages_and_saves_results_through_presigned_urls_of_a_real_s3_server() {
    let Some(server) = s3::moto().await else {
        return;
    };
    let store = open_store(&server, &format!("s3://{BUCKET}/{PREFIX}"));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("base/notes")).unwrap();
    std::fs::write(root.join("base/notes/question.txt"), "12 x 8").unwrap();
    let pushed = store
        .push_fileset(NAMESPACE, &root.join("base"))
        .await
        .unwrap();

    let snapshot: Snapshot = serde_json::from_value(json!({
        "version": "errand.dev/snapshot-v1",
        "namespace": NAMESPACE,
        "agent": {"name": "calculator", "runtime": {"image": "busybox", "command": ["sh"]}},
        "config": {"name": "calculator"},
        "compute": {},
        "workdir": {"base": {"fileset": "base", "digest": format!("sha256:{}", pushed.digest)}},
        "input": "What is 12 multiplied by 8?",
        "timeoutSeconds": 60,
        "startTimeoutSeconds": 600,
        "autoTelemetry": false,
    }))
    .unwrap();
    let signer = store
        .presigned_signer()
        .expect("an s3:// store signs its own URLs");
    let grants = issue_grants(&signer, &execution(), &snapshot, soon())
        .await
        .unwrap();
    assert_eq!(grants.uploads, UploadMode::Sized);
    let blob_key = keys::fileset(NAMESPACE, &pushed.digest).unwrap();
    assert!(
        grants.inputs[&blob_key].starts_with(&format!(
            "{}/{BUCKET}/{PREFIX}/{blob_key}?",
            server.endpoint
        )),
        "the URL addresses the key under the store's prefix"
    );
    mount(root, &snapshot, &grants);

    let staged = errand(env!("CARGO_BIN_EXE_errand").into(), root, &["stage"]).await;
    assert!(staged.status.success(), "{staged:?}");
    assert_eq!(
        std::fs::read_to_string(root.join("workspace/notes/question.txt")).unwrap(),
        "12 x 8",
        "the input blob came through its GET URL"
    );
    let agent = "echo 96 > \"$ERRAND_RESPONSE_FILE\"; echo answer > result.txt";
    let ran = errand(
        root.join("bin/errand"),
        root,
        &["run-agent", "--", "sh", "-c", agent],
    )
    .await;
    assert!(ran.status.success(), "{ran:?}");
    let summary = std::fs::read_to_string(root.join("run-agent.log")).unwrap();
    let summary = TerminationSummary::parse(&summary).unwrap();
    assert_eq!(summary.state, RunState::Succeeded);
    assert_eq!(summary.results_error, None);

    // Every result the pod reported is in the store, byte for byte as reported.
    for entry in &summary.results {
        let name = ResultName::parse(&entry.name).unwrap();
        let bytes = read(&store, &keys::result(&execution(), name).unwrap()).await;
        assert_eq!(entry.size, bytes.len() as u64, "{}", entry.name);
    }
    let record: serde_json::Value = serde_json::from_slice(
        &read(
            &store,
            &keys::result(&execution(), ResultName::RunResult).unwrap(),
        )
        .await,
    )
    .unwrap();
    assert_eq!(record["response"], "96");
    let unprefixed = open_store(&server, &format!("s3://{BUCKET}"));
    let run_result = keys::result(&execution(), ResultName::RunResult).unwrap();
    assert!(
        unprefixed
            .exists(&format!("{PREFIX}/{run_result}"))
            .await
            .unwrap()
    );

    // Write-once: errand's uploader sends If-None-Match: *, which the server answers with 412.
    let spool = tempfile::tempdir().unwrap();
    let urls = SignedUrls::new(grants.clone(), spool.path(), None).unwrap();
    let again = urls
        .put(
            ResultName::RunResult,
            futures::stream::iter([Ok(Bytes::from_static(b"{}"))]).boxed(),
        )
        .await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists { .. })),
        "{again:?}"
    );
    assert_eq!(record["response"], {
        let kept: serde_json::Value =
            serde_json::from_slice(&read(&store, &run_result).await).unwrap();
        kept["response"].clone()
    });
    // The condition is a header outside the signature: a client that leaves it out replaces
    // the object. The URL alone does not make a result write-once, on S3 as here.
    let plain = reqwest::Client::new()
        .put(&grants.results["run_result"])
        .body("replaced")
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), StatusCode::OK);
    assert_eq!(read(&store, &run_result).await, b"replaced");
}
