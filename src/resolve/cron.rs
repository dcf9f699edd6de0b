//! Cron expressions (crontab(5)'s five fields with names, ranges, steps and the `@` macros, as Kubernetes CronJobs take them) and the instants they fire at in an IANA time zone.
//!
//! Times are matched on the zone's wall clock. A wall time the zone skips (the hour clocks
//! jump forward) fires at the same distance past the jump, once; a wall time the zone repeats
//! (the hour clocks fall back) fires at its first occurrence only. So a daily `30 2 * * *`
//! fires exactly once every day of the year.

use std::fmt;

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// How far ahead [`Cron::next_after`] looks before it decides an expression never fires: five
/// years covers every combination of day of month, month and weekday.
const HORIZON_DAYS: i32 = 5 * 366 + 1;

/// A parsed cron expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    /// Days of the month, bit 1 to 31.
    days: u32,
    /// Months, bit 1 to 12.
    months: u16,
    /// Weekdays, bit 0 (Sunday) to 6.
    weekdays: u8,
    /// Whether the day-of-month field is restricted (not `*`): when both day fields are, a
    /// day matches either (crontab(5)).
    days_restricted: bool,
    weekdays_restricted: bool,
}

/// Why an expression is not a cron expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronError(String);

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CronError {}

/// One of the five fields: its name in messages, its range and the names it accepts.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// 7 is Sunday too, as in crontab(5).
const WEEKDAY: Field = Field {
    name: "day of week",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Field {
    /// The value of `text`: a number in range or (case-insensitively) one of the names.
    fn value(&self, text: &str) -> Result<u32, CronError> {
        let lower = text.to_ascii_lowercase();
        if let Some(index) = self.names.iter().position(|n| *n == lower) {
            return Ok(index as u32 + if self.names.len() == 12 { 1 } else { 0 });
        }
        match text.parse::<u32>() {
            Ok(v) if (self.min..=self.max).contains(&v) => Ok(v),
            _ => Err(CronError(format!(
                "{text:?} is not a valid {} (expected {}-{}{})",
                self.name,
                self.min,
                self.max,
                if self.names.is_empty() {
                    String::new()
                } else {
                    format!(" or a name such as {}", self.names[1].to_ascii_uppercase())
                }
            ))),
        }
    }

    /// The set `text` names, as bits: a comma-separated list of `*`, `N`, `N-M`, each with an
    /// optional `/STEP`.
    fn parse(&self, text: &str) -> Result<u64, CronError> {
        let mut bits = 0u64;
        for item in text.split(',') {
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => match step.parse::<u32>() {
                    Ok(step) if step >= 1 && step <= self.max => (range, step),
                    _ => {
                        return Err(CronError(format!(
                            "{step:?} is not a valid step of the {} field (expected 1-{})",
                            self.name, self.max
                        )));
                    }
                },
                None => (item, 1),
            };
            let (first, last) = if range == "*" {
                (self.min, self.max)
            } else if let Some((a, b)) = range.split_once('-') {
                let (a, b) = (self.value(a)?, self.value(b)?);
                if a > b {
                    return Err(CronError(format!(
                        "the range {range:?} of the {} field runs backwards",
                        self.name
                    )));
                }
                (a, b)
            } else {
                let a = self.value(range)?;
                // `N/STEP` means from N to the end, as in Vixie cron.
                (a, if step > 1 { self.max } else { a })
            };
            for v in (first..=last).step_by(step as usize) {
                bits |= 1 << v;
            }
        }
        Ok(bits)
    }
}

impl Cron {
    /// Parses a cron expression: five fields (minute, hour, day of month, month, day of
    /// week) or one of `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`
    /// and `@hourly`.
    pub fn parse(expression: &str) -> Result<Cron, CronError> {
        let expression = expression.trim();
        let expanded = match expression {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(CronError(format!(
                    "{other:?} is not a cron macro (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"
                )));
            }
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields.as_slice() else {
            return Err(CronError(format!(
                "{expression:?} has {} fields; a cron expression has 5: minute hour day-of-month month day-of-week (for example \"0 6 * * 1-5\")",
                fields.len()
            )));
        };
        let weekdays = WEEKDAY.parse(weekday)?;
        let cron = Cron {
            minutes: MINUTE.parse(minute)?,
            hours: HOUR.parse(hour)? as u32,
            days: DAY.parse(day)? as u32,
            months: MONTH.parse(month)? as u16,
            // Fold 7 (Sunday) onto 0.
            weekdays: ((weekdays | (weekdays >> 7)) & 0x7f) as u8,
            days_restricted: !day.starts_with('*'),
            weekdays_restricted: !weekday.starts_with('*'),
        };
        Ok(cron)
    }

    /// Whether the expression names `date` (month and either day field).
    fn matches_date(&self, date: Date) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let by_day = self.days & (1 << date.day()) != 0;
        let by_weekday = self.weekdays & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => by_day || by_weekday,
            _ => by_day && by_weekday,
        }
    }

    /// The wall times the expression names on `date`, in order.
    fn times_on(&self, date: Date) -> impl Iterator<Item = DateTime> + '_ {
        (0..24i8)
            .filter(|h| self.hours & (1 << h) != 0)
            .flat_map(move |h| {
                (0..60i8)
                    .filter(|m| self.minutes & (1 << m) != 0)
                    .map(move |m| date.at(h, m, 0, 0))
            })
    }

    /// The first instant after `after` at which the expression fires in `zone`; none when it
    /// never does (for example `0 0 30 2 *`).
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        // Start a few hours back on the wall clock: after a fall-back, wall times before
        // `after`'s can still be ahead of it.
        let start = zone.to_datetime(after).checked_sub(3.hours()).ok()?;
        let mut date = start.date();
        for _ in 0..HORIZON_DAYS {
            if self.matches_date(date) {
                for wall in self.times_on(date).filter(|wall| *wall >= start) {
                    let Ok(zoned) = zone.to_ambiguous_zoned(wall).compatible() else {
                        continue;
                    };
                    if zoned.timestamp() > after {
                        return Some(zoned.timestamp());
                    }
                }
            }
            date = date.tomorrow().ok()?;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn next(expr: &str, after: &str, zone: &str) -> String {
        let zone = TimeZone::get(zone).unwrap();
        let next = Cron::parse(expr)
            .unwrap()
            .next_after(at(after), &zone)
            .unwrap();
        next.to_string()
    }

    #[test]
    fn fields_lists_ranges_steps_and_names_fire_where_crontab_says() {
        assert_eq!(
            next("* * * * *", "2026-01-01T00:00:00Z", "UTC"),
            "2026-01-01T00:01:00Z"
        );
        assert_eq!(
            next("* * * * *", "2026-01-01T00:00:30Z", "UTC"),
            "2026-01-01T00:01:00Z"
        );
        assert_eq!(
            next("*/15 * * * *", "2026-01-01T00:16:00Z", "UTC"),
            "2026-01-01T00:30:00Z"
        );
        assert_eq!(
            next("5/20 * * * *", "2026-01-01T00:26:00Z", "UTC"),
            "2026-01-01T00:45:00Z"
        );
        assert_eq!(
            next("0 6 * * MON-FRI", "2026-01-02T07:00:00Z", "UTC"),
            "2026-01-05T06:00:00Z"
        );
        assert_eq!(
            next("0 0 1 jan *", "2026-01-01T00:00:00Z", "UTC"),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            next("0 12 * * 7", "2026-01-01T00:00:00Z", "UTC"),
            "2026-01-04T12:00:00Z"
        );
        assert_eq!(
            next("0,30 9-10 * * *", "2026-01-01T09:31:00Z", "UTC"),
            "2026-01-01T10:00:00Z"
        );
        assert_eq!(
            next("@hourly", "2026-01-01T09:31:00Z", "UTC"),
            "2026-01-01T10:00:00Z"
        );
        assert_eq!(
            next("@weekly", "2026-01-01T09:31:00Z", "UTC"),
            "2026-01-04T00:00:00Z"
        );
        // Both day fields restricted: either matches (the 13th, or a Friday).
        assert_eq!(
            next("0 0 13 * 5", "2026-01-01T00:00:00Z", "UTC"),
            "2026-01-02T00:00:00Z"
        );
        assert_eq!(
            next("0 0 29 2 *", "2026-03-01T00:00:00Z", "UTC"),
            "2028-02-29T00:00:00Z"
        );
        let never = Cron::parse("0 0 30 2 *").unwrap();
        assert_eq!(
            never.next_after(at("2026-01-01T00:00:00Z"), &TimeZone::UTC),
            None
        );
    }

    #[test]
    fn a_zone_fires_on_its_wall_clock_once_across_both_dst_transitions() {
        let zone = "America/New_York";
        assert_eq!(
            next("0 9 * * *", "2026-07-01T00:00:00Z", zone),
            "2026-07-01T13:00:00Z"
        );
        assert_eq!(
            next("0 9 * * *", "2026-12-01T00:00:00Z", zone),
            "2026-12-01T14:00:00Z"
        );
        // 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist and fires at 03:30.
        assert_eq!(
            next("30 2 * * *", "2026-03-08T05:00:00Z", zone),
            "2026-03-08T07:30:00Z"
        );
        assert_eq!(
            next("30 2 * * *", "2026-03-08T07:30:00Z", zone),
            "2026-03-09T06:30:00Z"
        );
        // 2026-11-01: 02:00 EDT falls back to 01:00 EST; 01:30 fires at its first occurrence.
        assert_eq!(
            next("30 1 * * *", "2026-11-01T04:00:00Z", zone),
            "2026-11-01T05:30:00Z"
        );
        assert_eq!(
            next("30 1 * * *", "2026-11-01T05:30:00Z", zone),
            "2026-11-02T06:30:00Z"
        );
        // Every minute through the fall-back hour: each wall minute once, no going back.
        let cron = Cron::parse("* * * * *").unwrap();
        let tz = TimeZone::get(zone).unwrap();
        let mut t = at("2026-11-01T05:58:00Z");
        let mut fired = Vec::new();
        for _ in 0..4 {
            t = cron.next_after(t, &tz).unwrap();
            fired.push(t.to_string());
        }
        assert_eq!(
            fired,
            [
                "2026-11-01T05:59:00Z",
                "2026-11-01T07:00:00Z",
                "2026-11-01T07:01:00Z",
                "2026-11-01T07:02:00Z"
            ]
        );
    }

    #[test]
    fn a_bad_expression_is_refused_naming_the_field_and_the_shape() {
        let error = |expr: &str| Cron::parse(expr).unwrap_err().to_string();
        assert_eq!(
            error("* * * *"),
            "\"* * * *\" has 4 fields; a cron expression has 5: minute hour day-of-month month day-of-week (for example \"0 6 * * 1-5\")"
        );
        assert_eq!(
            error("60 * * * *"),
            "\"60\" is not a valid minute (expected 0-59)"
        );
        assert_eq!(
            error("0 0 * foo *"),
            "\"foo\" is not a valid month (expected 1-12 or a name such as FEB)"
        );
        assert_eq!(
            error("0 0 * * 1-8"),
            "\"8\" is not a valid day of week (expected 0-7 or a name such as MON)"
        );
        assert_eq!(
            error("*/0 * * * *"),
            "\"0\" is not a valid step of the minute field (expected 1-59)"
        );
        assert_eq!(
            error("0 5-3 * * *"),
            "the range \"5-3\" of the hour field runs backwards"
        );
        assert!(error("@often").starts_with("\"@often\" is not a cron macro"));
    }
}
