//! How commands answer: human text by default, or exactly one JSON object with a stable schema (`-o json`).

use serde::Serialize;
use serde_json::{Value, json};

use crate::ops::Error;
pub use crate::ops::stdout::{EXIT_BROKEN_PIPE, human_size, write_line, write_stdout};

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
    /// Output format: `human`, `json` or `yaml` (`--format` is the same option).
    #[arg(
        short = 'o',
        long = "output",
        alias = "format",
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
