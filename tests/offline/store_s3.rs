//! Presigned grants against a real S3 protocol server on loopback (s3s-fs, which checks SigV4
//! signatures): the controller's [`PresignedSigner`](errand::store::PresignedSigner) signs, the
//! real `errand stage` and `errand run-agent` binaries (the pod side) download and upload
//! through the URLs, and [`Store`] reads what they wrote. The server refuses a URL whose
//! signature was tampered with, whose path was changed to another key, that is used with
//! another method, or that has expired. That is s3s's SigV4 check, not AWS's own; that S3
//! refuses the same rests on both following the SigV4 specification.

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use reqwest::StatusCode;
use serde_json::json;

use crate::support::s3::{self, BUCKET, S3Server};
use crate::support::store::{NAMESPACE, execution, read_all};
use errand::resolve::Snapshot;
use errand::runner::RunState;
use errand::runner::termination::TerminationSummary;
use errand::store::grants::{Access, Grants, UploadMode, UrlSigner, issue_grants};
use errand::store::keys::{self, ResultName};
use errand::store::signed::SignedUrls;
use errand::store::{ResultBody, ResultSink, Store, StoreError};

/// The store URL's path: every key must land under it, as `Store` addresses them.
const PREFIX: &str = "tenant-1";

fn open_store(server: &S3Server, url: &str) -> Store {
    let options = server.options();
    let options: Vec<(&str, &str)> = options.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Store::open_with_options(url, &options).unwrap()
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
    let Some(server) = s3::server().await else {
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
        let bytes = read_all(&store, &keys::result(&execution(), name).unwrap()).await;
        assert_eq!(entry.size, bytes.len() as u64, "{}", entry.name);
    }
    let record: serde_json::Value = serde_json::from_slice(
        &read_all(
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
            ResultBody::bytes(Bytes::from_static(b"{}")),
        )
        .await;
    assert!(
        matches!(again, Err(StoreError::AlreadyExists { .. })),
        "{again:?}"
    );
    assert_eq!(record["response"], {
        let kept: serde_json::Value =
            serde_json::from_slice(&read_all(&store, &run_result).await).unwrap();
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
    assert_eq!(read_all(&store, &run_result).await, b"replaced");
}

/// `url` with the last hex digit of its signature changed.
fn tampered(url: &str) -> String {
    let (head, last) = url.split_at(url.len() - 1);
    assert!(head.contains("X-Amz-Signature="), "{url}");
    format!("{head}{}", if last == "0" { "1" } else { "0" })
}

/// The status and S3 error code of a refused request.
async fn refusal(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body = response.text().await.unwrap();
    let code = body
        .split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map_or(body.clone(), |(code, _)| code.to_owned());
    (status, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_tampered_moved_misused_and_expired_presigned_urls() {
    let Some(server) = s3::server().await else {
        return;
    };
    let store = open_store(&server, &format!("s3://{BUCKET}/{PREFIX}"));
    let signer = store.presigned_signer().unwrap();
    let client = reqwest::Client::new();
    let put = |url: &str, body: &'static str| client.put(url).body(body).send();
    let (mine, other, unwritten) = ("results/mine.txt", "results/other.txt", "results/new.txt");
    store
        .put_new(
            other,
            futures::stream::iter([Ok(Bytes::from_static(b"other"))]).boxed(),
        )
        .await
        .unwrap();

    let put_url = signer.sign(Access::Put, mine, soon()).await.unwrap();
    let get_url = signer.sign(Access::Get, mine, soon()).await.unwrap();
    let mine_path = format!("/{BUCKET}/{PREFIX}/{mine}?");
    assert!(put_url.contains(&mine_path), "{put_url}");
    let forged = (StatusCode::FORBIDDEN, "SignatureDoesNotMatch".to_owned());

    // A tampered signature: refused for PUT and GET, and nothing is written.
    assert_eq!(
        refusal(put(&tampered(&put_url), "forged").await.unwrap()).await,
        forged
    );
    assert!(!store.exists(mine).await.unwrap());

    // The untouched URLs work.
    assert_eq!(
        put(&put_url, "mine").await.unwrap().status(),
        StatusCode::OK
    );
    let got = client.get(&get_url).send().await.unwrap();
    assert_eq!(got.status(), StatusCode::OK);
    assert_eq!(got.text().await.unwrap(), "mine");
    assert_eq!(
        refusal(client.get(tampered(&get_url)).send().await.unwrap()).await,
        forged
    );

    // The same query on another key's path: neither reads an existing object nor writes
    // over it or a new one.
    let moved =
        |url: &str, key: &str| url.replace(&mine_path, &format!("/{BUCKET}/{PREFIX}/{key}?"));
    assert_eq!(
        refusal(client.get(moved(&get_url, other)).send().await.unwrap()).await,
        forged
    );
    for key in [other, unwritten] {
        assert_eq!(
            refusal(put(&moved(&put_url, key), "forged").await.unwrap()).await,
            forged,
            "{key}"
        );
    }
    assert_eq!(read_all(&store, other).await, b"other");
    assert!(!store.exists(unwritten).await.unwrap());

    // The method is signed: a PUT URL does not read, a GET URL does not write.
    assert_eq!(
        refusal(client.get(&put_url).send().await.unwrap()).await,
        forged
    );
    assert_eq!(
        refusal(put(&get_url, "forged").await.unwrap()).await,
        forged
    );
    assert_eq!(read_all(&store, mine).await, b"mine");

    // Expiry: URLs signed to last until two seconds from now (`X-Amz-Expires` of 1 or 2,
    // from a whole-second `X-Amz-Date`) work at once and are refused three seconds later.
    let until = Timestamp::now() + SignedDuration::from_secs(2);
    let short_get = signer.sign(Access::Get, mine, until).await.unwrap();
    let short_put = signer.sign(Access::Put, unwritten, until).await.unwrap();
    assert_eq!(
        client.get(&short_get).send().await.unwrap().status(),
        StatusCode::OK
    );
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let expired = (StatusCode::FORBIDDEN, "AccessDenied".to_owned());
    assert_eq!(
        refusal(client.get(&short_get).send().await.unwrap()).await,
        expired
    );
    assert_eq!(
        refusal(put(&short_put, "late").await.unwrap()).await,
        expired
    );
    assert!(!store.exists(unwritten).await.unwrap());
}
