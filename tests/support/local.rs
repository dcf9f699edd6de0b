//! errand on the local backend for one test: an isolated home, the real binary run in it, and its one JSON answer.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// How a run's stdout is closed.
#[derive(Clone, Copy, Debug)]
pub enum Closed {
    /// A pipe whose reader is gone before anything is written (`errand … | head -c 0`).
    Reader,
    /// No stdout at all (`errand … >&-`).
    Descriptor,
}

/// An isolated errand home (catalog, records, store) for one test.
pub struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    /// A home in a new temporary directory, removed when dropped.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A new home holding a copy of this one's data (records, catalog, store), for a test that
    /// runs the same command on the same state several times.
    pub fn copy(&self) -> Self {
        let copy = Self::new();
        let output = Command::new("cp")
            .arg("-a")
            .arg(self.path().join("home"))
            .arg(copy.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "cp -a of the home failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        // Records name their store by its absolute URL: point the copies at the copy's store.
        let (from, to) = (self.path().join("home"), copy.path().join("home"));
        let (from, to) = (from.to_str().unwrap(), to.to_str().unwrap());
        let mut pending = vec![to.into()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir::<PathBuf>(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                } else if path.file_name().is_some_and(|n| n == "record.json") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    std::fs::write(&path, text.replace(from, to)).unwrap();
                }
            }
        }
        copy
    }

    /// The temporary directory; the errand home is its `home/`.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `errand ARGS` on the local backend with this home, run in its directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_errand"));
        command.args(args);
        self.in_home(command)
    }

    /// `errand ARGS` run by `sh -c SCRIPT` (`"$@"` is the errand command line), in this home:
    /// for what only a shell sets up, such as a closed stdout (`exec "$@" >&-`).
    pub fn shell(&self, script: &str, args: &[&str]) -> Command {
        let mut command = Command::new("sh");
        command
            .args(["-c", script, "sh", env!("CARGO_BIN_EXE_errand")])
            .args(args);
        self.in_home(command)
    }

    /// `command` with this home's environment and directory.
    fn in_home(&self, mut command: Command) -> Command {
        command
            .env("ERRAND_HOME", self.path().join("home"))
            .env("ERRAND_BACKEND", "local")
            .env_remove("ERRAND_STORE")
            .env_remove("ERRAND_NAMESPACE")
            .current_dir(self.path());
        command
    }

    /// Runs `errand ARGS` with its stdout closed (`closed`) and no stdin; returns the exit code
    /// and stderr.
    pub fn run_with_stdout_closed(&self, args: &[&str], closed: Closed) -> (i32, String) {
        use std::process::Stdio;
        let mut command = match closed {
            Closed::Reader => self.command(args),
            Closed::Descriptor => self.shell("exec \"$@\" >&-", args),
        };
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Runs `errand ARGS` to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs a command with `-o json` and returns (exit code, the one JSON object it printed).
    pub fn json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        super::errand::one_json_answer(args, &self.run(&all))
    }

    /// The bytes of result `result` of execution `job`, downloaded with `errand results download`.
    pub fn download(&self, result: &str, job: &str) -> Vec<u8> {
        let file = self.path().join(format!("dl-{job}-{result}"));
        let output = self.run(&[
            "results",
            "download",
            result,
            "--job",
            job,
            "--out",
            file.to_str().unwrap(),
        ]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::read(file).unwrap()
    }

    /// An Agent manifest file whose command is `sh -c SCRIPT`; returns its path.
    pub fn agent(&self, name: &str, script: &str) -> String {
        let manifest = serde_json::json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": name},
            "spec": {"runtime": {"image": "busybox", "command": ["sh", "-c", script]},
                     "config": {"config_format": "agents-spec-v1", "name": name}}
        });
        self.write(&format!("{name}.json"), &manifest.to_string())
            .display()
            .to_string()
    }

    /// Writes `text` to `name` in the directory (parents created); returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
}
