//! Observing an execution: `errand watch`, `wait`, `status` and `tail`, `execute --until`, and the answers that carry the agent's output with it.
//!
//! Observing never changes the run: reaching `--until` returns the execution as it stands.

use std::time::{Duration, Instant};

use crate::api::MAX_TIMEOUT_SECONDS;
use crate::cli::answers::Logs;
use crate::cli::answers::{ExecutionView, Observation};
use crate::cli::output::{Format, print_ok};
use crate::cli::show::{print_record, record_outcome};
use crate::ops::Error;
use crate::ops::Execution;
use crate::ops::backend::{Backend, LogStream};
use crate::ops::excerpt::{ByteWindow, DEFAULT_MAX_BYTES, MAX_MAX_BYTES};
use crate::ops::lookup::find;

/// The default `wait --until`: 30 seconds.
pub const DEFAULT_UNTIL_SECONDS: f64 = 30.0;
/// The default `wait --poll`.
pub const DEFAULT_POLL_SECONDS: f64 = 0.5;
/// The shortest `--poll`.
const MIN_POLL_SECONDS: f64 = 0.05;

/// How much of each output stream a waiting answer carries.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct ExcerptArgs {
    /// Bytes of each output stream a waiting answer carries (its last ones), 1 to 16777216.
    #[arg(long, default_value_t = DEFAULT_MAX_BYTES, value_parser = parse_max_bytes)]
    pub max_bytes: u64,
    /// Start each stream's excerpt at this byte offset (an earlier excerpt's `end`) instead of
    /// showing its last bytes.
    #[arg(long, value_name = "OFFSET")]
    pub from_byte: Option<u64>,
}

impl ExcerptArgs {
    /// The window of each stream these flags select.
    pub fn window(&self) -> ByteWindow {
        ByteWindow {
            max_bytes: self.max_bytes,
            from: self.from_byte,
        }
    }
}

/// Flags of `errand wait`.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// Execution name or unambiguous prefix.
    pub name: String,
    /// Return after this many seconds even if the execution goes on (it keeps running).
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_UNTIL_SECONDS, value_parser = parse_until)]
    pub until: f64,
    /// Seconds between looks at the execution.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_POLL_SECONDS, value_parser = parse_poll)]
    pub poll: f64,
    #[command(flatten)]
    pub excerpt: ExcerptArgs,
}

/// Flags of `errand watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Execution name or unambiguous prefix.
    pub name: String,
    #[command(flatten)]
    pub excerpt: ExcerptArgs,
}

impl WatchArgs {
    /// `errand watch NAME`: follows the agent's output until the execution ends, then prints it
    /// with excerpts of its output.
    pub async fn exec(self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let record = find(backend, &self.name).await?;
        let human = format == Format::Human;
        let done = backend.watch(&record, human).await?;
        let view = with_excerpts(backend, done, &self.excerpt).await?;
        record_outcome(format, &view, || print_record(&view.record))
    }
}

/// Flags of `errand status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Execution name or unambiguous prefix.
    pub name: String,
}

impl StatusArgs {
    /// `errand status NAME`: the record, with the sizes of the agent's output streams (read
    /// from their sizes alone, never from the logs).
    pub async fn exec(self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let record = find(backend, &self.name).await?;
        let view = with_sizes(backend, record).await?;
        print_ok(format, "execution", &view, || print_record(&view.record));
        Ok(())
    }
}

/// Flags of `errand tail`.
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// Execution name or unambiguous prefix.
    pub name: String,
    /// How many lines (`-n` is the namespace, as in kubectl).
    #[arg(long = "tail", visible_alias = "lines", default_value_t = 20)]
    pub lines: usize,
    /// Show stderr instead of stdout (local runs only: a pod's log holds both).
    #[arg(long)]
    pub stderr: bool,
}

impl TailArgs {
    /// `errand tail -n N NAME`: the last lines of the agent's output.
    pub async fn exec(self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let record = find(backend, &self.name).await?;
        let stream = if self.stderr {
            LogStream::Stderr
        } else {
            LogStream::Stdout
        };
        let (stream, last) = backend.logs(&record, stream, self.lines).await?;
        let answer = Logs {
            execution: record.name,
            stream,
            lines: last,
        };
        print_ok(format, "logs", &answer, || answer.lines.join("\n"));
        Ok(())
    }
}

/// Why a number of seconds (`--until`, `--poll`) is refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SecondsError {
    /// Not a number.
    #[error("{0:?} is not a number of seconds")]
    NotANumber(String),
    /// Outside `min..=max` (or not a number at all: NaN).
    #[error("{seconds} is out of range: give {min} to {max} seconds")]
    OutOfRange {
        /// The value.
        seconds: f64,
        /// The least accepted.
        min: f64,
        /// The most accepted.
        max: f64,
    },
}

/// Parses an `--until`: 0 to the longest timeout (7 days) in seconds, fractions allowed.
pub fn parse_until(value: &str) -> Result<f64, SecondsError> {
    parse_seconds(value, 0.0, MAX_TIMEOUT_SECONDS as f64)
}

/// Parses a `--poll`: 0.05 to 60 seconds.
pub fn parse_poll(value: &str) -> Result<f64, SecondsError> {
    parse_seconds(value, MIN_POLL_SECONDS, 60.0)
}

fn parse_seconds(value: &str, min: f64, max: f64) -> Result<f64, SecondsError> {
    let seconds: f64 = value
        .trim()
        .parse()
        .map_err(|_| SecondsError::NotANumber(value.to_owned()))?;
    if !(min..=max).contains(&seconds) {
        return Err(SecondsError::OutOfRange { seconds, min, max });
    }
    Ok(seconds)
}

/// Looks at the execution every `poll` seconds until it ends or `until` seconds have passed.
pub async fn observe(
    backend: &dyn Backend,
    record: Execution,
    until: f64,
    poll: f64,
) -> Result<(Execution, Observation), Error> {
    let started = Instant::now();
    let until_duration = Duration::from_secs_f64(until);
    let mut record = record;
    while !record.phase.is_terminal() {
        let left = until_duration.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(Duration::from_secs_f64(poll).min(left)).await;
        record = backend.execution(&record.name).await?;
    }
    let observation = Observation {
        until_seconds: until,
        elapsed_seconds: started.elapsed().as_secs_f64(),
        ended: record.phase.is_terminal(),
    };
    Ok((record, observation))
}

/// The execution with the excerpts `excerpt` selects of its output. Output that cannot be read
/// (a pod's log the caller may not read) is left out with a warning: it never fails an answer
/// about a run.
pub async fn with_excerpts(
    backend: &dyn Backend,
    record: Execution,
    excerpt: &ExcerptArgs,
) -> Result<ExecutionView, Error> {
    let output = match backend.output(&record, Some(excerpt.window())).await {
        Ok(output) => output,
        Err(e) => {
            eprintln!(
                "warning: the output of execution {} could not be read: {}",
                record.name, e.message
            );
            Vec::new()
        }
    };
    Ok(ExecutionView {
        output,
        ..ExecutionView::of(record)
    })
}

/// The execution with the sizes of its output streams, read without reading the streams.
pub async fn with_sizes(backend: &dyn Backend, record: Execution) -> Result<ExecutionView, Error> {
    Ok(ExecutionView {
        output: backend.output(&record, None).await?,
        ..ExecutionView::of(record)
    })
}

/// Answers a bounded observation: the execution with its excerpts. An execution that ended
/// other than `Succeeded` is a failed command, as with `watch`; one still going is not.
pub async fn answer_observed(
    backend: &dyn Backend,
    record: Execution,
    observation: Observation,
    excerpt: &ExcerptArgs,
    format: Format,
) -> Result<(), Error> {
    let view = ExecutionView {
        observation: Some(observation),
        ..with_excerpts(backend, record, excerpt).await?
    };
    let human = || {
        let mut text = print_record(&view.record);
        if !view.record.phase.is_terminal() {
            text.push_str(&format!(
                "\nstill {:?} after {:.1}s; it goes on (`errand wait {}` again to look)",
                view.record.phase,
                view.observation.as_ref().map_or(0.0, |o| o.elapsed_seconds),
                view.record.name
            ));
        }
        text
    };
    if view.record.phase.is_terminal() {
        return record_outcome(format, &view, human);
    }
    print_ok(format, "execution", &view, human);
    Ok(())
}

impl WaitArgs {
    /// `errand wait NAME --until SECONDS --poll SECONDS`.
    pub async fn exec(self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let record = find(backend, &self.name).await?;
        let (record, observation) = observe(backend, record, self.until, self.poll).await?;
        answer_observed(backend, record, observation, &self.excerpt, format).await
    }
}

/// Why a `--max-bytes` is refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MaxBytesError {
    /// Not a whole number.
    #[error("{0:?} is not a whole number of bytes")]
    NotANumber(String),
    /// 0, or more than [`MAX_MAX_BYTES`].
    #[error("{0} is out of range: give 1 to {MAX_MAX_BYTES} bytes")]
    OutOfRange(u64),
}

/// Parses `--max-bytes`: 1 to [`MAX_MAX_BYTES`].
fn parse_max_bytes(value: &str) -> Result<u64, MaxBytesError> {
    let bytes: u64 = value
        .parse()
        .map_err(|_| MaxBytesError::NotANumber(value.to_owned()))?;
    if bytes == 0 || bytes > MAX_MAX_BYTES {
        return Err(MaxBytesError::OutOfRange(bytes));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::{parse_max_bytes, parse_poll, parse_until};

    #[test]
    fn until_and_poll_are_bounded_naming_the_range() {
        assert_eq!(parse_until("0"), Ok(0.0));
        assert_eq!(parse_until("2.5"), Ok(2.5));
        assert_eq!(
            parse_until("-1").unwrap_err().to_string(),
            "-1 is out of range: give 0 to 604800 seconds"
        );
        assert_eq!(
            parse_until("soon").unwrap_err().to_string(),
            "\"soon\" is not a number of seconds"
        );
        assert_eq!(
            parse_poll("0").unwrap_err().to_string(),
            "0 is out of range: give 0.05 to 60 seconds"
        );
        assert!(parse_until("NaN").is_err(), "NaN is in no range");
    }

    #[test]
    fn max_bytes_is_bounded_naming_the_range() {
        assert_eq!(parse_max_bytes("65536"), Ok(65536));
        assert_eq!(
            parse_max_bytes("0").unwrap_err().to_string(),
            "0 is out of range: give 1 to 16777216 bytes"
        );
        assert!(
            parse_max_bytes("lots")
                .unwrap_err()
                .to_string()
                .contains("not a whole number")
        );
    }
}
