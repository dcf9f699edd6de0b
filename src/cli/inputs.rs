//! `execute`'s input, environment and tag flags: standard input read within its bound, `--env`/`--env-file` with `--mask`, `--tag`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::api::tags::check_tags;
use crate::archive::io_words;
use crate::ops::execute::RunInputs;
use crate::ops::{Error, ErrorCode};
use crate::resolve::env_name;

/// The default bound of standard input: 64 MiB.
pub const DEFAULT_STDIN_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Standard input, environment and tags of a new execution.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct InputArgs {
    /// Standard input for the agent: the VALUE itself, or `-` to read this command's standard
    /// input. Without `--stdin` or `--stdin-file`, piped standard input (a pipe or a file, not a
    /// terminal) is forwarded. Locally it is the agent's standard input; on a cluster it becomes
    /// the execution's input (`ERRAND_INPUT_FILE`).
    #[arg(long, value_name = "VALUE|-", conflicts_with = "stdin_file")]
    pub stdin: Option<String>,
    /// A file whose content is the agent's standard input (as `--stdin`).
    #[arg(long, value_name = "PATH")]
    pub stdin_file: Option<PathBuf>,
    /// The most bytes of standard input taken (default 64 MiB); more is refused with
    /// `stdin_too_large`.
    #[arg(long, value_name = "BYTES")]
    pub stdin_max_bytes: Option<u64>,
    /// A variable for the agent, `KEY=VALUE` (repeatable); wins over `--env-file` and the
    /// environment's own variables.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// A file of `KEY=VALUE` lines (blank lines and `#` comments skipped, `export ` allowed).
    #[arg(long = "env-file", value_name = "PATH")]
    pub env_files: Vec<PathBuf>,
    /// A variable whose value errand never shows (it reads `***` in records); repeatable.
    #[arg(long = "mask", value_name = "KEY")]
    pub masks: Vec<String>,
    /// A tag: dot-separated segments of lowercase letters, digits and inner `-` (repeatable).
    /// On a cluster tags are labels.
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Set by commands that never take standard input (rerun).
    #[arg(skip)]
    pub ignore_piped_stdin: bool,
}

/// Reads and checks every input flag; `piped` is this process's standard input when it is a
/// pipe or a file (not a terminal), read only when no other stdin flag is given.
pub fn read_inputs(
    args: &InputArgs,
    piped: impl FnOnce() -> Option<Box<dyn Read>>,
) -> Result<RunInputs, Error> {
    let max = args.stdin_max_bytes.unwrap_or(DEFAULT_STDIN_MAX_BYTES);
    let stdin = match (&args.stdin, &args.stdin_file) {
        (Some(dash), _) if dash == "-" => match piped() {
            Some(reader) => Some(read_bounded(reader, max, "standard input")?),
            None => {
                return Err(Error::argument(
                    "--stdin -: standard input is a terminal or closed; pipe the input in, or give --stdin VALUE or --stdin-file PATH",
                ));
            }
        },
        (Some(value), _) => Some(check_size(value.clone().into_bytes(), max, "--stdin")?),
        (None, Some(path)) => Some(read_file(path, max)?),
        (None, None) if args.ignore_piped_stdin => None,
        (None, None) => match piped() {
            Some(reader) => {
                Some(read_bounded(reader, max, "piped standard input")?).filter(|b| !b.is_empty())
            }
            None => None,
        },
    };
    let mut env = BTreeMap::new();
    for path in &args.env_files {
        env.extend(read_env_file(path)?);
    }
    for pair in &args.env {
        let (key, value) =
            parse_env_pair(pair).map_err(|e| Error::argument(format!("--env {e}")))?;
        env.insert(key, value);
    }
    let mut masked = BTreeSet::new();
    for key in &args.masks {
        env_name(key).map_err(|e| Error::argument(format!("--mask {e}")))?;
        if !env.contains_key(key) {
            return Err(Error::argument(format!(
                "--mask {key}: no --env or --env-file sets {key}"
            )));
        }
        masked.insert(key.clone());
    }
    let tags = check_tags(&args.tags).map_err(|e| Error::argument(format!("--tag {e}")))?;
    Ok(RunInputs {
        stdin,
        env,
        masked,
        tags,
    })
}

/// This process's standard input when it is a pipe, a socket or a file: what a caller pipes in.
/// A terminal or a character device such as `/dev/null` is not read.
pub fn piped_stdin() -> Option<Box<dyn Read>> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let stdin = std::io::stdin();
    let file = std::fs::File::from(stdin.as_fd().try_clone_to_owned().ok()?);
    let kind = file.metadata().ok()?.file_type();
    (kind.is_fifo() || kind.is_file() || kind.is_socket()).then(|| Box::new(file) as Box<dyn Read>)
}

fn too_large(what: &str, max: u64) -> Error {
    Error::new(
        ErrorCode::StdinTooLarge,
        format!(
            "{what} is larger than --stdin-max-bytes {max}; raise the bound or put the input in the working directory"
        ),
    )
}

fn check_size(bytes: Vec<u8>, max: u64, what: &str) -> Result<Vec<u8>, Error> {
    if bytes.len() as u64 > max {
        return Err(too_large(what, max));
    }
    Ok(bytes)
}

/// Reads at most `max` bytes; one more is an error, so the bound holds however much is sent.
fn read_bounded(reader: impl Read, max: u64, what: &str) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::new();
    reader
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| match e.kind() {
            // A path that is not a readable file is the caller's input.
            std::io::ErrorKind::IsADirectory => {
                Error::argument(format!("{what}: {}", io_words(&e)))
            }
            _ => Error::new(
                ErrorCode::IoError,
                format!("reading {what}: {}", io_words(&e)),
            ),
        })?;
    check_size(bytes, max, what)
}

fn read_file(path: &Path, max: u64) -> Result<Vec<u8>, Error> {
    let file = std::fs::File::open(path).map_err(|e| {
        Error::argument(format!("--stdin-file {}: {}", path.display(), io_words(&e)))
    })?;
    read_bounded(file, max, &format!("--stdin-file {}", path.display()))
}

/// One `KEY=VALUE`, its name checked as the resolver checks an environment's names.
fn parse_env_pair(pair: &str) -> Result<(String, String), String> {
    let (key, value) = pair
        .split_once('=')
        .ok_or_else(|| format!("{pair:?}: expected KEY=VALUE"))?;
    env_name(key).map_err(|e| e.to_string())?;
    Ok((key.to_owned(), value.to_owned()))
}

/// The variables of an env file, each problem naming the file and line.
fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::argument(format!("--env-file {}: {}", path.display(), io_words(&e))))?;
    parse_env_file(&text)
        .map_err(|e| Error::argument(format!("--env-file {}: {e}", path.display())))
}

/// `KEY=VALUE` lines; blank lines and `#` comments are skipped, an `export ` prefix is allowed,
/// and a value in matching single or double quotes loses them.
fn parse_env_file(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let (key, value) = parse_env_pair(line).map_err(|e| format!("line {}: {e}", number + 1))?;
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
            .map_or(value.clone(), str::to_owned);
        env.insert(key, unquoted);
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> InputArgs {
        InputArgs::default()
    }

    fn none() -> Option<Box<dyn Read>> {
        None
    }

    #[test]
    fn stdin_comes_from_the_flag_a_file_or_a_pipe_within_its_bound() {
        let piped = |text: &'static str| move || Some(Box::new(text.as_bytes()) as Box<dyn Read>);
        let value = InputArgs {
            stdin: Some("hello".into()),
            ..args()
        };
        assert_eq!(read_inputs(&value, none).unwrap().stdin.unwrap(), b"hello");
        let dash = InputArgs {
            stdin: Some("-".into()),
            ..args()
        };
        assert_eq!(
            read_inputs(&dash, piped("piped")).unwrap().stdin.unwrap(),
            b"piped"
        );
        assert_eq!(
            read_inputs(&dash, none).unwrap_err().code,
            "invalid_argument"
        );
        assert_eq!(
            read_inputs(&args(), piped("auto")).unwrap().stdin.unwrap(),
            b"auto"
        );
        assert_eq!(
            read_inputs(&args(), piped("")).unwrap().stdin,
            None,
            "an empty pipe is no input"
        );
        let rerun = InputArgs {
            ignore_piped_stdin: true,
            ..args()
        };
        assert_eq!(read_inputs(&rerun, piped("x")).unwrap().stdin, None);
        let bounded = InputArgs {
            stdin_max_bytes: Some(4),
            ..args()
        };
        assert!(read_inputs(&bounded, piped("1234")).is_ok());
        let error = read_inputs(&bounded, piped("12345")).unwrap_err();
        assert_eq!(error.code, "stdin_too_large");
        assert_eq!(
            error.message,
            "piped standard input is larger than --stdin-max-bytes 4; raise the bound or put the input in the working directory"
        );
    }

    #[test]
    fn env_flags_win_over_env_files_and_masks_name_a_set_variable() {
        assert_eq!(
            parse_env_file("# c\n\nexport A=1\nB=\"two words\"\nC='x'\nD=a=b\n").unwrap(),
            BTreeMap::from([
                ("A".into(), "1".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "x".into()),
                ("D".into(), "a=b".into()),
            ])
        );
        assert_eq!(
            parse_env_file("A=1\nnope\n").unwrap_err(),
            "line 2: \"nope\": expected KEY=VALUE"
        );
        let inputs = read_inputs(
            &InputArgs {
                env: vec!["TOKEN=s3cret".into(), "MODE=fast".into()],
                masks: vec!["TOKEN".into()],
                ..args()
            },
            none,
        )
        .unwrap();
        assert_eq!(
            inputs.shown_env(),
            BTreeMap::from([
                ("MODE".into(), "fast".into()),
                ("TOKEN".into(), "***".into())
            ])
        );
        let reserved = read_inputs(
            &InputArgs {
                env: vec!["ERRAND_INPUT=x".into()],
                ..args()
            },
            none,
        )
        .unwrap_err();
        assert_eq!(
            reserved.message,
            "--env \"ERRAND_INPUT\" is reserved for errand's runner (ERRAND_* and AGENT_CONFIG_PATH)"
        );
        let unset_mask = read_inputs(
            &InputArgs {
                masks: vec!["X".into()],
                ..args()
            },
            none,
        )
        .unwrap_err();
        assert_eq!(
            unset_mask.message,
            "--mask X: no --env or --env-file sets X"
        );
        let bad_tag = read_inputs(
            &InputArgs {
                tags: vec!["Nightly".into()],
                ..args()
            },
            none,
        )
        .unwrap_err();
        assert!(
            bad_tag
                .message
                .starts_with("--tag \"Nightly\" is not a tag"),
            "{}",
            bad_tag.message
        );
    }
}
