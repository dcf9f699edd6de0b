//! Running the agent command: its own process group, the runner's environment, stdout and
//! stderr teed to log files (and optionally to our own), and the deadline and cancellation
//! enforced on the whole group with SIGTERM, a grace period, then SIGKILL.

use std::fs::{self, File};
use std::io::{self, Read};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::control::{CONTROL_POLL, ControlFile, parse_signal};
use super::{Invocation, RunState};
use crate::api::contract::{
    ENV_AGENT_CONFIG_PATH, ENV_ARTIFACTS_DIR, ENV_INPUT, ENV_INPUT_FILE, ENV_RESPONSE_FILE,
};

/// How much of stdout is kept to serve as the response when no response file is written.
const STDOUT_TAIL: usize = 64 * 1024;
/// How much of stderr is kept for status messages.
const STDERR_TAIL: usize = 2 * 1024;
/// The largest response file read into the run record.
const RESPONSE_LIMIT: u64 = 1024 * 1024;
/// Linux refuses to exec with a single environment string over 128 KiB (MAX_ARG_STRLEN);
/// longer inputs are passed only through `ERRAND_INPUT_FILE`.
const MAX_ENV_INPUT: usize = 128 * 1024 - 64;
/// How long the log pipes are still read once no process of the agent's group runs (or after
/// the group was killed): what a process that left the group holds open is not waited for.
const OUTPUT_DRAIN: Duration = Duration::from_millis(500);

/// How the agent process ran and ended, before its results are saved.
pub(super) struct AgentRun {
    pub(super) state: RunState,
    pub(super) exit_code: Option<i32>,
    pub(super) error: Option<String>,
    pub(super) response: Option<String>,
    pub(super) started_at: Option<jiff::Timestamp>,
    pub(super) finished_at: Option<jiff::Timestamp>,
    pub(super) duration_ms: Option<u64>,
    pub(super) stderr_tail: String,
}

impl AgentRun {
    fn not_started(state: RunState, error: String) -> AgentRun {
        AgentRun {
            state,
            exit_code: None,
            error: Some(error),
            response: None,
            started_at: None,
            finished_at: None,
            duration_ms: None,
            stderr_tail: String::new(),
        }
    }
}

enum Ending {
    Exited,
    TimedOut,
    Cancelled,
    Killed,
}

/// Waits for the agent to exit, or stops it at its deadline (which the control file may move),
/// on a cancel, or at once on a kill; delivers the signals the control file asks for.
async fn watch_until_end(
    inv: &Invocation,
    child: &mut Child,
    group: Option<Pid>,
    started: Instant,
    cancel: &CancellationToken,
) -> (Ending, io::Result<ExitStatus>) {
    let own_deadline = started + inv.timeout;
    let mut control = inv
        .control
        .as_ref()
        .map(ControlFile::read)
        .unwrap_or_default();
    let mut deadline = control.deadline_instant(own_deadline);
    let mut signalled = 0;
    loop {
        for name in control.signals.iter().skip(signalled) {
            match parse_signal(name) {
                Ok(signal) => signal_group(group, signal),
                Err(e) => tracing::warn!("run control: {e}"),
            }
        }
        signalled = signalled.max(control.signals.len());
        if control.kill {
            mark_terminating(inv, "kill");
            return (
                Ending::Killed,
                terminate(child, group, Duration::ZERO).await,
            );
        }
        tokio::select! {
            status = child.wait() => {
                mark_terminating(inv, "exited");
                return (Ending::Exited, status);
            }
            () = tokio::time::sleep_until(deadline.into()) => {
                let Some(file) = &inv.control else {
                    return (Ending::TimedOut, terminate(child, group, inv.grace).await);
                };
                match file.begin_termination("deadline", true) {
                    Ok(()) => return (Ending::TimedOut, terminate(child, group, inv.grace).await),
                    Err(moved) => control = moved,
                }
            }
            () = cancel.cancelled() => {
                mark_terminating(inv, "cancel");
                // A kill asked for just before the stop signal (as `errand kill -s KILL` asks
                // for one, then stops the run) is a kill: no grace, and named so.
                if inv.control.as_ref().is_some_and(|f| f.read().kill) {
                    return (Ending::Killed, terminate(child, group, Duration::ZERO).await);
                }
                return (Ending::Cancelled, terminate(child, group, inv.grace).await);
            }
            () = tokio::time::sleep(CONTROL_POLL), if inv.control.is_some() => {
                control = inv.control.as_ref().map(ControlFile::read).unwrap_or_default();
            }
        }
        deadline = control.deadline_instant(own_deadline);
    }
}

/// Records in the control file that the agent is being stopped, so later changes are refused.
fn mark_terminating(inv: &Invocation, why: &str) {
    if let Some(file) = &inv.control {
        let _ = file.begin_termination(why, false);
    }
}

/// Runs the agent to its end, whatever that end is.
pub(super) async fn supervise(inv: &Invocation, cancel: &CancellationToken) -> AgentRun {
    let (stdout_log, stderr_log) = match prepare(inv) {
        Ok(logs) => logs,
        Err(e) => return AgentRun::not_started(RunState::StartFailed, e),
    };
    if cancel.is_cancelled() {
        return AgentRun::not_started(
            inv.stop.state(),
            inv.stop.message("before the agent started"),
        );
    }
    let Some((program, args)) = inv.command.split_first() else {
        return AgentRun::not_started(RunState::StartFailed, "the agent command is empty".into());
    };

    let scratch = &inv.scratch;
    let mut command = Command::new(program);
    if !inv.inherit_env {
        command.env_clear();
    }
    command
        .args(args)
        .current_dir(&inv.workdir)
        .envs(inv.env.iter().map(|(k, v)| (k, v)))
        .env(ENV_INPUT_FILE, scratch.input_file())
        .env(ENV_AGENT_CONFIG_PATH, &inv.agent_config_path)
        .env(ENV_ARTIFACTS_DIR, scratch.artifacts_dir())
        .env(ENV_RESPONSE_FILE, scratch.response_file())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so that the deadline reaches everything the agent started.
        .process_group(0)
        // Should this future be dropped, at least the agent itself does not outlive it.
        .kill_on_drop(true);
    if inv.input.len() <= MAX_ENV_INPUT {
        command.env(ENV_INPUT, &inv.input);
    } else {
        command.env_remove(ENV_INPUT);
    }

    match &inv.stdin {
        None => command.stdin(Stdio::null()),
        Some(path) => match std::fs::File::open(path) {
            Ok(file) => command.stdin(file),
            Err(e) => {
                return AgentRun::not_started(
                    RunState::StartFailed,
                    format!("opening the agent's standard input {}: {e}", path.display()),
                );
            }
        },
    };

    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return AgentRun::not_started(
                RunState::StartFailed,
                format!("starting the agent command {program:?}: {e}"),
            );
        }
    };
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    if let Some(group) = group {
        let file = scratch.agent_group_file();
        if let Err(e) = fs::write(&file, group.as_raw().to_string()) {
            tracing::warn!(path = %file.display(), error = %e, "recording the agent's process group");
        }
    }
    let stop_tee = CancellationToken::new();
    let stdout_tee = tokio::spawn(tee(
        child.stdout.take(),
        stdout_log,
        inv.passthrough.then(tokio::io::stdout),
        STDOUT_TAIL,
        stop_tee.clone(),
    ));
    let stderr_tee = tokio::spawn(tee(
        child.stderr.take(),
        stderr_log,
        inv.passthrough.then(tokio::io::stderr),
        STDERR_TAIL,
        stop_tee.clone(),
    ));

    let (ending, status) = watch_until_end(inv, &mut child, group, started, cancel).await;
    let finished_at = jiff::Timestamp::now();
    let duration = started.elapsed();

    // Whatever the agent left running in its group is stopped too, so that it neither holds the
    // log pipes open nor outlives the run (as it would not outlive a pod). It gets the grace
    // only while it runs: a pipe held by a process that left the group (`setsid`) is read
    // for a moment more, not for a grace no signal of ours can end.
    signal_group(group, Signal::SIGTERM);
    let tees = async { (stdout_tee.await, stderr_tee.await) };
    tokio::pin!(tees);
    let in_group = group.is_some_and(|g| group_running(g.as_raw()));
    let first_wait = if in_group { inv.grace } else { OUTPUT_DRAIN };
    let (stdout_tail, stderr_tail) = match tokio::time::timeout(first_wait, &mut tees).await {
        Ok(tails) => tails,
        Err(_) => {
            signal_group(group, Signal::SIGKILL);
            match tokio::time::timeout(OUTPUT_DRAIN, &mut tees).await {
                Ok(tails) => tails,
                Err(_) => {
                    // A process that left the group may still hold a pipe; stop reading.
                    stop_tee.cancel();
                    tees.await
                }
            }
        }
    };
    // Also those that ignored SIGTERM but had already closed their output.
    signal_group(group, Signal::SIGKILL);
    let stdout_tail = stdout_tail.unwrap_or_default();
    let stderr_tail = stderr_tail.unwrap_or_default();

    let exit_code = status.as_ref().ok().map(exit_code);
    let (state, error) = match (ending, &status) {
        (Ending::Exited, Ok(status)) if status.success() => (RunState::Succeeded, None),
        (Ending::Exited, Ok(_)) => (RunState::Failed, None),
        (Ending::Exited, Err(e)) => (
            RunState::Failed,
            Some(format!("waiting for the agent: {e}")),
        ),
        (Ending::TimedOut, _) => (
            RunState::TimedOut,
            Some(match inv.control.as_ref().and_then(|f| f.read().deadline) {
                Some(at) => {
                    format!("the agent did not finish by its changed deadline {at} and was stopped")
                }
                None => format!(
                    "the agent did not finish within {}s and was stopped",
                    inv.timeout.as_secs_f64()
                ),
            }),
        ),
        (Ending::Cancelled, _) => (
            inv.stop.state(),
            Some(inv.stop.message("and the agent was stopped")),
        ),
        (Ending::Killed, _) => (
            RunState::Cancelled,
            Some("the run was killed (SIGKILL, no grace) and the agent was stopped".to_owned()),
        ),
    };
    AgentRun {
        state,
        exit_code,
        error,
        response: response(inv, &stdout_tail),
        started_at: Some(started_at),
        finished_at: Some(finished_at),
        duration_ms: Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)),
        stderr_tail: text_tail(&stderr_tail),
    }
}

/// Creates the scratch layout and the input file; returns the opened log files.
fn prepare(inv: &Invocation) -> Result<(File, File), String> {
    let scratch = &inv.scratch;
    let context = |path: &std::path::Path| {
        let path = path.display().to_string();
        move |e: io::Error| format!("preparing {path}: {e}")
    };
    match fs::metadata(&inv.workdir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "working directory {} is not a directory",
                inv.workdir.display()
            ));
        }
        Err(e) => return Err(format!("working directory {}: {e}", inv.workdir.display())),
    }
    let artifacts = scratch.artifacts_dir();
    fs::create_dir_all(&artifacts).map_err(context(&artifacts))?;
    let input = scratch.input_file();
    fs::write(&input, &inv.input).map_err(context(&input))?;
    // A response left by an earlier attempt must not pass for this run's answer.
    let response = scratch.response_file();
    match fs::remove_file(&response) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(context(&response)(e)),
        _ => {}
    }
    let stdout = scratch.stdout_log();
    let stderr = scratch.stderr_log();
    Ok((
        File::create(&stdout).map_err(context(&stdout))?,
        File::create(&stderr).map_err(context(&stderr))?,
    ))
}

/// SIGTERM to the group, `grace` to exit, then SIGKILL.
async fn terminate(
    child: &mut Child,
    group: Option<Pid>,
    grace: Duration,
) -> io::Result<ExitStatus> {
    if group.is_none() {
        // Without a group id only the leader can be reached.
        child.start_kill()?;
    }
    signal_group(group, Signal::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            signal_group(group, Signal::SIGKILL);
            child.wait().await
        }
    }
}

/// Whether a process of the process group `group` runs: exists and is not a zombie (an exited
/// process nobody has reaped yet answers signals but runs nothing, and holds no pipe). Without
/// `/proc`, every member that answers a signal counts.
pub fn group_running(group: i32) -> bool {
    if killpg(Pid::from_raw(group), None).is_err() {
        return false;
    }
    let Ok(entries) = fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        if !is_pid {
            return false;
        }
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        let Some((_, after)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = after.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
        pgrp == Some(group) && !matches!(state, Some("Z" | "X"))
    })
}

fn signal_group(group: Option<Pid>, signal: Signal) {
    let Some(group) = group else { return };
    match killpg(group, signal) {
        // ESRCH: everything in the group has already exited.
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => {
            tracing::warn!(pgid = group.as_raw(), %signal, error = %e, "signalling the agent's process group")
        }
    }
}

fn exit_code(status: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    // The shell convention, so that a killed agent still has a code to show.
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Copies a child's output to its log file, optionally to `echo`, and keeps the last `cap`
/// bytes. Keeps draining the pipe even if the log or echo fails, so the agent never blocks.
async fn tee(
    from: Option<impl AsyncRead + Unpin>,
    log: File,
    mut echo: Option<impl AsyncWrite + Unpin>,
    cap: usize,
    stop: CancellationToken,
) -> Vec<u8> {
    let Some(mut from) = from else {
        return Vec::new();
    };
    let mut log = Some(tokio::fs::File::from_std(log));
    let mut buf = vec![0u8; 64 * 1024];
    let mut tail = Vec::new();
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the agent's output");
                    break;
                }
            },
            () = stop.cancelled() => break,
        };
        let data = &buf[..n];
        if let Some(file) = &mut log
            && let Err(e) = file.write_all(data).await
        {
            tracing::warn!(error = %e, "writing the agent's log; the rest is not logged");
            log = None;
        }
        if let Some(out) = &mut echo
            && (out.write_all(data).await.is_err() || out.flush().await.is_err())
        {
            echo = None;
        }
        tail.extend_from_slice(data);
        if tail.len() > 2 * cap {
            tail.drain(..tail.len() - cap);
        }
    }
    if let Some(mut file) = log
        && let Err(e) = file.flush().await
    {
        tracing::warn!(error = %e, "writing the agent's log");
    }
    if tail.len() > cap {
        tail.drain(..tail.len() - cap);
    }
    tail
}

/// The response file if the agent wrote one, else the tail of its stdout.
fn response(inv: &Invocation, stdout_tail: &[u8]) -> Option<String> {
    let mut from_file = Vec::new();
    match File::open(inv.scratch.response_file()) {
        Ok(file) => match file.take(RESPONSE_LIMIT).read_to_end(&mut from_file) {
            Ok(_) => return Some(String::from_utf8_lossy(&from_file).trim().to_owned()),
            Err(e) => tracing::warn!(error = %e, "reading the agent's response file"),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(error = %e, "opening the agent's response file"),
    }
    let text = text_tail(stdout_tail);
    (!text.is_empty()).then_some(text)
}

/// Bytes from the end of a stream as text: a character cut at the start is dropped.
fn text_tail(bytes: &[u8]) -> String {
    let start = bytes
        .iter()
        .take(3)
        .take_while(|&&b| b & 0b1100_0000 == 0b1000_0000)
        .count();
    String::from_utf8_lossy(&bytes[start..]).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_text_drops_a_cut_character() {
        let text = "é and ü";
        let bytes = text.as_bytes();
        assert_eq!(text_tail(&bytes[1..]), "and ü");
        assert_eq!(text_tail(b"  hi \n"), "hi");
    }
}
