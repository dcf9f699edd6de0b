//! Changes to a running agent that arrive while it runs: a new deadline, a stop without grace, and signals for its process group, read from a control file the runner watches.
//!
//! Locally `errand deadline` and `errand kill` write the file (`control.json` beside the
//! record) under a lock the runner takes too, so a change and the runner's own decision to
//! stop are serialized: the runner marks the file `terminating` before it stops the agent, and
//! a change that finds that mark is refused. In a pod the file is the execution's control
//! annotation, projected by a downward-API volume that the kubelet refreshes; there the
//! runner only reads it, and the controller serializes changes against its own view.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How often the runner reads the control file.
pub const CONTROL_POLL: Duration = Duration::from_millis(200);

/// What the control file says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunControl {
    /// The deadline that replaces the one `timeoutSeconds` gives (counted from the agent's
    /// start); none: that one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<jiff::Timestamp>,
    /// Stop the agent now with SIGKILL, without the grace period, and save its results.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kill: bool,
    /// Signals (names such as `SIGUSR1`) for the agent's process group, in the order asked;
    /// each is sent once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
    /// Why the runner began stopping the agent (`deadline`, `cancel`, `kill`), once it did;
    /// changes are refused from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating: Option<String>,
}

/// A run control text that is not a run control document; says what the JSON parser found.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("not a run control document: {0}")]
pub struct NotRunControl(String);

impl RunControl {
    /// The control in `text`; an empty text (an annotation not set) is the default.
    pub fn parse(text: &str) -> Result<Self, NotRunControl> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_json::from_str(text).map_err(|e| NotRunControl(e.to_string()))
    }

    /// The instant the agent must be stopped: the changed deadline, else `own` (its start plus
    /// `timeoutSeconds`).
    pub fn deadline_instant(&self, own: Instant) -> Instant {
        match self.deadline {
            None => own,
            Some(at) => {
                let left = jiff::Timestamp::now().duration_until(at);
                Instant::now() + Duration::try_from(left).unwrap_or(Duration::ZERO)
            }
        }
    }
}

/// The control file of one run, and (locally) the lock that serializes its writers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlFile {
    /// The file.
    pub path: PathBuf,
    /// The lock file taken around every read-modify-write; none where the runner only reads
    /// (a pod's projected annotation).
    pub lock: Option<PathBuf>,
}

impl ControlFile {
    /// The control file `control.json` of a local run in `dir`, with its lock beside it.
    pub fn local(dir: &Path) -> Self {
        Self {
            path: dir.join("control.json"),
            lock: Some(dir.join("control.lock")),
        }
    }

    /// The read-only control file projected into a pod.
    pub fn projected(path: PathBuf) -> Self {
        Self { path, lock: None }
    }

    /// What the file says now; a missing or unreadable file says nothing.
    pub fn read(&self) -> RunControl {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => RunControl::parse(&text).unwrap_or_else(|e| {
                tracing::warn!(path = %self.path.display(), "{e}; ignored");
                RunControl::default()
            }),
            Err(_) => RunControl::default(),
        }
    }

    /// Reads the control, lets `change` decide on it, and writes what it returns, all under
    /// the lock; the error `change` returns leaves the file as it was.
    pub fn update<T, E>(
        &self,
        change: impl FnOnce(&mut RunControl) -> Result<T, E>,
    ) -> Result<Result<T, E>, std::io::Error> {
        let _held = match &self.lock {
            Some(lock) => Some(lock_file(lock)?),
            None => None,
        };
        let mut control = self.read();
        let decided = change(&mut control);
        if decided.is_ok() && self.lock.is_some() {
            write_atomically(
                &self.path,
                &serde_json::to_vec(&control).expect("a control serializes"),
            )?;
        }
        Ok(decided)
    }

    /// Decides, serialized against every writer, whether the agent stops now for `why`: it
    /// does unless the deadline was moved past now (returned as `Err`, with the new control).
    /// Where the runner only reads the file, the latest projection decides.
    pub fn begin_termination(&self, why: &str, at_deadline: bool) -> Result<(), RunControl> {
        let decided = self.update(|control| {
            let moved = at_deadline
                && control
                    .deadline
                    .is_some_and(|at| at > jiff::Timestamp::now());
            if moved {
                return Err(control.clone());
            }
            control.terminating.get_or_insert_with(|| why.to_owned());
            Ok(())
        });
        match decided {
            Ok(decided) => decided,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "the run control file; stopping anyway");
                Ok(())
            }
        }
    }
}

/// An exclusive lock on `path` (created if missing), held until the file is dropped.
fn lock_file(path: &Path) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    file.lock()?;
    Ok(file)
}

/// Replaces `path` with `bytes` at once: readers see the old or the new text, never a part.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let partial = path.with_extension("partial");
    let mut file = File::create(&partial)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&partial, path)
}

/// Why a signal is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignalError {
    /// A number that is no signal's.
    #[error("{0} is not a signal number")]
    Number(i32),
    /// A name that is no signal's.
    #[error("{0:?} is not a signal name (TERM, KILL, INT, HUP, USR1, ...)")]
    Name(String),
}

/// The signal named `name` (`TERM`, `SIGTERM`, `term` or a number such as `15`).
pub fn parse_signal(name: &str) -> Result<nix::sys::signal::Signal, SignalError> {
    use std::str::FromStr;
    let trimmed = name.trim();
    if let Ok(number) = trimmed.parse::<i32>() {
        return nix::sys::signal::Signal::try_from(number).map_err(|_| SignalError::Number(number));
    }
    let upper = trimmed.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    nix::sys::signal::Signal::from_str(&full).map_err(|_| SignalError::Name(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_deadline_holds_off_termination_and_a_terminating_run_is_marked() {
        let dir = tempfile::tempdir().unwrap();
        let control = ControlFile::local(dir.path());
        assert_eq!(
            control.read(),
            RunControl::default(),
            "no file says nothing"
        );
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(60);
        control
            .update(|c| {
                c.deadline = Some(later);
                Ok::<(), ()>(())
            })
            .unwrap()
            .unwrap();
        let moved = control.begin_termination("deadline", true).unwrap_err();
        assert_eq!(moved.deadline, Some(later));
        assert_eq!(control.read().terminating, None);
        // A cancel stops it whatever the deadline.
        control.begin_termination("cancel", false).unwrap();
        assert_eq!(control.read().terminating.as_deref(), Some("cancel"));
    }

    #[test]
    fn signals_are_read_by_name_or_number() {
        use nix::sys::signal::Signal;
        for name in ["TERM", "SIGTERM", "term", "15"] {
            assert_eq!(parse_signal(name), Ok(Signal::SIGTERM), "{name}");
        }
        assert_eq!(parse_signal("usr1"), Ok(Signal::SIGUSR1));
        assert!(
            parse_signal("BOGUS")
                .unwrap_err()
                .to_string()
                .contains("not a signal name")
        );
        assert!(parse_signal("999").is_err());
        assert_eq!(RunControl::parse(""), Ok(RunControl::default()));
        assert!(RunControl::parse("{").is_err());
    }
}
