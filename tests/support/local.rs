//! errand on the local backend for one test: an isolated home, the real binary run in it, and its one JSON answer; deployments in it undeployed when the test ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

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

/// A local home whose deployments are undeployed when the test ends, passed or not.
pub struct Deployed {
    /// The home the deployments live in.
    pub home: Home,
    names: Vec<&'static str>,
}

impl Deployed {
    /// A new home that will hold deployments `names`.
    pub fn new(names: &[&'static str]) -> Self {
        Self::in_home(Home::new(), names)
    }

    /// `home`, which will hold deployments `names`.
    pub fn in_home(home: Home, names: &[&'static str]) -> Self {
        Self {
            home,
            names: names.to_vec(),
        }
    }

    /// Applies `object`, written to `file` in the home.
    pub fn apply(&self, file: &str, object: &Value) {
        let path = self.home.write(file, &object.to_string());
        let (code, answer) = self.home.json(&["apply", "-f", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{answer}");
    }

    /// `errand ARGS --local -o json`.
    pub fn json(&self, args: &[&str]) -> (i32, Value) {
        let mut all = args.to_vec();
        all.push("--local");
        self.home.json(&all)
    }

    /// `deployments get NAME` until `holds` or `within` passes.
    pub fn until(&self, name: &str, within: Duration, holds: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let (code, answer) = self.json(&["deployments", "get", name]);
            assert_eq!(code, 0, "{answer}");
            if holds(&answer["deployment"]) {
                return answer["deployment"].clone();
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not get there within {within:?}: {answer}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Deployed {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = self.home.run(&["undeploy", name, "--local"]);
        }
    }
}

/// `POST path` to an agent server at `address` (`http://127.0.0.1:PORT`), as curl would;
/// the whole response.
pub fn post(address: &str, path: &str, body: &str) -> String {
    exchange(
        address,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            address.trim_start_matches("http://"),
            body.len()
        ),
    )
}

/// Sends `request` as it is to the server at `address` (`http://127.0.0.1:PORT`); the whole
/// response.
pub fn exchange(address: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address.trim_start_matches("http://")).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}
