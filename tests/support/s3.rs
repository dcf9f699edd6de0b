//! A real S3 protocol server on loopback for the presigned-URL tests: moto (`moto_server`,
//! from PyPI, which `hack/test.sh` installs), started on a free port and stopped when dropped.
//!
//! moto speaks S3 (path-style addressing, `If-None-Match: *` on PUT) but does not check
//! presigned URLs at all: a tampered signature, another key's path or an expired URL all
//! pass (moto 5.2.1). So tests here prove what a URL reaches and carries, not that the server
//! refuses a forged one. A missing `moto_server` skips the test loudly, unless `CI` or
//! `ERRAND_CLUSTER_TESTS` is set, which makes it a failure.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The bucket the server holds.
pub const BUCKET: &str = "errand-test";
/// The region the clients sign for.
pub const REGION: &str = "us-east-1";

/// How long the server may take to answer after it was started (moto imports a lot of Python).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running S3 server with [`BUCKET`] in it.
pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:<port>`
    pub endpoint: String,
    _data: tempfile::TempDir,
}

impl S3Server {
    /// object_store options that reach this server with its credentials.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_endpoint", self.endpoint.clone()),
            ("aws_allow_http", "true".to_owned()),
            ("aws_region", REGION.to_owned()),
            ("aws_access_key_id", "errand-test".to_owned()),
            ("aws_secret_access_key", "errand-test-secret".to_owned()),
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

/// moto's S3, with [`BUCKET`] created; `None` (after a loud line) when `moto_server` is not
/// installed and no run requires it.
pub async fn moto() -> Option<S3Server> {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    let command = {
        let mut c = Command::new("moto_server");
        c.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
        c
    };
    let server = start(command, port, data)?;
    wait_until_up(&server).await;
    // moto takes an unsigned CreateBucket.
    let created = reqwest::Client::new()
        .put(format!("{}/{BUCKET}", server.endpoint))
        .send()
        .await
        .unwrap();
    assert!(
        created.status().is_success(),
        "creating the bucket: {created:?}"
    );
    Some(server)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(mut command: Command, port: u16, data: tempfile::TempDir) -> Option<S3Server> {
    let install = "pip3 install 'moto[server]'";
    match command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => Some(S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            _data: data,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required() => {
            // Straight to stderr: the harness captures the macros' output of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "!!!!!!!! SKIPPING S3 TEST: moto_server is not on PATH (install it with `{install}`; \
                 hack/test.sh does). Set CI or ERRAND_CLUSTER_TESTS to make this a failure. !!!!!!!!"
            );
            None
        }
        Err(e) => panic!("starting moto_server (install it with `{install}`): {e}"),
    }
}

async fn wait_until_up(server: &S3Server) {
    let started = Instant::now();
    let client = reqwest::Client::new();
    loop {
        if client.get(&server.endpoint).send().await.is_ok() {
            return;
        }
        assert!(
            started.elapsed() < START_TIMEOUT,
            "the S3 server at {} did not answer within {START_TIMEOUT:?}",
            server.endpoint
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
