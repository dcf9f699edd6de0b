//! A real S3 protocol server on loopback for the presigned-URL tests: `s3s-fs` (from
//! crates.io, which `hack/test.sh` installs with [`INSTALL`]), an S3 server over a local
//! directory, started on a free port with credentials and stopped when dropped.
//!
//! s3s-fs checks every request's SigV4 signature, presigned URLs included (their expiry, and
//! the method, path, query and host they were signed for), and honours `If-None-Match: *` on
//! PUT with 412. A missing `s3s-fs` skips the test loudly, unless `CI` or
//! `ERRAND_CLUSTER_TESTS` is set, which makes it a failure.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The bucket the server holds.
pub const BUCKET: &str = "errand-test";
/// The region the clients sign for.
pub const REGION: &str = "us-east-1";
const ACCESS_KEY: &str = "errand-test";
const SECRET_KEY: &str = "errand-test-secret";

/// How to install the server. Later s3s-fs releases need a newer rustc than 1.95.
pub const INSTALL: &str = "cargo install s3s-fs --version 0.14.1 --locked --features binary";

/// How long the server may take to answer after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running S3 server with [`BUCKET`] in it.
pub struct S3Server {
    child: Child,
    /// `http://<host>:<port>`
    pub endpoint: String,
    data: tempfile::TempDir,
}

impl S3Server {
    /// The directory that holds [`BUCKET`]'s objects, one file per key.
    pub fn bucket_dir(&self) -> std::path::PathBuf {
        self.data.path().join(BUCKET)
    }

    /// object_store options that reach this server with its credentials.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_endpoint", self.endpoint.clone()),
            ("aws_allow_http", "true".to_owned()),
            ("aws_region", REGION.to_owned()),
            ("aws_access_key_id", ACCESS_KEY.to_owned()),
            ("aws_secret_access_key", SECRET_KEY.to_owned()),
            ("aws_virtual_hosted_style_request", "false".to_owned()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a missing server must fail the test rather than skip it.
fn required() -> bool {
    ["CI", "ERRAND_CLUSTER_TESTS"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// s3s-fs with [`BUCKET`] in it on loopback; `None` (after a loud line) when `s3s-fs` is not
/// installed and no run requires it.
pub async fn server() -> Option<S3Server> {
    server_on("127.0.0.1").await
}

/// s3s-fs with [`BUCKET`] in it, listening on `host` (the pod gateway, for a server pods
/// reach); `None` as for [`server`].
pub async fn server_on(host: &str) -> Option<S3Server> {
    let data = tempfile::tempdir().unwrap();
    // s3s-fs keeps each bucket as a directory of its root.
    std::fs::create_dir(data.path().join(BUCKET)).unwrap();
    let port = super::ports::free_address(host.parse().expect("an IP address")).port();
    let mut command = Command::new("s3s-fs");
    command
        .args(["--host", host, "--port", &port.to_string()])
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
        .arg(data.path());
    let mut server = start(command, host, port, data)?;
    wait_until_up(&mut server).await;
    Some(server)
}

/// The credentials the server accepts: access key id and secret key.
pub fn credentials() -> (&'static str, &'static str) {
    (ACCESS_KEY, SECRET_KEY)
}

fn start(mut command: Command, host: &str, port: u16, data: tempfile::TempDir) -> Option<S3Server> {
    match command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => Some(S3Server {
            child,
            endpoint: format!("http://{host}:{port}"),
            data,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required() => {
            // Straight to stderr: the harness captures the macros' output of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "!!!!!!!! SKIPPING S3 TEST: s3s-fs is not on PATH (install it with `{INSTALL}`; \
                 hack/test.sh does). Set CI or ERRAND_CLUSTER_TESTS to make this a failure. !!!!!!!!"
            );
            None
        }
        Err(e) => panic!("starting s3s-fs (install it with `{INSTALL}`): {e}"),
    }
}

/// Waits for any HTTP answer (an unsigned request gets 403).
async fn wait_until_up(server: &mut S3Server) {
    let started = Instant::now();
    let client = reqwest::Client::new();
    loop {
        if client.get(&server.endpoint).send().await.is_ok() {
            return;
        }
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!("s3s-fs exited before answering: {status}");
        }
        assert!(
            started.elapsed() < START_TIMEOUT,
            "the S3 server at {} did not answer within {START_TIMEOUT:?}",
            server.endpoint
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
