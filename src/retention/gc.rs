//! What `errand gc` collects on the local backend: finished executions past an age, beyond a count, or beyond a disk budget, oldest first; and how its limits are written.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

/// The limits of one gc. Every limit set applies; an execution goes for the first limit it
/// breaks, in the order of the fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GcPolicy {
    /// Collect executions that finished longer ago than this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than_seconds: Option<u64>,
    /// Keep at most this many finished executions (the most recently finished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_executions: Option<usize>,
    /// Collect the oldest finished executions until all executions together (running ones
    /// included) take at most this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

impl GcPolicy {
    /// Whether no limit is set (such a gc would collect nothing).
    pub fn is_empty(&self) -> bool {
        self.older_than_seconds.is_none()
            && self.max_executions.is_none()
            && self.max_bytes.is_none()
    }
}

/// One execution as the gc sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredExecution {
    /// When it finished; `None` while it has not (it is never collected then).
    pub finished_at: Option<Timestamp>,
    /// Bytes it takes: its directory and its stored results.
    pub bytes: u64,
}

/// Why an execution is collected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GcReason {
    /// It finished longer ago than `--older-than`.
    OlderThan,
    /// More finished executions than `--max-executions` are kept, and it is among the oldest.
    MaxExecutions,
    /// All executions take more than `--max-bytes`, and it is among the oldest finished.
    MaxBytes,
}

impl GcReason {
    /// The limit as the command line names it.
    pub fn flag(self) -> &'static str {
        match self {
            GcReason::OlderThan => "--older-than",
            GcReason::MaxExecutions => "--max-executions",
            GcReason::MaxBytes => "--max-bytes",
        }
    }
}

/// Which of `executions` to collect at `now` (by index, oldest finished first) and why.
pub fn select(
    executions: &[StoredExecution],
    policy: &GcPolicy,
    now: Timestamp,
) -> Vec<(usize, GcReason)> {
    let mut finished: Vec<(usize, Timestamp)> = executions
        .iter()
        .enumerate()
        .filter_map(|(i, e)| Some((i, e.finished_at?)))
        .collect();
    finished.sort_by_key(|&(i, at)| (at, i));
    let mut collected = Vec::new();
    if let Some(seconds) = policy.older_than_seconds {
        let age = SignedDuration::from_secs(i64::try_from(seconds).unwrap_or(i64::MAX));
        let (old, young): (Vec<_>, Vec<_>) = finished
            .into_iter()
            .partition(|&(_, at)| now.duration_since(at) > age);
        collected.extend(old.into_iter().map(|(i, _)| (i, GcReason::OlderThan)));
        finished = young;
    }
    if let Some(max) = policy.max_executions {
        let excess = finished.len().saturating_sub(max);
        collected.extend(
            finished
                .drain(..excess)
                .map(|(i, _)| (i, GcReason::MaxExecutions)),
        );
    }
    if let Some(max) = policy.max_bytes {
        let gone: Vec<usize> = collected.iter().map(|&(i, _)| i).collect();
        let mut total: u64 = executions
            .iter()
            .enumerate()
            .filter(|(i, _)| !gone.contains(i))
            .map(|(_, e)| e.bytes)
            .sum();
        for (i, _) in finished {
            if total <= max {
                break;
            }
            total = total.saturating_sub(executions[i].bytes);
            collected.push((i, GcReason::MaxBytes));
        }
    }
    collected
}

/// Why an age or a size is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// It does not start with a whole number.
    #[error("{value:?} does not start with a whole number")]
    NotANumber {
        /// The value as given.
        value: String,
    },
    /// Its unit is none of `units`.
    #[error("{value:?}: the unit must be {units}")]
    Unit {
        /// The value as given.
        value: String,
        /// The units it may have, with an example.
        units: &'static str,
    },
    /// It does not fit 64 bits.
    #[error("{value:?} is too large")]
    TooLarge {
        /// The value as given.
        value: String,
    },
}

/// Reads an age: whole seconds, or a number with `s`, `m`, `h`, `d` or `w` (`90m`, `7d`).
pub fn parse_age(value: &str) -> Result<u64, QuantityError> {
    let (number, unit) = split_unit(value)?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => {
            return Err(QuantityError::Unit {
                value: value.to_owned(),
                units: "s, m, h, d or w (as in 7d)",
            });
        }
    };
    scaled(value, number, scale)
}

/// Reads a size: bytes, or a number with `K`, `M`, `G` or `T` (powers of 1024; `Ki`/`KiB`
/// and `KB` spell the same), as in `10G`.
pub fn parse_size(value: &str) -> Result<u64, QuantityError> {
    let (number, unit) = split_unit(value)?;
    let unit = unit.trim_end_matches(['B', 'b']).trim_end_matches('i');
    let scale = match unit.to_ascii_uppercase().as_str() {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => {
            return Err(QuantityError::Unit {
                value: value.to_owned(),
                units: "K, M, G or T (as in 10G)",
            });
        }
    };
    scaled(value, number, scale)
}

/// The leading whole number of `value` and the unit after it.
fn split_unit(value: &str) -> Result<(u64, &str), QuantityError> {
    let trimmed = value.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let number = number.parse().map_err(|_| QuantityError::NotANumber {
        value: value.to_owned(),
    })?;
    Ok((number, unit))
}

fn scaled(value: &str, number: u64, scale: u64) -> Result<u64, QuantityError> {
    number
        .checked_mul(scale)
        .ok_or_else(|| QuantityError::TooLarge {
            value: value.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn finished(second: i64, bytes: u64) -> StoredExecution {
        StoredExecution {
            finished_at: Some(at(second)),
            bytes,
        }
    }

    fn running(bytes: u64) -> StoredExecution {
        StoredExecution {
            finished_at: None,
            bytes,
        }
    }

    #[test]
    fn an_age_collects_what_finished_before_it_and_nothing_running() {
        let executions = [
            finished(0, 1),
            running(1),
            finished(500, 1),
            finished(100, 1),
        ];
        let policy = GcPolicy {
            older_than_seconds: Some(400),
            ..GcPolicy::default()
        };
        assert_eq!(
            select(&executions, &policy, at(600)),
            vec![(0, GcReason::OlderThan), (3, GcReason::OlderThan)]
        );
        assert!(select(&executions, &policy, at(100)).is_empty());
    }

    #[test]
    fn a_count_keeps_the_most_recently_finished() {
        let executions = [
            finished(30, 1),
            finished(10, 1),
            running(1),
            finished(20, 1),
        ];
        let policy = GcPolicy {
            max_executions: Some(1),
            ..GcPolicy::default()
        };
        assert_eq!(
            select(&executions, &policy, at(40)),
            vec![(1, GcReason::MaxExecutions), (3, GcReason::MaxExecutions)],
            "the running one neither counts nor goes"
        );
        let none_kept = GcPolicy {
            max_executions: Some(0),
            ..GcPolicy::default()
        };
        assert_eq!(select(&executions, &none_kept, at(40)).len(), 3);
    }

    #[test]
    fn a_budget_counts_everything_and_collects_the_oldest_finished_until_it_holds() {
        let executions = [
            finished(10, 400),
            finished(20, 300),
            running(500),
            finished(30, 100),
        ];
        let policy = GcPolicy {
            max_bytes: Some(700),
            ..GcPolicy::default()
        };
        assert_eq!(
            select(&executions, &policy, at(40)),
            vec![(0, GcReason::MaxBytes), (1, GcReason::MaxBytes)],
            "1300 bytes: the two oldest go, 600 remain"
        );
        let tiny = GcPolicy {
            max_bytes: Some(0),
            ..GcPolicy::default()
        };
        assert_eq!(
            select(&executions, &tiny, at(40)).len(),
            3,
            "everything finished goes; the running one stays over budget"
        );
    }

    #[test]
    fn limits_combine_and_each_execution_goes_for_the_first_it_breaks() {
        let executions = [
            finished(0, 100),
            finished(50, 100),
            finished(60, 100),
            finished(70, 100),
        ];
        let policy = GcPolicy {
            older_than_seconds: Some(60),
            max_executions: Some(2),
            max_bytes: Some(100),
        };
        assert_eq!(
            select(&executions, &policy, at(100)),
            vec![
                (0, GcReason::OlderThan),
                (1, GcReason::MaxExecutions),
                (2, GcReason::MaxBytes)
            ]
        );
        assert!(GcPolicy::default().is_empty());
        assert!(select(&executions, &GcPolicy::default(), at(100)).is_empty());
    }

    #[test]
    fn ages_and_sizes_are_read_with_their_units() {
        assert_eq!(parse_age("45"), Ok(45));
        assert_eq!(parse_age("90m"), Ok(5400));
        assert_eq!(parse_age("7d"), Ok(604_800));
        assert_eq!(parse_age("2w"), Ok(1_209_600));
        assert!(parse_age("7y").unwrap_err().to_string().contains("unit"));
        assert!(
            parse_age("d")
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
        assert!(
            parse_age("-1d")
                .unwrap_err()
                .to_string()
                .contains("whole number")
        );
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("1Mi"), Ok(1 << 20));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("2kb"), Ok(2048));
        assert!(parse_size("1P").unwrap_err().to_string().contains("unit"));
        assert!(
            parse_size("99999999999T")
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
    }
}
