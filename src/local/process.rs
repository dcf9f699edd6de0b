//! Which process supervises a local run, told apart from a later process that reuses its pid: the pid with its start time, read from `/proc`.

use serde::{Deserialize, Serialize};

/// A process as the kernel knows it: its pid and when it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: u32,
    /// When it started, in clock ticks after boot (field 22 of `/proc/<pid>/stat`); a later
    /// process with the same pid has a later start time.
    pub start_time: u64,
}

impl ProcessIdentity {
    /// This process.
    pub fn current() -> Option<Self> {
        Self::of(std::process::id())
    }

    /// The process `pid`, if it runs (a zombie has ended).
    pub fn of(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (state, start_time) = parse_stat(&stat)?;
        (state != 'Z' && state != 'X').then_some(Self { pid, start_time })
    }

    /// Whether this very process still runs.
    pub fn is_running(&self) -> bool {
        Self::of(self.pid) == Some(*self)
    }
}

/// The state and start time in a `/proc/<pid>/stat` line. The command name (field 2) is in
/// parentheses and may itself hold spaces and parentheses, so fields are counted after the last `)`.
fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Field 3 (state) is fields[0], so field 22 (starttime) is fields[19].
    let start_time = fields.get(19)?.parse().ok()?;
    Some((state, start_time))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_state_and_start_time_past_an_odd_command_name() {
        let stat = "4242 (we(i)rd name) S 1 4242 4242 0 -1 4194560 200 0 0 0 1 2 0 0 20 0 1 0 98765 1000 100 18446744073709551615";
        assert_eq!(parse_stat(stat), Some(('S', 98765)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_runs_and_a_changed_start_time_is_another_process() {
        let me = ProcessIdentity::current().expect("/proc is mounted");
        assert!(me.is_running());
        let other = ProcessIdentity {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!other.is_running());
    }
}
