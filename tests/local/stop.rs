//! Stop means stop, and staging's other promises, on the local backend with the real binary: SIGTERM, `cancel` and `delete` arriving while a run stages, runs or uploads leave no process behind and nothing growing on disk; the staging budget, extraction limits, pinned digests, push refusals, skipped special files and missing subpaths.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use errand::api::FilesetStatus;
use errand::local::{DataDir, LocalCatalog};
use errand::store::{Store, keys};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::archives::zeros_archive;

/// The longest a stop may take, from the signal or command to the process being gone.
const STOP_WITHIN: Duration = Duration::from_secs(2);

/// An isolated errand home for one test.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn home(&self) -> PathBuf {
        self.path().join("home")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_errand"));
        command
            .args(args)
            .env("ERRAND_HOME", self.home())
            .env("ERRAND_BACKEND", "local")
            .env_remove("ERRAND_STORE")
            .env_remove("ERRAND_NAMESPACE")
            .current_dir(self.path());
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs with `-o json`: (exit code, the JSON object printed, stderr).
    fn json(&self, args: &[&str]) -> (i32, Value, String) {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let output = self.run(&all);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {stderr}"));
        (output.status.code().unwrap(), value, stderr)
    }

    /// `filesets push NAME DIR -o json`.
    fn push(&self, name: &str, dir: &Path) -> (i32, Value, String) {
        self.json(&["filesets", "push", name, dir.to_str().unwrap()])
    }

    /// An Agent manifest file whose command is `sh -c SCRIPT`.
    fn agent(&self, name: &str, script: &str) -> String {
        let manifest = json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": name},
            "spec": {"runtime": {"image": "busybox", "command": ["sh", "-c", script]},
                     "config": {"config_format": "agents-spec-v1", "name": name}}
        });
        let path = self.path().join(format!("{name}.json"));
        std::fs::write(&path, manifest.to_string()).unwrap();
        path.display().to_string()
    }

    fn store(&self) -> Store {
        Store::open(&format!("file://{}", self.home().join("store").display())).unwrap()
    }

    /// Stores `blob` as the content of Fileset `name`, as a push would record it.
    async fn fileset_blob(&self, name: &str, blob: Vec<u8>) {
        let digest = hex::encode(Sha256::digest(&blob));
        let key = keys::fileset("default", &digest).unwrap();
        let body = futures::stream::once(async move { Ok(bytes::Bytes::from(blob)) });
        self.store().put_new(&key, Box::pin(body)).await.unwrap();
        let status = FilesetStatus {
            digest: Some(format!("sha256:{digest}")),
            ..FilesetStatus::default()
        };
        LocalCatalog::new(DataDir::new(self.home()))
            .set_fileset("default", name, &status)
            .unwrap();
    }

    /// Fileset `name`: one file `big.bin` of `gib` GiB of zeros, a few MiB gzipped, which
    /// takes many seconds to stage.
    async fn slow_fileset(&self, name: &str, gib: u64) {
        self.fileset_blob(name, zeros_archive(&[], "big.bin", gib << 30))
            .await;
    }

    /// The directory of the only execution.
    fn execution_dir(&self) -> Option<PathBuf> {
        let dir = self.home().join("executions/default");
        std::fs::read_dir(dir).ok()?.next()?.ok().map(|e| e.path())
    }

    /// Waits until the only execution's workspace holds at least 64 MiB of `big.bin`.
    fn wait_for_staging(&self) -> PathBuf {
        wait_for("staging to start", || {
            let file = self.execution_dir()?.join("workspace/big.bin");
            let size = std::fs::metadata(&file).ok()?.len();
            (size >= 64 << 20).then_some(file)
        })
    }

    /// Bytes of every file under the home, links not followed.
    fn disk_bytes(&self) -> u64 {
        fn walk(dir: &Path) -> u64 {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => walk(&e.path()),
                    Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                    _ => 0,
                })
                .sum()
        }
        walk(&self.home())
    }

    /// Asserts that nothing under the home grows any more.
    fn assert_nothing_grows(&self) {
        let before = self.disk_bytes();
        std::thread::sleep(Duration::from_millis(700));
        assert_eq!(self.disk_bytes(), before, "something still writes");
    }
}

fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "waited a minute for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still runs (a zombie has stopped).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// Waits (up to a minute) until `pid` is gone.
fn gone(pid: i32) {
    wait_for("the process to exit", || (!alive(pid)).then_some(()));
}

fn sigterm(pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

/// The execution record in an answer, whether the run ended well (`execution`) or not
/// (`error.execution`).
fn execution(answer: &Value) -> &Value {
    if answer["execution"].is_null() {
        &answer["error"]["execution"]
    } else {
        &answer["execution"]
    }
}

/// `execute --no-wait`; returns the execution's name and its supervisor's pid.
fn start_detached(home: &Home, args: &[&str]) -> (String, i32) {
    let mut all = vec!["execute", "--local", "--input", "x", "--no-wait"];
    all.extend_from_slice(args);
    let (code, answer, stderr) = home.json(&all);
    assert_eq!(code, 0, "{answer} {stderr}");
    let name = answer["execution"]["name"].as_str().unwrap().to_owned();
    // `--no-wait` answers once the supervisor has recorded itself.
    let pid = answer["execution"]["supervisor"]["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("the supervisor is recorded: {answer}")) as i32;
    (name, pid)
}

/// A foreground `execute`, its output piped.
fn start_foreground(home: &Home, args: &[&str]) -> Child {
    let mut all = vec!["execute", "--local", "--input", "x", "-o", "json"];
    all.extend_from_slice(args);
    home.command(&all)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The moments a stop is tried at.
#[derive(Debug, Clone, Copy)]
enum Moment {
    Staging,
    Running,
    Uploading,
}

/// The agent and base workdir for a run that is at `moment` once [`reach`] returns.
fn scenario(home: &Home, moment: Moment) -> Vec<String> {
    let pid_file = home.path().join("agent.pid");
    let script = match moment {
        Moment::Staging => "true".to_owned(),
        Moment::Running => format!("echo $$ > {}; exec sleep 300", pid_file.display()),
        // A 3 GiB sparse file takes many seconds to pack, and nothing to write.
        Moment::Uploading => format!("truncate -s 3G big.bin; echo $$ > {}", pid_file.display()),
    };
    let mut args = vec!["--agent".to_owned(), home.agent("stopper", &script)];
    if let Moment::Staging = moment {
        args.extend(["--workdir.base-workdir".to_owned(), "big".to_owned()]);
    }
    args
}

/// Waits until the run is at `moment`.
fn reach(home: &Home, moment: Moment) {
    match moment {
        Moment::Staging => {
            home.wait_for_staging();
        }
        Moment::Running => {
            let pid = wait_for("the agent to start", || {
                std::fs::read_to_string(home.path().join("agent.pid"))
                    .ok()?
                    .trim()
                    .parse::<i32>()
                    .ok()
            });
            assert!(alive(pid));
        }
        Moment::Uploading => {
            // The agent has written its pid and ended; packing its workdir takes seconds.
            wait_for("the agent to end", || {
                let pid: i32 = std::fs::read_to_string(home.path().join("agent.pid"))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()?;
                (!alive(pid)).then_some(())
            });
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// The agent of the scenario, if it ever started, is gone.
fn assert_agent_gone(home: &Home) {
    if let Ok(pid) = std::fs::read_to_string(home.path().join("agent.pid")) {
        let pid: i32 = pid.trim().parse().unwrap();
        gone(pid);
    }
}

async fn prepared(moment: Moment) -> (Home, Vec<String>) {
    let home = Home::new();
    if let Moment::Staging = moment {
        home.slow_fileset("big", 4).await;
    }
    let args = scenario(&home, moment);
    (home, args)
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// How a run is stopped.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// SIGTERM to a foreground `execute`.
    Sigterm,
    /// `errand cancel` of a background run.
    Cancel,
    /// `errand delete` of a background run.
    Delete,
}

/// Starts a run, stops it `how` at each moment, and checks that the process is gone within
/// [`STOP_WITHIN`] (while staging or uploading; a running agent gets its grace), that the run
/// is Cancelled (or gone, after delete), and that nothing is left running or growing.
async fn stop_at_every_moment(how: Stop) {
    for moment in [Moment::Staging, Moment::Running, Moment::Uploading] {
        let (home, args) = prepared(moment).await;
        let (latency, answer) = match how {
            Stop::Sigterm => {
                let child = start_foreground(&home, &refs(&args));
                let pid = child.id();
                reach(&home, moment);
                let signalled = Instant::now();
                sigterm(pid);
                let output = child.wait_with_output().unwrap();
                let latency = signalled.elapsed();
                let answer: Value = serde_json::from_slice(&output.stdout)
                    .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
                (latency, answer)
            }
            Stop::Cancel | Stop::Delete => {
                let (name, supervisor) = start_detached(&home, &refs(&args));
                reach(&home, moment);
                let command = if let Stop::Cancel = how {
                    "cancel"
                } else {
                    "delete"
                };
                let asked = Instant::now();
                let (code, answer, stderr) = home.json(&[command, &name]);
                let answered = Instant::now();
                assert_eq!(code, 0, "{answer} {stderr}");
                assert!(
                    !alive(supervisor),
                    "{how:?} {moment:?}: the supervisor outlived {command}"
                );
                (answered - asked, answer)
            }
        };
        println!(
            "{how:?} during {moment:?}: the process was gone {latency:?} after the stop was asked for"
        );
        if let Moment::Staging | Moment::Uploading = moment {
            assert!(latency <= STOP_WITHIN, "{how:?} {moment:?}: {latency:?}");
        }
        if let Stop::Delete = how {
            assert!(
                home.execution_dir().is_none(),
                "{moment:?}: the record stays"
            );
            let left = walkdir(&home.home().join("store/results"));
            assert!(left.is_empty(), "{moment:?}: left in the store: {left:?}");
        } else {
            assert_eq!(
                execution(&answer)["phase"],
                "Cancelled",
                "{how:?} {moment:?}: {answer}"
            );
        }
        assert_agent_gone(&home);
        home.assert_nothing_grows();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_a_foreground_run_at_every_moment() {
    stop_at_every_moment(Stop::Sigterm).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_stops_a_background_run_at_every_moment() {
    stop_at_every_moment(Stop::Cancel).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_stops_a_background_run_at_every_moment_and_leaves_nothing() {
    stop_at_every_moment(Stop::Delete).await;
}

/// Every file under `dir`.
fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walkdir(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn the_staging_budget_bounds_staging() {
    let home = Home::new();
    home.slow_fileset("big", 4).await;
    let agent = home.agent("never", "touch ran.txt");
    let started = Instant::now();
    let (code, answer, _) = home.json(&[
        "execute",
        "--local",
        "--input",
        "x",
        "--agent",
        &agent,
        "--workdir.base-workdir",
        "big",
        "--staging-budget-seconds",
        "1",
    ]);
    let took = started.elapsed();
    assert_eq!(code, 1, "{answer}");
    let execution = execution(&answer);
    assert_eq!(
        (execution["phase"].as_str(), execution["reason"].as_str()),
        (Some("Failed"), Some("StageFailed"))
    );
    let message = execution["message"].as_str().unwrap();
    assert!(
        message.contains("staging did not finish within its budget of 1s"),
        "{message}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(
        !home
            .execution_dir()
            .unwrap()
            .join("workspace/ran.txt")
            .exists()
    );
    home.assert_nothing_grows();
}

#[tokio::test(flavor = "multi_thread")]
async fn extraction_limits_are_flags_and_refusals_name_the_fileset() {
    let home = Home::new();
    home.slow_fileset("big", 1).await;
    let agent = home.agent("never", "touch ran.txt");
    let (code, answer, _) = home.json(&[
        "execute",
        "--local",
        "--input",
        "x",
        "--agent",
        &agent,
        "--workdir.base-workdir",
        "big",
        "--max-extract-bytes",
        "1048576",
    ]);
    assert_eq!(code, 1, "{answer}");
    let message = execution(&answer)["message"].as_str().unwrap();
    assert!(
        message.contains("Fileset \"big\"")
            && message.contains("1048576 bytes of extracted content")
            && message.contains("0 entries and 0 bytes had been extracted")
            && !message.contains("filesets/default"),
        "{message}"
    );
    assert_eq!(execution(&answer)["reason"], "StageFailed");

    // A limit or budget of zero is refused before anything starts, naming the flag.
    for flag in [
        "--max-extract-bytes",
        "--max-extract-entries",
        "--staging-budget-seconds",
    ] {
        let output = home.run(&[
            "execute", "--local", "--input", "x", "--agent", &agent, flag, "0",
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag}: {stderr}");
        assert!(stderr.contains(flag), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blob_changed_after_its_push_fails_staging_naming_both_digests() {
    let home = Home::new();
    for (name, text) in [("data", "original\n"), ("other", "swapped in\n")] {
        let dir = home.path().join(format!("tree-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("file.txt"), text).unwrap();
        let (code, answer, _) = home.push(name, &dir);
        assert_eq!(code, 0, "{answer}");
    }
    let digest = |name: &str| {
        let (_, answer, _) = home.json(&["filesets", "list"]);
        let list = answer["filesets"].as_array().unwrap().clone();
        let fileset = list.iter().find(|f| f["metadata"]["name"] == name).unwrap();
        fileset["status"]["digest"]
            .as_str()
            .unwrap()
            .trim_start_matches("sha256:")
            .to_owned()
    };
    let (pinned, swapped) = (digest("data"), digest("other"));
    let blob = |digest: &str| {
        home.home()
            .join(format!("store/filesets/default/{digest}.tar.gz"))
    };
    std::fs::copy(blob(&swapped), blob(&pinned)).unwrap();

    let agent = home.agent("reader", "cat file.txt");
    let (code, answer, _) = home.json(&[
        "execute",
        "--local",
        "--input",
        "x",
        "--agent",
        &agent,
        "--workdir.base-workdir",
        "data",
    ]);
    assert_eq!(code, 1, "{answer}");
    assert_eq!(execution(&answer)["reason"], "StageFailed");
    let message = execution(&answer)["message"].as_str().unwrap();
    assert!(
        message.contains("Fileset \"data\"")
            && message.contains(&format!("sha256:{pinned}"))
            && message.contains(&format!("sha256:{swapped}")),
        "{message}"
    );
}

#[test]
fn push_refuses_what_staging_would_refuse_and_uploads_nothing() {
    let home = Home::new();
    let dir = home.path().join("venv");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::write(dir.join("bin/activate"), "# venv\n").unwrap();
    std::os::unix::fs::symlink("/usr/bin/python3", dir.join("bin/python")).unwrap();
    let (code, answer, _) = home.push("venv", &dir);
    assert_ne!(code, 0, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("bin/python")
            && message.contains("/usr/bin/python3 is absolute")
            && message.contains("staging would refuse it"),
        "{message}"
    );
    let stored = walkdir(&home.home().join("store"));
    assert!(stored.is_empty(), "{stored:?}");

    // A chain of links that each stay inside but together lead out is refused too.
    let dir = home.path().join("chain");
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::os::unix::fs::symlink("..", dir.join("a/up")).unwrap();
    std::os::unix::fs::symlink("up/..", dir.join("a/out")).unwrap();
    let (code, answer, _) = home.push("chain", &dir);
    assert_ne!(code, 0, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("a/out") && message.contains("resolves outside"),
        "{message}"
    );
    let stored = walkdir(&home.home().join("store"));
    assert!(stored.is_empty(), "{stored:?}");
}

#[test]
fn skipped_special_files_are_warned_about_and_listed_in_the_manifest() {
    let home = Home::new();
    let agent = home.agent("fifo-maker", "mkfifo pipe; echo kept > kept.txt");
    let output = home.run(&[
        "execute", "--local", "--input", "x", "--agent", &agent, "-o", "json",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        answer["execution"]["phase"], "Succeeded",
        "{answer} {stderr}"
    );
    assert!(
        stderr.contains(
            "warning: output_workdir left out pipe: a fifo (named pipe) cannot be packed"
        ),
        "{stderr}"
    );
    let name = answer["execution"]["name"].as_str().unwrap();
    let file = home.path().join("manifest.json");
    let output = home.run(&[
        "results",
        "download",
        "manifest.json",
        "--execution",
        name,
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(output.status.success());
    let manifest: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    assert_eq!(
        manifest["skipped"],
        json!([{"result": "output_workdir", "path": "pipe", "reason": "a fifo (named pipe) cannot be packed"}])
    );

    // A push stores the whole tree or nothing: it refuses the fifo instead of leaving it out.
    let dir = home.path().join("with-fifo");
    std::fs::create_dir_all(&dir).unwrap();
    let made = Command::new("mkfifo")
        .arg(dir.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let (code, answer, _) = home.push("withfifo", &dir);
    assert_eq!(code, 2, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_argument", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("pipe: a fifo") && message.contains("nothing was stored"),
        "{message}"
    );
}

#[test]
fn a_subpath_missing_from_its_fileset_is_refused_at_admission() {
    let home = Home::new();
    let dir = home.path().join("data");
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::write(dir.join("docs/a.md"), "a\n").unwrap();
    let (code, answer, _) = home.push("data", &dir);
    assert_eq!(code, 0, "{answer}");
    let agent = home.agent("reader", "ls -R");
    let spec = json!({"workdir": {
        "base": "data#nope/",
        "artifactMounts": [
            {"ref": "data#docs/", "mountPath": "docs"},
            {"ref": "data#no-such-dir/", "mountPath": "more"},
        ],
    }});
    let (code, answer, _) = home.json(&[
        "execute",
        "--local",
        "--input",
        "x",
        "--agent",
        &agent,
        "--spec",
        &spec.to_string(),
    ]);
    assert_eq!(
        (code, answer["error"]["code"].as_str()),
        (2, Some("invalid_spec")),
        "{answer}"
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.workdir.base: Fileset \"data\" has no path \"nope/\"")
            && message.contains(
                "spec.workdir.artifactMounts[1].ref: Fileset \"data\" has no path \"no-such-dir/\""
            )
            && !message.contains("artifactMounts[0]"),
        "{message}"
    );
    assert!(home.execution_dir().is_none(), "nothing was created");
}
