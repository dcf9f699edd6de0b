//! End to end through `runner::execute` against a `file://` store: staging with mounts, the
//! agent's environment, success, failure, timeout, cancellation, and results saved every time.

use errand::api::contract::{COMPLETED_RUN_RESULTS, INTERRUPTED_RUN_RESULTS};
use std::collections::BTreeMap;
use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::store::{NAMESPACE, execution, read_all};
use bytes::Bytes;
use errand::archive::{Selection, Unpacker};
use errand::runner::{
    BlobRef, Invocation, MountRef, Provenance, RunState, RunSummary, ScratchDir, StagePlan,
    StageSettings, StopRequest, execute,
};
use errand::store::keys::{self, ExecutionId, ResultName};
use errand::store::{
    BlobBody, BlobSource, ResultBody, ResultSink, Store, StoreError, StoreResults, StoredObject,
};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

struct Env {
    tmp: tempfile::TempDir,
    store: Store,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("file://{}", tmp.path().join("store").display())).unwrap();
        Env { tmp, store }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// Pushes a fileset made of `files` (path → content).
    async fn fileset(&self, name: &str, files: &[(&str, &str)]) -> BlobRef {
        let dir = self.path(&format!("filesets/{name}"));
        for (path, content) in files {
            let path = dir.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }
        let pushed = self.store.push_fileset(NAMESPACE, &dir).await.unwrap();
        BlobRef {
            fileset: name.to_owned(),
            key: pushed.key,
            sha256: pushed.digest,
            subpath: None,
        }
    }

    fn invocation(&self, uid: &str, script: &str, timeout: Duration) -> Invocation {
        let config = self.path("agent.json");
        fs::write(
            &config,
            r#"{"config_format":"agents-spec-v1","name":"calc"}"#,
        )
        .unwrap();
        Invocation {
            execution: ExecutionId {
                uid: uid.into(),
                ..execution()
            },
            command: vec!["sh".into(), "-c".into(), script.into()],
            input: "What is 12 multiplied by 8?".into(),
            agent_config_path: config,
            env: vec![("CALC_MODE".into(), "strict".into())],
            timeout,
            control: None,
            grace: Duration::from_millis(500),
            workdir: self.path(&format!("runs/{uid}/workspace")),
            scratch: ScratchDir::new(self.path(&format!("runs/{uid}/scratch"))),
            stdin: None,
            passthrough: false,
            stop: StopRequest::Cancel,
            inherit_env: true,
            gpu_devices: Vec::new(),
            provenance: Provenance {
                snapshot_digest: "sha256:5a".into(),
                image: None,
            },
            telemetry: errand::telemetry::ExecutionTelemetry::off(),
            extension_follows: false,
        }
    }

    async fn run(
        &self,
        invocation: &Invocation,
        plan: &StagePlan,
        cancel: CancellationToken,
    ) -> RunSummary {
        let sink = StoreResults::new(self.store.clone(), invocation.execution.clone()).unwrap();
        execute(
            invocation,
            plan,
            &self.store,
            &sink,
            &StageSettings::default(),
            cancel,
        )
        .await
    }

    async fn result(&self, invocation: &Invocation, name: ResultName) -> Vec<u8> {
        let key = keys::result(&invocation.execution, name).unwrap();
        read_all(&self.store, &key).await
    }

    async fn json(&self, invocation: &Invocation, name: ResultName) -> serde_json::Value {
        serde_json::from_slice(&self.result(invocation, name).await).unwrap()
    }

    /// Extracts a tarball result and returns its files (path → content).
    async fn tree(&self, invocation: &Invocation, name: ResultName) -> BTreeMap<String, String> {
        let dest = self.path(&format!("extracted/{}/{name}", invocation.execution.uid));
        let mut unpacker = Unpacker::new(&dest).unwrap();
        unpacker
            .unpack_tar_gz(
                Cursor::new(self.result(invocation, name).await),
                &Selection::default(),
                name.as_str(),
            )
            .unwrap();
        unpacker.finish().unwrap();
        files(&dest)
    }

    /// Every saved object of the run, checked against the manifest.
    async fn assert_manifest_matches(
        &self,
        invocation: &Invocation,
        summary: &RunSummary,
    ) -> Vec<String> {
        let manifest = self.json(invocation, ResultName::Manifest).await;
        let mut names = Vec::new();
        for entry in manifest["results"].as_array().unwrap() {
            let name = ResultName::parse(entry["name"].as_str().unwrap()).unwrap();
            let bytes = self.result(invocation, name).await;
            assert_eq!(
                entry["size"].as_u64().unwrap(),
                bytes.len() as u64,
                "{name}"
            );
            assert_eq!(
                entry["sha256"].as_str().unwrap(),
                hex::encode(Sha256::digest(&bytes)),
                "{name}"
            );
            names.push(name.as_str().to_owned());
        }
        let summarized: Vec<String> = summary
            .results
            .iter()
            .map(|r| r.name.as_str().to_owned())
            .collect();
        assert_eq!(summarized.last().map(String::as_str), Some("manifest.json"));
        assert_eq!(summarized[..summarized.len() - 1], names[..]);
        assert_eq!(
            manifest["execution"]["uid"],
            invocation.execution.uid.as_str()
        );
        let stored: Vec<String> = self
            .store
            .list(&keys::results_prefix(&invocation.execution).unwrap())
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.key.rsplit('/').next().unwrap().to_owned())
            .collect();
        let mut expected = summarized.clone();
        expected.sort();
        assert_eq!(stored, expected);
        names
    }
}

fn files(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, fs::read_to_string(&path).unwrap());
            }
        }
    }
    out
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn a_successful_run_saves_every_result() {
    let env = Env::new();
    let base = env
        .fileset(
            "base",
            &[("notes.txt", "base notes\n"), ("data/x.csv", "1,2\n")],
        )
        .await;
    let plan = StagePlan {
        base: Some(base),
        mounts: vec![],
    };
    let script = r#"
        set -e
        test "$ERRAND_INPUT" = "$(cat "$ERRAND_INPUT_FILE")"
        grep -q agents-spec-v1 "$AGENT_CONFIG_PATH"
        echo "mode=$CALC_MODE" > "$ERRAND_ARTIFACTS_DIR/report.txt"
        echo "computed" > answer.txt
        echo "thinking about: $ERRAND_INPUT"
        echo "a warning" >&2
        printf '96\n' > "$ERRAND_RESPONSE_FILE"
    "#;
    let inv = env.invocation(
        "00000000-0000-0000-0000-000000000001",
        script,
        Duration::from_secs(30),
    );
    let summary = env.run(&inv, &plan, CancellationToken::new()).await;

    assert_eq!(summary.state, RunState::Succeeded, "{summary:?}");
    assert_eq!(summary.exit_code, Some(0));
    assert_eq!(summary.response.as_deref(), Some("96"));
    assert_eq!(summary.stderr_tail, "a warning");
    assert!(!summary.timed_out);
    assert_eq!(summary.results_error, None);

    let names = env.assert_manifest_matches(&inv, &summary).await;
    assert_eq!(names, COMPLETED_RUN_RESULTS[..4]);

    let record = env.json(&inv, ResultName::RunResult).await;
    assert_eq!(record["state"], "Succeeded");
    assert_eq!(record["exit_code"], 0);
    assert_eq!(record["response"], "96");
    assert_eq!(record["execution"]["name"], "calc");
    let started: jiff::Timestamp = record["started_at"].as_str().unwrap().parse().unwrap();
    let finished: jiff::Timestamp = record["finished_at"].as_str().unwrap().parse().unwrap();
    assert!(started <= finished);
    assert!(record["duration_ms"].is_u64());

    assert_eq!(
        env.tree(&inv, ResultName::InputWorkdir).await,
        map(&[("notes.txt", "base notes\n"), ("data/x.csv", "1,2\n")])
    );
    assert_eq!(
        env.tree(&inv, ResultName::OutputWorkdir).await,
        map(&[
            ("notes.txt", "base notes\n"),
            ("data/x.csv", "1,2\n"),
            ("answer.txt", "computed\n")
        ])
    );
    assert_eq!(
        env.tree(&inv, ResultName::OutputArtifacts).await,
        map(&[
            ("report.txt", "mode=strict\n"),
            (
                "stdout.log",
                "thinking about: What is 12 multiplied by 8?\n"
            ),
            ("stderr.log", "a warning\n"),
        ])
    );
}

#[tokio::test]
async fn stdout_is_the_response_without_a_response_file() {
    let env = Env::new();
    let inv = env.invocation(
        "00000000-0000-0000-0000-000000000002",
        "echo '  96  '",
        Duration::from_secs(30),
    );
    let summary = env
        .run(&inv, &StagePlan::default(), CancellationToken::new())
        .await;
    assert_eq!(summary.state, RunState::Succeeded);
    assert_eq!(summary.response.as_deref(), Some("96"));
}

#[tokio::test]
async fn a_failing_agent_still_saves_results() {
    let env = Env::new();
    let script = "echo partial > out.txt; echo 'cannot divide by zero' >&2; exit 3";
    let inv = env.invocation(
        "00000000-0000-0000-0000-000000000003",
        script,
        Duration::from_secs(30),
    );
    let summary = env
        .run(&inv, &StagePlan::default(), CancellationToken::new())
        .await;

    assert_eq!(summary.state, RunState::Failed);
    assert_eq!(summary.exit_code, Some(3));
    assert_eq!(summary.stderr_tail, "cannot divide by zero");
    let names = env.assert_manifest_matches(&inv, &summary).await;
    assert_eq!(names, COMPLETED_RUN_RESULTS[..4]);
    let record = env.json(&inv, ResultName::RunResult).await;
    assert_eq!(record["state"], "Failed");
    assert_eq!(record["exit_code"], 3);
    assert_eq!(
        env.tree(&inv, ResultName::OutputWorkdir).await,
        map(&[("out.txt", "partial\n")])
    );
}

#[tokio::test]
async fn the_deadline_kills_an_agent_that_ignores_sigterm() {
    let env = Env::new();
    let script = "echo before-deadline > progress.txt; trap '' TERM; sleep 60";
    let inv = env.invocation(
        "00000000-0000-0000-0000-000000000004",
        script,
        Duration::from_secs(1),
    );
    let started = Instant::now();
    let summary = env
        .run(&inv, &StagePlan::default(), CancellationToken::new())
        .await;
    let took = started.elapsed();

    assert_eq!(summary.state, RunState::TimedOut, "{summary:?}");
    assert!(summary.timed_out);
    // SIGTERM was ignored, so only SIGKILL after the grace period ended it (and its sleep).
    assert_eq!(summary.exit_code, Some(128 + 9));
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let duration = summary.duration_ms.unwrap();
    assert!((1400..10_000).contains(&duration), "ran {duration} ms");

    let names = env.assert_manifest_matches(&inv, &summary).await;
    assert_eq!(names, INTERRUPTED_RUN_RESULTS[..4]);
    let record = env.json(&inv, ResultName::RunError).await;
    assert_eq!(record["type"], "DeadlineExceeded");
    assert_eq!(record["timed_out"], true);
    assert!(record["message"].as_str().unwrap().contains("within 1s"));
    assert_eq!(
        env.tree(&inv, ResultName::OutputWorkdir).await,
        map(&[("progress.txt", "before-deadline\n")])
    );
}

#[tokio::test]
async fn cancelling_stops_the_agent_and_saves_results() {
    let env = Env::new();
    let inv = env.invocation(
        "00000000-0000-0000-0000-000000000005",
        "echo started > started.txt; sleep 60",
        Duration::from_secs(60),
    );
    let cancel = CancellationToken::new();
    let marker = inv.workdir.join("started.txt");
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            while !marker.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            cancel.cancel();
        })
    };
    let started = Instant::now();
    let summary = env.run(&inv, &StagePlan::default(), cancel).await;
    canceller.await.unwrap();

    assert_eq!(summary.state, RunState::Cancelled);
    assert!(!summary.timed_out);
    // sleep takes SIGTERM, so no grace period was needed.
    assert_eq!(summary.exit_code, Some(128 + 15));
    assert!(started.elapsed() < Duration::from_secs(10));
    let names = env.assert_manifest_matches(&inv, &summary).await;
    assert_eq!(names, INTERRUPTED_RUN_RESULTS[..4]);
    let record = env.json(&inv, ResultName::RunError).await;
    assert_eq!(record["type"], "Cancelled");
    assert_eq!(record["timed_out"], false);
}

#[tokio::test]
async fn mounts_win_over_the_base_and_subpaths_reroot() {
    let env = Env::new();
    let base = env
        .fileset(
            "base",
            &[
                ("project/a.txt", "base a\n"),
                ("project/conf/b.txt", "base b\n"),
                ("other.txt", "x"),
            ],
        )
        .await;
    let overlay = env
        .fileset(
            "overlay",
            &[("b.txt", "mounted b\n"), ("c.txt", "mounted c\n")],
        )
        .await;
    let single = env
        .fileset(
            "single",
            &[("deep/settings.json", "{}\n"), ("unused.txt", "no")],
        )
        .await;
    let plan = StagePlan {
        base: Some(BlobRef {
            subpath: Some("project/".into()),
            ..base
        }),
        mounts: vec![
            MountRef {
                blob: overlay,
                mount_path: "conf".into(),
            },
            MountRef {
                blob: BlobRef {
                    subpath: Some("deep/settings.json".into()),
                    ..single
                },
                mount_path: "conf/settings.json".into(),
            },
        ],
    };
    let inv = env.invocation(
        "00000000-0000-0000-0000-000000000006",
        "true",
        Duration::from_secs(30),
    );
    let summary = env.run(&inv, &plan, CancellationToken::new()).await;
    assert_eq!(summary.state, RunState::Succeeded, "{summary:?}");
    assert_eq!(
        env.tree(&inv, ResultName::InputWorkdir).await,
        map(&[
            ("a.txt", "base a\n"),
            ("conf/b.txt", "mounted b\n"),
            ("conf/c.txt", "mounted c\n"),
            ("conf/settings.json", "{}\n"),
        ])
    );
}

#[tokio::test]
async fn a_hostile_fileset_fails_staging_and_the_agent_never_runs() {
    let env = Env::new();
    // A tarball whose only entry climbs out of the working directory.
    let mut header = tar::Header::new_gnu();
    header.as_old_mut().name[..14].copy_from_slice(b"../escaped.txt");
    header.set_size(5);
    header.set_mode(0o644);
    header.set_cksum();
    let mut tar = header.as_bytes().to_vec();
    tar.extend_from_slice(b"pwned");
    tar.resize(1024 + 1024, 0);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &tar).unwrap();
    let blob = gz.finish().unwrap();
    let digest = hex::encode(Sha256::digest(&blob));
    let key = keys::fileset(NAMESPACE, &digest).unwrap();
    env.store
        .put_new(
            &key,
            Box::pin(futures::stream::once(async { Ok(Bytes::from(blob)) })),
        )
        .await
        .unwrap();

    let plan = StagePlan {
        base: Some(BlobRef {
            fileset: "hostile".into(),
            key,
            sha256: digest,
            subpath: None,
        }),
        mounts: vec![],
    };
    let inv = env.invocation(
        "00000000-0000-0000-0000-000000000007",
        "touch ran.txt",
        Duration::from_secs(30),
    );
    let summary = env.run(&inv, &plan, CancellationToken::new()).await;

    assert_eq!(summary.state, RunState::StageFailed);
    let error = summary.error.clone().unwrap();
    assert!(
        error.contains("../escaped.txt") && error.contains("'..'"),
        "{error}"
    );
    assert!(!inv.workdir.join("ran.txt").exists());
    assert!(!inv.workdir.parent().unwrap().join("escaped.txt").exists());
    let names = env.assert_manifest_matches(&inv, &summary).await;
    assert_eq!(names, ["run_error"]);
    let record = env.json(&inv, ResultName::RunError).await;
    assert_eq!(record["type"], "StageFailed");
}

#[tokio::test]
async fn a_command_that_cannot_start_is_recorded() {
    let env = Env::new();
    let mut inv = env.invocation(
        "00000000-0000-0000-0000-000000000008",
        "",
        Duration::from_secs(30),
    );
    inv.command = vec!["/nonexistent/agent".into()];
    let summary = env
        .run(&inv, &StagePlan::default(), CancellationToken::new())
        .await;
    assert_eq!(summary.state, RunState::StartFailed);
    assert!(
        summary
            .error
            .as_deref()
            .unwrap()
            .contains("/nonexistent/agent"),
        "{summary:?}"
    );
    let record = env.json(&inv, ResultName::RunError).await;
    assert_eq!(record["type"], "StartFailed");
    let names = env.assert_manifest_matches(&inv, &summary).await;
    assert_eq!(names, INTERRUPTED_RUN_RESULTS[..4]);
}

#[tokio::test]
async fn leftover_background_processes_do_not_hold_the_run() {
    let env = Env::new();
    // One child stays in the agent's process group; one escapes it with setsid but keeps
    // stdout open. Neither may keep the run from ending.
    let script = "sleep 30 & setsid sh -c 'touch escaped; sleep 5' & \
                  while [ ! -e escaped ]; do sleep 0.01; done; echo done";
    let mut inv = env.invocation(
        "00000000-0000-0000-0000-000000000009",
        script,
        Duration::from_secs(30),
    );
    inv.grace = Duration::from_millis(300);
    let started = Instant::now();
    let summary = env
        .run(&inv, &StagePlan::default(), CancellationToken::new())
        .await;
    assert_eq!(summary.state, RunState::Succeeded, "{summary:?}");
    assert_eq!(summary.response.as_deref(), Some("done"));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
}

/// A source that hands out byte streams, as remote stores and signed URLs do.
struct Streaming(Store);

impl BlobSource for Streaming {
    async fn open(&self, key: &str) -> Result<BlobBody, StoreError> {
        Ok(BlobBody::Stream(self.0.get(key).await?.into_stream()))
    }
}

#[tokio::test]
async fn staging_from_a_streaming_source() {
    let env = Env::new();
    let big: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
    let base = env
        .fileset("base", &[("big.txt", big.as_str()), ("small.txt", "s")])
        .await;
    let plan = StagePlan {
        base: Some(base),
        mounts: vec![],
    };
    let inv = env.invocation(
        "00000000-0000-0000-0000-000000000010",
        "wc -l < big.txt",
        Duration::from_secs(30),
    );
    let sink = StoreResults::new(env.store.clone(), inv.execution.clone()).unwrap();
    let summary = execute(
        &inv,
        &plan,
        &Streaming(env.store.clone()),
        &sink,
        &StageSettings::default(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(summary.state, RunState::Succeeded, "{summary:?}");
    assert_eq!(summary.response.as_deref(), Some("200000"));
}

/// A sink that refuses one result, as a full disk or a revoked URL would.
struct Refusing {
    inner: StoreResults,
    refuse: ResultName,
}

impl ResultSink for Refusing {
    async fn put(&self, name: ResultName, body: ResultBody) -> Result<StoredObject, StoreError> {
        if name == self.refuse {
            return Err(StoreError::AlreadyExists {
                key: format!("refused/{name}"),
            });
        }
        self.inner.put(name, body).await
    }
}

#[tokio::test]
async fn a_failed_upload_does_not_stop_the_other_results() {
    let env = Env::new();
    let inv = env.invocation(
        "00000000-0000-0000-0000-000000000011",
        "echo 96",
        Duration::from_secs(30),
    );
    let sink = Refusing {
        inner: StoreResults::new(env.store.clone(), inv.execution.clone()).unwrap(),
        refuse: ResultName::OutputWorkdir,
    };
    let summary = execute(
        &inv,
        &StagePlan::default(),
        &env.store,
        &sink,
        &StageSettings::default(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(summary.state, RunState::Succeeded);
    let error = summary.results_error.clone().unwrap();
    assert!(error.starts_with("output_workdir: "), "{error}");
    let names = env.assert_manifest_matches(&inv, &summary).await;
    assert_eq!(names, ["input_workdir", "output_artifacts", "run_result"]);
}
