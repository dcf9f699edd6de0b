//! How commands answer: human text by default, or exactly one JSON object with a stable schema (`-o json`).

use serde::Serialize;
use serde_json::{Value, json};

use crate::ops::Error;

/// Version of every JSON answer's schema.
pub const SCHEMA_VERSION: u32 = 1;

/// The output format of a command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Text for people.
    #[default]
    Human,
    /// Exactly one JSON object: `schema_version`, `ok`, `type`, then the payload.
    Json,
    /// The same object as one YAML document (`--yaml`).
    Yaml,
}

/// The `-o/--output` option shared by the commands, and `--yaml` for `-o yaml`.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct OutputArgs {
    /// Output format: `human`, `json` or `yaml`.
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value_t = Format::Human,
        default_value_if("yaml", clap::builder::ArgPredicate::IsPresent, "yaml"),
        global = true
    )]
    pub format: Format,
    /// Answer in YAML: the same object `-o json` prints, as one YAML document (`-o yaml`).
    #[arg(long, global = true, conflicts_with = "format")]
    pub yaml: bool,
}

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

/// Prints a successful answer: `human` for people, or `{schema_version, ok: true, type, <type>: payload}`.
/// Every payload has a JSON Schema: `errand schema` lists each answer type (`schema.rs`).
pub fn print_ok<T: Serialize + schemars::JsonSchema>(
    format: Format,
    kind: &str,
    payload: &T,
    human: impl FnOnce() -> String,
) {
    match format {
        Format::Human => {
            let text = human();
            if !text.is_empty() {
                write_line(text.trim_end());
            }
        }
        Format::Json | Format::Yaml => {
            let mut answer = json!({"schema_version": SCHEMA_VERSION, "ok": true, "type": kind});
            answer[kind] = serde_json::to_value(payload).expect("answers always serialize");
            print_answer(format, &answer);
        }
    }
}

/// Prints one answer object: a JSON line, or a YAML document.
fn print_answer(format: Format, answer: &Value) {
    match format {
        Format::Yaml => match serde_saphyr::to_string(answer) {
            Ok(yaml) => write_stdout(&yaml),
            // Every JSON value has a YAML form; should rendering still fail, answer in JSON.
            Err(_) => write_line(answer),
        },
        _ => write_line(answer),
    }
}

/// Prints a failure (JSON on stdout, or text on stderr) and returns its exit code.
pub fn print_error(format: Format, error: &Error) -> i32 {
    match format {
        Format::Human => eprintln!("error[{}]: {}", error.code, error.message),
        Format::Json | Format::Yaml => {
            let mut body = json!({"code": error.code, "message": error.message});
            if let Some((key, value)) = &error.details {
                body[*key] = value.clone();
            }
            let answer = json!({"schema_version": SCHEMA_VERSION, "ok": false, "type": "error", "error": body});
            print_answer(format, &answer);
        }
    }
    error.exit_code()
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
