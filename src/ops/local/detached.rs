//! Starting the detached supervisor of one local object (`errand __serve-deployment NAME`, `errand __serve-schedule NAME`): a process of its own group, its output in a log, waited for until it records itself.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::Local;
use crate::ops::{Error, ErrorCode};

/// How long a new supervisor may take to record itself.
const SUPERVISOR_START: Duration = Duration::from_secs(10);
/// How often the start is looked at.
const POLL: Duration = Duration::from_millis(100);

/// Runs `errand <command> --namespace NS <name>` detached, appending its output to `log_path`,
/// and returns once `recorded(pid)` says it wrote itself down; an error when it ends first or
/// takes longer than [`SUPERVISOR_START`].
pub fn start_supervisor(
    local: &Local,
    command: &str,
    name: &str,
    log_path: &Path,
    recorded: impl Fn(u32) -> bool,
) -> Result<(), Error> {
    let io = |e: std::io::Error| {
        Error::new(
            ErrorCode::IoError,
            format!("starting the supervisor of {name:?}: {e}"),
        )
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(io)?;
    let exe = std::env::current_exe().map_err(io)?;
    let mut child = std::process::Command::new(exe)
        .args([command, "--namespace", &local.namespace, name])
        .env("ERRAND_HOME", local.data.root())
        .env("ERRAND_STORE", &local.store_url)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(io)?)
        .stderr(log)
        // Its own process group: a Ctrl-C in this terminal does not reach it.
        .process_group(0)
        .spawn()
        .map_err(io)?;
    let deadline = Instant::now() + SUPERVISOR_START;
    loop {
        if recorded(child.id()) {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::new(
                ErrorCode::IoError,
                format!(
                    "the supervisor of {name:?} ended at once ({status}); see {}",
                    log_path.display()
                ),
            ));
        }
        if Instant::now() > deadline {
            return Err(Error::new(
                ErrorCode::IoError,
                format!(
                    "the supervisor of {name:?} did not start within {}s; see {}",
                    SUPERVISOR_START.as_secs(),
                    log_path.display()
                ),
            ));
        }
        std::thread::sleep(POLL);
    }
}
