//! `errand stage`, `errand run-agent` and `errand run-extension` as the pod runs them, without a cluster: the real
//! binary against the controller's signed-URL blob endpoint over a `file://` store on loopback,
//! and the signed-URL client against a server that insists on sized uploads.

use errand::api::contract::COMPLETED_RUN_RESULTS;
use errand::cluster::listener::ServerLimits;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use errand::cluster::metrics::MetricsRegistry;
use errand::controller::metrics::Metrics;
use errand::resolve::Snapshot;
use errand::resolve::run_tokens::RunTokens;
use errand::runner::RunState;
use errand::runner::end_report::{RUN_ENDED_ENDPOINT, RunEndReport};
use errand::runner::termination::TerminationSummary;
use errand::serve::blobs::BlobEndpoint;
use errand::serve::http::{Probes, serve};
use errand::serve::run_ended::{RecordError, Recorded, Recorder, RunEndedEndpoint};
use errand::store::grants::{Grants, HmacSigner, ReportGrant, UploadMode, issue_grants};
use errand::store::keys::ResultName;
use errand::store::signed::SignedUrls;
use errand::store::{BlobSource, ResultBody, ResultSink, Store, StoreError};

use crate::support::archives::{gzip, zeros_archive};
use crate::support::store::{NAMESPACE, collect, execution, manifest_names, read_all, tar_files};

/// A pod's directories, a file store, and the controller's blob endpoint serving it.
struct Pod {
    _dir: tempfile::TempDir,
    root: PathBuf,
    store: Store,
    _server: tokio::task::JoinHandle<()>,
}

impl Pod {
    /// Pushes `files` as the base Fileset, writes the snapshot and the grants the controller
    /// would mount, and serves the blob endpoint on loopback.
    async fn new(files: &[(&str, &str)], timeout_seconds: i64) -> Pod {
        Pod::with_extension(files, timeout_seconds, None).await
    }

    /// [`Pod::new`] for an execution whose snapshot holds `extension`.
    async fn with_extension(
        files: &[(&str, &str)],
        timeout_seconds: i64,
        extension: Option<Value>,
    ) -> Pod {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        let store = Store::open(&format!("file://{}", root.join("store").display())).unwrap();
        let base = root.join("base");
        for (name, content) in files {
            let path = base.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        let pushed = store.push_fileset(NAMESPACE, &base).await.unwrap();
        for sub in [
            "bin",
            "workspace",
            "scratch",
            "mounted",
            "extension-grants",
            "handoff",
        ] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let signer = Arc::new(HmacSigner::new(&url, b"pod-commands-test-key-0123456789"));
        let probes = Probes {
            ready: Arc::new(AtomicBool::new(true)),
            metrics: Arc::new(String::new),
            grants: None,
            run_ended: None,
            blobs: Some(Arc::new(BlobEndpoint::new(
                store.clone(),
                Arc::clone(&signer),
            ))),
        };
        let server = tokio::spawn(serve(listener, ServerLimits::DEFAULT, probes));

        let mut snapshot = json!({
            "version": "errand.dev/snapshot-v1",
            "namespace": NAMESPACE,
            "agent": {"name": "calculator", "runtime": {"image": "busybox", "command": ["sh"]}},
            "config": {"name": "calculator", "env": {"PRECISION": "2"}},
            "compute": {},
            "workdir": {"base": {"fileset": "base", "digest": format!("sha256:{}", pushed.digest)}},
            "input": "What is 12 multiplied by 8?",
            "timeoutSeconds": timeout_seconds,
            "startTimeoutSeconds": 600,
            "autoTelemetry": false,
        });
        if let Some(extension) = extension {
            snapshot["extension"] = extension;
        }
        let snapshot: Snapshot = serde_json::from_value(snapshot).unwrap();
        let expires = Timestamp::now() + SignedDuration::from_mins(10);
        let grants = issue_grants(signer.as_ref(), &execution(), &snapshot, expires)
            .await
            .unwrap();
        std::fs::write(
            root.join("mounted/snapshot.json"),
            snapshot.canonical_json(),
        )
        .unwrap();
        std::fs::write(
            root.join("mounted/agent-config.json"),
            serde_json::to_vec(&snapshot.config).unwrap(),
        )
        .unwrap();
        std::fs::write(
            root.join("mounted/grants.json"),
            serde_json::to_vec(&grants).unwrap(),
        )
        .unwrap();
        Pod {
            _dir: dir,
            root,
            store,
            _server: server,
        }
    }

    fn path(&self, sub: &str) -> String {
        self.root.join(sub).display().to_string()
    }

    fn common_flags(&self, termination_log: &str) -> Vec<String> {
        [
            ("--snapshot", "mounted/snapshot.json"),
            ("--grants", "mounted/grants.json"),
            ("--workspace", "workspace"),
            ("--scratch", "scratch"),
            ("--termination-log", termination_log),
        ]
        .into_iter()
        .flat_map(|(flag, sub)| [flag.to_owned(), self.path(sub)])
        .collect()
    }

    fn stage_command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_errand"));
        command
            .args(["stage", "--bin-dir", &self.path("bin")])
            .args(self.common_flags("stage-termination-log"));
        command
    }

    /// `run-agent` from the binary that `stage` installed, as the agent's container runs it.
    fn run_agent_command(&self, agent: &str) -> Command {
        self.run_agent_command_with(agent, &[])
    }

    /// [`Pod::run_agent_command`] with `flags` added to `run-agent`'s own.
    fn run_agent_command_with(&self, agent: &str, flags: &[String]) -> Command {
        let mut command = Command::new(self.root.join("bin/errand"));
        command
            .args([
                "run-agent",
                "--agent-config",
                &self.path("mounted/agent-config.json"),
            ])
            .args(self.common_flags("termination-log"))
            .args(flags)
            .args(["--", "sh", "-c", agent])
            .current_dir(self.root.join("workspace"));
        command
    }

    fn summary(&self, log: &str) -> TerminationSummary {
        let message = std::fs::read_to_string(self.root.join(log)).unwrap();
        TerminationSummary::parse(&message).unwrap_or_else(|| panic!("not a summary: {message}"))
    }

    async fn result(&self, name: ResultName) -> Vec<u8> {
        let key = errand::store::keys::result(&execution(), name).unwrap();
        read_all(&self.store, &key).await
    }

    async fn result_json(&self, name: ResultName) -> Value {
        serde_json::from_slice(&self.result(name).await).unwrap()
    }
}

/// Runs a command on the blocking pool so the blob endpoint keeps serving meanwhile.
async fn run(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn names(summary: &TerminationSummary) -> Vec<&str> {
    summary.results.iter().map(|r| r.name.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_installs_errand_and_run_agent_saves_every_result_through_signed_urls() {
    let pod = Pod::new(&[("notes/question.txt", "12 x 8")], 60).await;
    let staged = run(pod.stage_command()).await;
    assert!(staged.status.success(), "{staged:?}");
    let installed = std::fs::metadata(pod.root.join("bin/errand")).unwrap();
    assert!(
        std::os::unix::fs::PermissionsExt::mode(&installed.permissions()) & 0o111 != 0,
        "the installed errand is executable"
    );
    // The errand image's CA roots go along, for agent images that have none.
    let roots = std::path::Path::new("/etc/ssl/certs/ca-certificates.crt");
    if roots.is_file() {
        assert_eq!(
            std::fs::read(pod.root.join("bin/ca-certificates.crt")).unwrap(),
            std::fs::read(roots).unwrap()
        );
    }
    assert_eq!(
        std::fs::read_to_string(pod.root.join("workspace/notes/question.txt")).unwrap(),
        "12 x 8"
    );
    let input = tar_files(&pod.result(ResultName::InputWorkdir).await);
    assert_eq!(
        input.get("notes/question.txt").map(String::as_str),
        Some("12 x 8")
    );

    let agent = r#"echo "precision $PRECISION"; \
        echo 'worked: 12 * 8' > "$ERRAND_ARTIFACTS_DIR/calculation.txt"; \
        grep -q calculator "$AGENT_CONFIG_PATH" && echo 96 > "$ERRAND_RESPONSE_FILE"; \
        echo answer > result.txt"#;
    let ran = run(pod.run_agent_command(agent)).await;
    assert!(ran.status.success(), "{ran:?}");
    assert!(
        String::from_utf8_lossy(&ran.stdout).contains("precision 2"),
        "the agent's output reaches the container log, with the snapshot's env"
    );

    let summary = pod.summary("termination-log");
    assert_eq!(summary.state, RunState::Succeeded);
    assert_eq!(summary.exit_code, Some(0));
    assert_eq!(summary.results_error, None);
    assert_eq!(names(&summary), COMPLETED_RUN_RESULTS);
    let record = pod.result_json(ResultName::RunResult).await;
    assert_eq!(record["response"], "96");
    assert_eq!(record["execution"]["uid"], execution().uid);
    let artifacts = tar_files(&pod.result(ResultName::OutputArtifacts).await);
    assert_eq!(artifacts["calculation.txt"], "worked: 12 * 8\n");
    assert!(artifacts["stdout.log"].contains("precision 2"));
    let output = tar_files(&pod.result(ResultName::OutputWorkdir).await);
    assert_eq!(output["result.txt"], "answer\n");
    let manifest = pod.result_json(ResultName::Manifest).await;
    let listed = manifest_names(&manifest);
    assert_eq!(listed, COMPLETED_RUN_RESULTS[..4]);
    // Sizes and digests reported are those of the stored bytes.
    for entry in &summary.results {
        if entry.name == "manifest.json" {
            continue;
        }
        let bytes = pod.result(ResultName::parse(&entry.name).unwrap()).await;
        assert_eq!(entry.size, bytes.len() as u64, "{}", entry.name);
        assert_eq!(
            entry.sha256,
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_agent_exits_with_its_code_and_its_stderr_reaches_the_summary() {
    let pod = Pod::new(&[("a.txt", "a")], 60).await;
    assert!(run(pod.stage_command()).await.status.success());
    let ran = run(pod.run_agent_command("echo 'calculator: division by zero' >&2; exit 3")).await;
    assert_eq!(ran.status.code(), Some(3));
    let summary = pod.summary("termination-log");
    assert_eq!(summary.state, RunState::Failed);
    assert_eq!(summary.exit_code, Some(3));
    assert!(
        summary.stderr_tail.contains("division by zero"),
        "{summary:?}"
    );
    assert!(names(&summary).contains(&"output_artifacts"));
    assert_eq!(pod.result_json(ResultName::RunResult).await["exit_code"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_stops_the_agent_and_the_results_are_saved() {
    let pod = Pod::new(&[("a.txt", "a")], 1).await;
    assert!(run(pod.stage_command()).await.status.success());
    let ran = run(pod.run_agent_command("echo started; sleep 30")).await;
    assert_eq!(ran.status.code(), Some(124));
    let summary = pod.summary("termination-log");
    assert_eq!(summary.state, RunState::TimedOut);
    assert!(summary.timed_out);
    let error = pod.result_json(ResultName::RunError).await;
    assert_eq!(error["type"], "DeadlineExceeded");
    assert_eq!(error["timed_out"], true);
    assert!(
        tar_files(&pod.result(ResultName::OutputArtifacts).await)["stdout.log"].contains("started")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_run_as_terminated_and_saves_partial_results() {
    let pod = Pod::new(&[("a.txt", "a")], 60).await;
    assert!(run(pod.stage_command()).await.status.success());
    let mut command = pod.run_agent_command("echo partial > partial.txt; echo working; sleep 30");
    command.stdout(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    // Wait for the agent to have started (its first line) before stopping the pod.
    let mut stdout = child.stdout.take().unwrap();
    let first_line = tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 8];
        std::io::Read::read(&mut stdout, &mut buf).unwrap();
        stdout
    })
    .await
    .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        drop(first_line);
        status
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(143));
    let summary = pod.summary("termination-log");
    // A pod's SIGTERM is its deletion (a cancel, an eviction, a drain): the runner records
    // that, and the controller, which sees the pod, says which.
    assert_eq!(summary.state, RunState::Terminated);
    assert_eq!(
        pod.result_json(ResultName::RunError).await["type"],
        "Terminated"
    );
    let output = tar_files(&pod.result(ResultName::OutputWorkdir).await);
    assert_eq!(output["partial.txt"], "partial\n");
}

/// Replaces the stored bytes of the Pod's pinned base blob.
fn overwrite_base_blob(pod: &Pod, blob: &[u8]) {
    let dir = pod.root.join("store/filesets").join(NAMESPACE);
    let pinned = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path());
    let pinned: Vec<_> = pinned
        .filter(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .collect();
    assert_eq!(pinned.len(), 1, "{pinned:?}");
    std::fs::write(&pinned[0], blob).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_staging_within_two_seconds_and_nothing_grows() {
    let pod = Pod::new(&[("a.txt", "a")], 60).await;
    overwrite_base_blob(&pod, &zeros_archive(&[], "big.bin", 4 << 30));
    let mut child = pod.stage_command().spawn().unwrap();
    let big = pod.root.join("workspace/big.bin");
    let waited = Instant::now();
    while std::fs::metadata(&big).map_or(true, |m| m.len() < 64 << 20) {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "staging never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let signalled = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let latency = signalled.elapsed();
    println!("SIGTERM during `errand stage`: exited {latency:?} after the signal");
    assert!(latency <= Duration::from_secs(2), "{latency:?}");
    assert_eq!(status.code(), Some(143));
    // A pod's SIGTERM is its deletion: the controller says in the status why.
    assert_eq!(
        pod.summary("stage-termination-log").state,
        RunState::Terminated
    );
    let size = std::fs::metadata(&big).unwrap().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        std::fs::metadata(&big).unwrap().len(),
        size,
        "nothing grows"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_changed_after_its_push_fails_staging_naming_both_digests() {
    let pod = Pod::new(&[("a.txt", "original")], 60).await;
    let swapped = gzip_tar_of("a.txt", b"swapped in");
    overwrite_base_blob(&pod, &swapped);
    let staged = run(pod.stage_command()).await;
    assert_eq!(staged.status.code(), Some(1));
    assert_eq!(
        pod.summary("stage-termination-log").state,
        RunState::StageFailed
    );
    let message = pod.result_json(ResultName::RunError).await["message"]
        .as_str()
        .unwrap()
        .to_owned();
    let actual = hex::encode(Sha256::digest(&swapped));
    assert!(
        message.contains("Fileset \"base\"")
            && message.contains(&format!("sha256:{actual}"))
            && message.contains("not the pinned sha256:"),
        "{message}"
    );
}

/// A `tar.gz` of one file.
fn gzip_tar_of(name: &str, data: &[u8]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    builder.append_data(&mut header, name, data).unwrap();
    gzip(&builder.into_inner().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_that_cannot_be_fetched_fails_staging_with_a_summary() {
    let pod = Pod::new(&[("a.txt", "a")], 60).await;
    // The blob vanishes between admission and staging.
    pod.store.delete_prefix("filesets/").await.unwrap();
    let staged = run(pod.stage_command()).await;
    assert_eq!(staged.status.code(), Some(1));
    let summary = pod.summary("stage-termination-log");
    assert_eq!(summary.state, RunState::StageFailed);
    assert_eq!(names(&summary), ["run_error", "manifest.json"]);
    let error = pod.result_json(ResultName::RunError).await;
    assert_eq!(error["type"], "StageFailed");
    assert!(
        error["message"].as_str().unwrap().contains("not found"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_grants_are_reported_in_the_termination_message() {
    let pod = Pod::new(&[("a.txt", "a")], 60).await;
    std::fs::write(pod.root.join("mounted/grants.json"), "not json").unwrap();
    let staged = run(pod.stage_command()).await;
    assert_eq!(staged.status.code(), Some(2));
    let summary = pod.summary("stage-termination-log");
    assert_eq!(summary.state, RunState::StageFailed);
    assert!(summary.stderr_tail.contains("grants"), "{summary:?}");
}

/// `stage` asking the stand-in controller at `url` for the grants with the token in `token`.
fn asking_stage(pod: &Pod, url: &str, token: &str) -> Command {
    std::fs::write(pod.root.join("token"), token).unwrap();
    let mut stage = pod.stage_command();
    stage
        .args(["--controller-url", url])
        .args(["--grant-token", &pod.path("token")])
        .args(["--execution-namespace", &execution().namespace])
        .args(["--execution-name", &execution().name])
        .args(["--execution-uid", &execution().uid]);
    stage
}

/// A stand-in for the controller's grant endpoint: it answers `POST /grants` with `grants` for
/// the bearer token `pod-token` and the execution's id, 503 to its first request (a controller
/// restarting), and 403 to anything else. Returns its URL and the requests it answered.
async fn grant_server(grants: Vec<u8>) -> (String, Arc<Mutex<Vec<u16>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answered = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&answered);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (grants, seen) = (grants.clone(), Arc::clone(&seen));
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let (grants, seen) = (grants.clone(), Arc::clone(&seen));
                    async move {
                        let token_ok = request.headers()["authorization"] == "Bearer pod-token";
                        let path_ok = request.uri().path() == "/grants";
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        let id: Value = serde_json::from_slice(&body).unwrap_or_default();
                        let id_ok = id == serde_json::to_value(execution()).unwrap();
                        let first = seen.lock().unwrap().is_empty();
                        let (status, body) = match (token_ok && path_ok && id_ok, first) {
                            (true, true) => (503, Bytes::from_static(b"restarting")),
                            (true, false) => (200, Bytes::from(grants)),
                            (false, _) => (403, Bytes::from_static(b"not this pod")),
                        };
                        seen.lock().unwrap().push(status);
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .status(status)
                                .body(Full::new(body))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, answered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_asks_the_controller_for_the_grants_and_the_agent_never_finds_them() {
    let pod = Pod::new(&[("a.txt", "a")], 60).await;
    // What the controller would issue; the pod starts without it.
    let grants_path = pod.root.join("mounted/grants.json");
    let grants = std::fs::read(&grants_path).unwrap();
    std::fs::remove_file(&grants_path).unwrap();
    let (url, answered) = grant_server(grants.clone()).await;
    let staged = run(asking_stage(&pod, &url, "pod-token\n")).await;
    assert!(staged.status.success(), "{staged:?}");
    assert_eq!(
        *answered.lock().unwrap(),
        [503, 200],
        "asked again after the controller could not answer"
    );
    assert_eq!(
        std::fs::read(&grants_path).unwrap(),
        grants,
        "kept for run-agent"
    );
    let mode = std::fs::metadata(&grants_path).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );

    let agent = format!(
        "if [ -e {} ]; then echo found-grants; else echo no-grants; fi",
        grants_path.display()
    );
    let ran = run(pod.run_agent_command(&agent)).await;
    assert!(ran.status.success(), "{ran:?}");
    assert!(
        String::from_utf8_lossy(&ran.stdout).contains("no-grants"),
        "{ran:?}"
    );
    assert!(!grants_path.exists());
    let summary = pod.summary("termination-log");
    assert_eq!(summary.state, RunState::Succeeded);
    assert_eq!(summary.results_error, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_grant_request_fails_staging_at_once_with_the_controllers_reason() {
    let pod = Pod::new(&[("a.txt", "a")], 60).await;
    std::fs::remove_file(pod.root.join("mounted/grants.json")).unwrap();
    let (url, _) = grant_server(Vec::new()).await;
    let staged = run(asking_stage(&pod, &url, "someone-elses-token")).await;
    assert_eq!(staged.status.code(), Some(2), "{staged:?}");
    let summary = pod.summary("stage-termination-log");
    assert_eq!(summary.state, RunState::StageFailed);
    assert!(
        summary
            .stderr_tail
            .contains("refused the grants (403 Forbidden): not this pod"),
        "{summary:?}"
    );
}

/// What a sized-upload server saw of one PUT.
#[derive(Debug, Clone)]
struct SeenPut {
    path: String,
    content_length: Option<u64>,
    chunked: bool,
    body: Vec<u8>,
}

/// A server that accepts GETs of one blob and PUTs with a `Content-Length` only, as
/// presigned object-store URLs do; it refuses its first request of each kind with 503. With
/// `tls` it speaks HTTPS.
async fn sized_server(
    blob: &'static [u8],
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> (String, Arc<Mutex<Vec<SeenPut>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let failed_once = Arc::new(Mutex::new(BTreeMap::<String, bool>::new()));
    let recorded = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let recorded = Arc::clone(&recorded);
            let failed_once = Arc::clone(&failed_once);
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let recorded = Arc::clone(&recorded);
                    let failed_once = Arc::clone(&failed_once);
                    async move {
                        let method = request.method().to_string();
                        let first = !failed_once
                            .lock()
                            .unwrap()
                            .insert(method.clone(), true)
                            .unwrap_or(false);
                        let reply = |status: StatusCode, body: &'static [u8]| {
                            Ok::<_, std::convert::Infallible>(
                                Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from_static(body)))
                                    .unwrap(),
                            )
                        };
                        if first {
                            return reply(StatusCode::SERVICE_UNAVAILABLE, b"slow down");
                        }
                        if method == "GET" {
                            return reply(StatusCode::OK, blob);
                        }
                        let headers = request.headers();
                        let content_length = headers
                            .get("content-length")
                            .map(|v| v.to_str().unwrap().parse().unwrap());
                        let chunked = headers.contains_key("transfer-encoding");
                        let path = request.uri().path().to_owned();
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        recorded.lock().unwrap().push(SeenPut {
                            path,
                            content_length,
                            chunked,
                            body: body.to_vec(),
                        });
                        if content_length.is_none() {
                            return reply(StatusCode::LENGTH_REQUIRED, b"length required");
                        }
                        reply(StatusCode::OK, b"")
                    }
                });
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => {
                        let _ = http
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    }
                    // A client that does not trust the CA ends the handshake.
                    Some(tls) => {
                        if let Ok(stream) = tls.accept(stream).await {
                            let _ = http
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await;
                        }
                    }
                }
            });
        }
    });
    (url, seen)
}

fn stream(parts: &[&'static [u8]]) -> ResultBody {
    ResultBody::bytes(parts.concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sized_uploads_are_spooled_and_sent_with_a_content_length_after_a_retry() {
    let (url, seen) = sized_server(b"blob bytes", None).await;
    let spool = tempfile::tempdir().unwrap();
    let grants = Grants {
        execution: execution(),
        inputs: BTreeMap::from([("filesets/k".to_owned(), format!("{url}/in?sig=1"))]),
        results: BTreeMap::from([(
            "run_result".to_owned(),
            format!("{url}/out/run_result?sig=2"),
        )]),
        uploads: UploadMode::Sized,
        put_headers: BTreeMap::new(),
        expires_at: Timestamp::now() + SignedDuration::from_mins(5),
        extension: None,
        report: None,
    };
    let urls = SignedUrls::new(grants, spool.path(), None).unwrap();

    let info = urls
        .put(
            ResultName::RunResult,
            stream(&[b"{\"response\":", b"\"96\"}"]),
        )
        .await
        .unwrap();
    assert_eq!(info.size, 17);
    assert_eq!(
        info.key,
        errand::store::keys::result(&execution(), ResultName::RunResult).unwrap()
    );
    let puts = seen.lock().unwrap().clone();
    assert_eq!(puts.len(), 1, "the refused attempt sent no body: {puts:?}");
    assert_eq!(puts[0].path, "/out/run_result");
    assert_eq!(puts[0].content_length, Some(17));
    assert!(!puts[0].chunked);
    assert_eq!(puts[0].body, b"{\"response\":\"96\"}");
    assert_eq!(
        std::fs::read_dir(spool.path()).unwrap().count(),
        0,
        "the spool file is removed"
    );

    let blob = urls.open("filesets/k").await.unwrap().into_stream();
    assert_eq!(collect(blob).await, b"blob bytes");
    assert!(matches!(
        urls.open("filesets/other").await,
        Err(StoreError::NotGranted(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_upload_waits_for_an_endpoint_that_is_not_up_yet() {
    // Reserve a port, then start the blob endpoint on it only after the upload began.
    let port = crate::support::ports::free_local_address().port();
    let address = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&format!("file://{}", dir.path().display())).unwrap();
    let signer = Arc::new(HmacSigner::new(
        &format!("http://{address}"),
        b"late-endpoint-key-0123456789abcd",
    ));
    let key = errand::store::keys::result(&execution(), ResultName::RunResult).unwrap();
    let put_url = errand::store::grants::UrlSigner::sign(
        signer.as_ref(),
        errand::store::grants::Access::Put,
        &key,
        Timestamp::now() + SignedDuration::from_mins(5),
    )
    .await
    .unwrap();
    let grants = Grants {
        execution: execution(),
        inputs: BTreeMap::new(),
        results: BTreeMap::from([("run_result".to_owned(), put_url)]),
        uploads: UploadMode::Chunked,
        put_headers: BTreeMap::new(),
        expires_at: Timestamp::now() + SignedDuration::from_mins(5),
        extension: None,
        report: None,
    };
    let urls = SignedUrls::new(grants, dir.path(), None).unwrap();
    let upload = tokio::spawn(async move {
        urls.put(ResultName::RunResult, stream(&[b"late ", b"but saved"]))
            .await
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let listener = tokio::net::TcpListener::bind(&address).await.unwrap();
    let probes = Probes {
        ready: Arc::new(AtomicBool::new(true)),
        metrics: Arc::new(String::new),
        grants: None,
        run_ended: None,
        blobs: Some(Arc::new(BlobEndpoint::new(store.clone(), signer))),
    };
    tokio::spawn(serve(listener, ServerLimits::DEFAULT, probes));
    let info = upload.await.unwrap().unwrap();
    assert_eq!(info.size, 14);
    assert_eq!(read_all(&store, &key).await, b"late but saved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_urls_are_trusted_through_the_given_ca_bundle_only() {
    let material =
        errand::cluster::serving::certs::generate(&["127.0.0.1".to_owned()], Timestamp::now())
            .unwrap();
    let certificate = Arc::new(errand::cluster::serving::tls::ServingCertificate::default());
    certificate
        .load_pem(&material.cert_pem, &material.key_pem)
        .unwrap();
    let acceptor = errand::cluster::serving::tls::acceptor(certificate).unwrap();
    let (url, seen) = sized_server(b"over tls", Some(acceptor)).await;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("ca.crt");
    std::fs::write(&bundle, &material.ca_pem).unwrap();
    let grants = Grants {
        execution: execution(),
        inputs: BTreeMap::from([("filesets/k".to_owned(), format!("{url}/in?sig=1"))]),
        results: BTreeMap::from([(
            "manifest.json".to_owned(),
            format!("{url}/out/manifest.json?sig=2"),
        )]),
        uploads: UploadMode::Sized,
        put_headers: BTreeMap::new(),
        expires_at: Timestamp::now() + SignedDuration::from_mins(5),
        extension: None,
        report: None,
    };

    let untrusting = SignedUrls::new(grants.clone(), dir.path(), None).unwrap();
    let started = std::time::Instant::now();
    let refused = untrusting.open("filesets/k").await.err().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a refused certificate is not retried"
    );
    assert!(
        refused.to_string().to_lowercase().contains("certificate"),
        "{refused}"
    );
    assert!(
        !refused.to_string().contains("sig=1"),
        "the signature stays out of errors"
    );

    let trusting = SignedUrls::new(grants, dir.path(), Some(&bundle)).unwrap();
    let blob = trusting.open("filesets/k").await.unwrap().into_stream();
    assert_eq!(collect(blob).await, b"over tls");
    let info = trusting
        .put(ResultName::Manifest, stream(&[b"{}"]))
        .await
        .unwrap();
    assert_eq!(info.size, 2);
    assert_eq!(seen.lock().unwrap().last().unwrap().body, b"{}");

    std::fs::write(&bundle, "not a certificate").unwrap();
    let error = SignedUrls::new(grants_without_urls(), dir.path(), Some(&bundle))
        .err()
        .unwrap();
    assert!(error.to_string().contains("ca.crt"), "{error}");
}

fn grants_without_urls() -> Grants {
    Grants {
        execution: execution(),
        inputs: BTreeMap::new(),
        results: BTreeMap::new(),
        uploads: UploadMode::Chunked,
        put_headers: BTreeMap::new(),
        expires_at: Timestamp::now() + SignedDuration::from_mins(5),
        extension: None,
        report: None,
    }
}

/// How the proxy in front of the blob endpoint treats one connection.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Resets the connection after this many bytes of the request.
    ResetAfter(usize),
    /// Closes the connection after this many bytes of the request.
    CloseAfter(usize),
    /// Passes the whole request on and closes the connection instead of answering.
    LoseTheAnswer,
    /// Passes the whole request on and resets the connection after this many bytes of the
    /// answer.
    ResetAnswerAfter(usize),
}

impl Cut {
    /// The most bytes passed on of the request and of the answer, and whether the connection
    /// is reset (else closed) once one is reached.
    fn limits(self) -> (Option<usize>, Option<usize>, bool) {
        match self {
            Cut::ResetAfter(n) => (Some(n), None, true),
            Cut::CloseAfter(n) => (Some(n), None, false),
            Cut::LoseTheAnswer => (None, Some(0), false),
            Cut::ResetAnswerAfter(n) => (None, Some(n), true),
        }
    }
}

/// Copies `from` to `to` until `from` ends or `limit` bytes were passed on (the byte read
/// past the limit is dropped).
async fn pipe(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    limit: Option<usize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limit = limit.unwrap_or(usize::MAX);
    let mut passed = 0;
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let Ok(read) = from.read(&mut buffer).await else {
            return;
        };
        let n = read.min(limit - passed);
        if read == 0 || (n > 0 && to.write_all(&buffer[..n]).await.is_err()) || n < read {
            return;
        }
        passed += n;
    }
}

/// A proxy to `upstream` that treats its first connections as `cuts` says and passes the
/// later ones through; returns its address and the number of connections it took.
async fn cutting_proxy(upstream: String, cuts: Vec<Cut>) -> (String, Arc<Mutex<usize>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let connections = Arc::new(Mutex::new(0usize));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let cut = {
                let mut n = counted.lock().unwrap();
                *n += 1;
                cuts.get(*n - 1).copied()
            };
            let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            tokio::spawn(async move {
                let (request_limit, answer_limit, reset) =
                    cut.map_or((None, None, false), Cut::limits);
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::select! {
                    () = pipe(&mut client_read, &mut server_write, request_limit) => {}
                    () = pipe(&mut server_read, &mut client_write, answer_limit) => {}
                }
                let client = client_read.reunite(client_write).unwrap();
                if reset {
                    #[allow(deprecated)]
                    client.set_linger(Some(Duration::ZERO)).unwrap();
                }
            });
        }
    });
    (format!("http://{address}"), connections)
}

/// Random bytes, the same for the same seed.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_upload_cut_off_at_any_byte_is_sent_again_until_it_is_saved() {
    let dir = tempfile::tempdir().unwrap();
    let workdir = dir.path().join("workdir");
    std::fs::create_dir_all(&workdir).unwrap();
    // Hex of random bytes: about 3 MiB once compressed, so the cuts fall inside the body.
    let big = hex::encode(noise(3 << 20, 7));
    std::fs::write(workdir.join("big.txt"), &big).unwrap();
    std::fs::write(workdir.join("small.txt"), "hello").unwrap();
    let store = Store::open(&format!("file://{}", dir.path().join("store").display())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap().to_string();
    let (url, connections) = cutting_proxy(
        upstream,
        vec![
            Cut::ResetAfter(2 << 20),
            Cut::CloseAfter(300),
            Cut::ResetAfter(1),
            Cut::LoseTheAnswer,
        ],
    )
    .await;
    let signer = Arc::new(HmacSigner::new(&url, b"cut-off-uploads-key-0123456789ab"));
    let probes = Probes {
        ready: Arc::new(AtomicBool::new(true)),
        metrics: Arc::new(String::new),
        grants: None,
        run_ended: None,
        blobs: Some(Arc::new(BlobEndpoint::new(store.clone(), signer.clone()))),
    };
    tokio::spawn(serve(listener, ServerLimits::DEFAULT, probes));
    let key = errand::store::keys::result(&execution(), ResultName::OutputWorkdir).unwrap();
    let expires = Timestamp::now() + SignedDuration::from_mins(5);
    let put_url = errand::store::grants::UrlSigner::sign(
        signer.as_ref(),
        errand::store::grants::Access::Put,
        &key,
        expires,
    )
    .await
    .unwrap();
    let grants = Grants {
        execution: execution(),
        inputs: BTreeMap::new(),
        results: BTreeMap::from([("output_workdir".to_owned(), put_url)]),
        uploads: UploadMode::Chunked,
        put_headers: BTreeMap::new(),
        expires_at: expires,
        extension: None,
        report: None,
    };
    let urls = SignedUrls::new(grants, dir.path(), None).unwrap();
    let items = errand::archive::list_dir(&workdir).unwrap();

    let saved = urls
        .put(
            ResultName::OutputWorkdir,
            ResultBody::packed(items, errand::archive::PackOptions::default()).0,
        )
        .await
        .unwrap();

    assert_eq!(
        *connections.lock().unwrap(),
        5,
        "four cut-off attempts, then one whole"
    );
    let stored = read_all(&store, &key).await;
    assert_eq!(saved.size, stored.len() as u64);
    assert_eq!(
        saved.sha256,
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&stored))
    );
    let files = tar_files(&stored);
    assert_eq!(files["small.txt"], "hello");
    assert!(files["big.txt"] == big, "the whole file was saved");
    let listed: Vec<String> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.key)
        .collect();
    assert_eq!(listed, vec![key], "no partial object is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_cut_off_mid_way_goes_on_from_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&format!("file://{}", dir.path().join("store").display())).unwrap();
    let blob = noise(3 << 20, 11);
    let key = format!("filesets/{NAMESPACE}/{}.tar.gz", "b".repeat(64));
    let bytes = futures::stream::iter([Ok(Bytes::from(blob.clone()))]);
    store
        .put_new(&key, futures::StreamExt::boxed(bytes))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap().to_string();
    let (url, connections) = cutting_proxy(
        upstream,
        vec![
            Cut::ResetAnswerAfter(1 << 20),
            Cut::ResetAnswerAfter(100),
            Cut::ResetAfter(10),
            Cut::LoseTheAnswer,
        ],
    )
    .await;
    let signer = Arc::new(HmacSigner::new(&url, b"cut-off-download-key-0123456789a"));
    let probes = Probes {
        ready: Arc::new(AtomicBool::new(true)),
        metrics: Arc::new(String::new),
        grants: None,
        run_ended: None,
        blobs: Some(Arc::new(BlobEndpoint::new(store.clone(), signer.clone()))),
    };
    tokio::spawn(serve(listener, ServerLimits::DEFAULT, probes));
    let expires = Timestamp::now() + SignedDuration::from_mins(5);
    let get_url = errand::store::grants::UrlSigner::sign(
        signer.as_ref(),
        errand::store::grants::Access::Get,
        &key,
        expires,
    )
    .await
    .unwrap();
    let grants = Grants {
        execution: execution(),
        inputs: BTreeMap::from([(key.clone(), get_url)]),
        results: BTreeMap::new(),
        uploads: UploadMode::Chunked,
        put_headers: BTreeMap::new(),
        expires_at: expires,
        extension: None,
        report: None,
    };
    let urls = SignedUrls::new(grants, dir.path(), None).unwrap();

    let got = collect(urls.open(&key).await.unwrap().into_stream()).await;

    assert!(got == blob, "every byte arrived once, in order");
    assert_eq!(
        *connections.lock().unwrap(),
        5,
        "cut twice mid-way, then twice before"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extension_runs_after_the_agent_with_grants_of_its_own_and_saves_its_report() {
    let script = r#"set -eu; { echo "report of $ERRAND_EXECUTION_NAME"; \
        tar -tzf "$ERRAND_EXTENSION_RESULTS_DIR/output_workdir.tar.gz" | sort; } \
        > "$ERRAND_EXTENSION_OUTPUT_DIR/analysis-report""#;
    let extension = json!({
        "kind": "analysis", "name": "analysis",
        "container": {"image": "busybox", "command": ["sh", "-c", script]},
        "results": ["analysis-report"], "timeoutSeconds": 60,
    });
    let pod = Pod::with_extension(&[("a.txt", "a")], 60, Some(extension)).await;
    let grants_path = pod.root.join("mounted/grants.json");
    let issued: Grants = serde_json::from_slice(&std::fs::read(&grants_path).unwrap()).unwrap();
    assert!(
        issued.extension.is_some(),
        "the controller issues the extension's grants"
    );
    std::fs::remove_file(&grants_path).unwrap();
    let (url, _) = grant_server(serde_json::to_vec(&issued).unwrap()).await;
    let extension_flags = [
        "--extension-grants".to_owned(),
        pod.path("extension-grants/grants.json"),
        "--handoff".to_owned(),
        pod.path("handoff/run.json"),
    ];
    let mut stage = asking_stage(&pod, &url, "pod-token");
    stage.args(&extension_flags);
    let staged = run(stage).await;
    assert!(staged.status.success(), "{staged:?}");
    let kept: Grants = serde_json::from_slice(&std::fs::read(&grants_path).unwrap()).unwrap();
    assert!(
        kept.extension.is_none(),
        "the agent's container keeps only its own grants"
    );
    let apart: Grants = serde_json::from_slice(
        &std::fs::read(pod.root.join("extension-grants/grants.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(Some(Box::new(apart)), issued.extension);

    let agent = pod.run_agent_command_with("echo answer > result.txt", &extension_flags);
    let ran = run(agent).await;
    assert!(ran.status.success(), "{ran:?}");
    let summary = pod.summary("termination-log");
    assert!(
        !names(&summary).contains(&"manifest.json"),
        "the manifest is left to the extension's step: {:?}",
        names(&summary)
    );
    assert!(pod.root.join("handoff/run.json").is_file());

    let mut step = Command::new(pod.root.join("bin/errand"));
    step.arg("run-extension")
        .args(["--snapshot", &pod.path("mounted/snapshot.json")])
        .args(["--agent-config", &pod.path("mounted/agent-config.json")])
        .args(["--grants", &pod.path("extension-grants/grants.json")])
        .args(["--handoff", &pod.path("handoff/run.json")])
        .args(["--dir", &pod.path("extension")])
        .args(["--termination-log", &pod.path("extension-termination-log")]);
    let stepped = run(step).await;
    assert!(stepped.status.success(), "{stepped:?}");
    assert!(
        !pod.root.join("extension-grants/grants.json").exists(),
        "the step never finds its grants"
    );
    let reported: errand::runner::ExtensionSummary = serde_json::from_str(
        &std::fs::read_to_string(pod.root.join("extension-termination-log")).unwrap(),
    )
    .unwrap();
    assert!(reported.succeeded(), "{reported:?}");
    let saved: Vec<&str> = reported.results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(saved, ["analysis-report", "manifest.json"]);
    let key = errand::store::keys::extension_result(&execution(), "analysis-report").unwrap();
    let report = String::from_utf8(read_all(&pod.store, &key).await).unwrap();
    assert!(
        report.starts_with("report of calc\n") && report.contains("result.txt"),
        "{report}"
    );
    let manifest = pod.result_json(ResultName::Manifest).await;
    let listed = manifest_names(&manifest);
    assert_eq!(
        listed,
        [
            "input_workdir",
            "output_workdir",
            "output_artifacts",
            "run_result",
            "analysis-report"
        ]
    );
}

/// A run-ended endpoint's record that keeps what it is given.
#[derive(Default)]
struct Kept(Mutex<Vec<RunEndReport>>);

#[async_trait::async_trait]
impl Recorder for Kept {
    async fn record(&self, report: &RunEndReport) -> Result<Recorded, RecordError> {
        self.0.lock().unwrap().push(report.clone());
        Ok(Recorded::HandedOver)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_agent_reports_the_end_and_only_a_report_the_saved_manifest_backs_is_recorded() {
    let pod = Pod::new(&[("a.txt", "a")], 60).await;
    let tokens = RunTokens::run_ended(b"run-ended-test-key-0123456789abc");
    let kept = Arc::new(Kept::default());
    let metrics = Arc::new(Metrics::default());
    let mut registry = MetricsRegistry::default();
    metrics.register(&mut registry);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}{RUN_ENDED_ENDPOINT}",
        listener.local_addr().unwrap()
    );
    let probes = Probes {
        ready: Arc::new(AtomicBool::new(true)),
        metrics: Arc::new(String::new),
        grants: None,
        run_ended: Some(Arc::new(RunEndedEndpoint::new(
            pod.store.clone(),
            tokens.clone(),
            kept.clone(),
            metrics.clone(),
        ))),
        blobs: None,
    };
    tokio::spawn(serve(listener, ServerLimits::DEFAULT, probes));
    let grants_path = pod.root.join("mounted/grants.json");
    let mut grants: Grants = serde_json::from_slice(&std::fs::read(&grants_path).unwrap()).unwrap();
    let token = tokens.mint(&execution().namespace, &execution().uid);
    grants.report = Some(ReportGrant {
        url: url.clone(),
        token: token.clone(),
    });
    std::fs::write(&grants_path, serde_json::to_vec(&grants).unwrap()).unwrap();
    assert!(run(pod.stage_command()).await.status.success());

    let ran = run(pod.run_agent_command("echo 96 > \"$ERRAND_RESPONSE_FILE\"")).await;
    assert!(ran.status.success(), "{ran:?}");
    let summary = pod.summary("termination-log");
    let recorded = kept.0.lock().unwrap().clone();
    assert_eq!(recorded.len(), 1, "one report: {recorded:?}");
    let report = recorded[0].clone();
    assert_eq!(report.execution, execution());
    assert_eq!(
        report.summary, summary,
        "the report says what the termination message says"
    );
    assert_eq!(report.runner_exit_code, 0);
    assert!(report.finished_at <= Timestamp::now());

    // Whoever else sends it is refused, and nothing more is recorded.
    let client = reqwest::Client::new();
    let body = serde_json::to_vec(&report).unwrap();
    let post = |token: Option<String>, body: Vec<u8>| {
        let mut request = client.post(&url).body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.unwrap();
            (response.status(), response.text().await.unwrap())
        }
    };
    let (status, why) = post(None, body.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}");
    let another_run = tokens.mint(&execution().namespace, "another-uid");
    let (status, why) = post(Some(another_run), body.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}");
    assert!(why.contains("not the one of execution"), "{why}");
    let model_token = RunTokens::models(b"run-ended-test-key-0123456789abc")
        .mint(&execution().namespace, &execution().uid);
    let (status, _) = post(Some(model_token), body.clone()).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "a token of another purpose"
    );
    let mut failed = report.clone();
    failed.summary.state = RunState::Failed;
    failed.summary.exit_code = Some(0);
    failed.summary.results.retain(|r| r.name != "run_result");
    let (status, why) = post(Some(token.clone()), serde_json::to_vec(&failed).unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{why}");
    assert!(why.contains("other results"), "{why}");
    let mut elsewhere = report.clone();
    elsewhere
        .summary
        .results
        .iter_mut()
        .for_each(|r| r.sha256 = "0".repeat(64));
    let (status, why) = post(Some(token.clone()), serde_json::to_vec(&elsewhere).unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{why}");
    let (status, why) = post(Some(token.clone()), vec![b' '; 64 * 1024]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{why}");
    let (status, why) = post(Some(token.clone()), b"{\"execution\":".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{why}");
    assert_eq!(
        kept.0.lock().unwrap().len(),
        1,
        "nothing refused was recorded"
    );
    let counted = registry.render();
    for line in [
        "errand_controller_run_ended_reports_total{outcome=\"handed_over\"} 1",
        "errand_controller_run_ended_reports_total{outcome=\"refused\"} 7",
    ] {
        assert!(counted.contains(line), "{line} in {counted}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_cannot_be_reached_does_not_hold_a_failed_run() {
    let pod = Pod::new(&[("a.txt", "a")], 60).await;
    let grants_path = pod.root.join("mounted/grants.json");
    let mut grants: Grants = serde_json::from_slice(&std::fs::read(&grants_path).unwrap()).unwrap();
    // Nothing listens there: the runner gives up within its budget and exits as the run did.
    let closed = crate::support::ports::free_local_address();
    grants.report = Some(ReportGrant {
        url: format!("http://{closed}{RUN_ENDED_ENDPOINT}"),
        token: "errand-end-x".into(),
    });
    std::fs::write(&grants_path, serde_json::to_vec(&grants).unwrap()).unwrap();
    assert!(run(pod.stage_command()).await.status.success());
    let started = Instant::now();
    let ran = run(pod.run_agent_command("echo boom >&2; exit 3")).await;
    assert_eq!(ran.status.code(), Some(3), "{ran:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the report's budget bounds the wait: {:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(stderr.contains("was not reported"), "{stderr}");
    assert_eq!(pod.summary("termination-log").state, RunState::Failed);
}
