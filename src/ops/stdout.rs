//! Writing to this process's standard output as a command line does: a closed stdout (`errand … | head`) ends the process quietly; and sizes as people read them.

/// Exit code when stdout is closed under us (`errand … | head`): what a shell reports for a
/// process ended by SIGPIPE (128 + 13). The Rust runtime ignores SIGPIPE, so writes see EPIPE.
pub const EXIT_BROKEN_PIPE: i32 = 141;

/// Writes `text` to stdout. A closed stdout ends the process quietly with [`EXIT_BROKEN_PIPE`]
/// (no panic, no message), as a CLI does on EPIPE; any other write failure is reported on stderr.
pub fn write_stdout(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(EXIT_BROKEN_PIPE);
        }
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(1);
    }
}

/// Writes `line` and a newline to stdout, like [`write_stdout`].
pub fn write_line(line: impl std::fmt::Display) {
    write_stdout(&format!("{line}\n"));
}

/// `1.2 KiB`-style sizes for people.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
