//! What an AgentSchedule does now, as a pure function of its spec, the time, its last scheduled time and its executions: the checks at create and CronJob's semantics for due, missed, held and replaced runs and history.
//!
//! The cluster's reconciler and the local supervisor both act on [`plan`]'s answer; names are
//! deterministic ([`execution_name`]), so a restart at the scheduled second never creates a
//! second execution for one scheduled time.

pub mod status;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use std::collections::BTreeMap;

use kube::api::ObjectMeta;

use super::cron::Cron;
use super::problems::{InvalidSpec, Problem};
use crate::api::contract::{
    MANAGED_BY, MANAGED_BY_LABEL, SCHEDULE_LABEL, SCHEDULED_TIME_ANNOTATION,
};
use crate::api::{AgentExecution, AgentSchedule, AgentScheduleSpec, ConcurrencyPolicy};

/// The scheduled times [`plan`] walks one by one before it only looks for the latest: past
/// it, the count of missed times is a lower bound.
const MISSED_WALK_LIMIT: u64 = 1000;
/// More missed times than this in one outage are worth a warning (CronJob's threshold).
pub const TOO_MANY_MISSED: u64 = 100;

/// The cron expression and time zone of a checked schedule.
#[derive(Clone, Debug)]
pub struct Timing {
    /// The parsed `spec.schedule`.
    pub cron: Cron,
    /// `spec.timeZone`, UTC when unset.
    pub zone: TimeZone,
}

/// Checks what a schedule says about time, and the template fields a run cannot take; the
/// template's agent and environment are resolved by the caller as an execution's are (its
/// problems under `spec.executionTemplate.spec`).
pub fn check(spec: &AgentScheduleSpec, now: Timestamp) -> Result<Timing, InvalidSpec> {
    let mut problems = Vec::new();
    let cron = Cron::parse(&spec.schedule)
        .map_err(|e| problems.push(Problem::new("spec.schedule", e.to_string())))
        .ok();
    let zone = match spec.time_zone.as_deref() {
        None => Some(TimeZone::UTC),
        Some(name) => TimeZone::get(name)
            .map_err(|_| {
                problems.push(Problem::new(
                    "spec.timeZone",
                    format!("{name:?} is not an IANA time zone (for example \"Europe/Berlin\" or \"UTC\")"),
                ));
            })
            .ok(),
    };
    if let (Some(cron), Some(zone)) = (&cron, &zone)
        && cron.next_after(now, zone).is_none()
    {
        problems.push(Problem::new(
            "spec.schedule",
            format!(
                "{:?} never fires (no such date in the next five years)",
                spec.schedule
            ),
        ));
    }
    let template = &spec.execution_template.spec;
    let taken = [
        ("rerunOf", template.rerun_of.is_some()),
        ("cancel", template.cancel),
        ("kill", template.kill),
        ("held", template.held),
        ("deadline", template.deadline.is_some()),
    ];
    for (field, set) in taken {
        if set {
            problems.push(Problem::new(
                format!("spec.executionTemplate.spec.{field}"),
                format!("a schedule's runs are fresh executions of the template: {field} cannot be set in it"),
            ));
        }
    }
    match (cron, zone) {
        (Some(cron), Some(zone)) if problems.is_empty() => Ok(Timing { cron, zone }),
        _ => Err(InvalidSpec { problems }),
    }
}

/// The problems of a schedule's template as problems of the schedule: `spec.agentRef` is
/// `spec.executionTemplate.spec.agentRef`.
pub fn in_template(invalid: InvalidSpec) -> InvalidSpec {
    let problems = invalid
        .problems
        .into_iter()
        .map(|p| {
            let rest = p
                .field
                .strip_prefix("spec")
                .filter(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['));
            let field = match rest {
                Some(rest) => format!("spec.executionTemplate.spec{rest}"),
                None if p.field.is_empty() => "spec.executionTemplate.spec".to_owned(),
                None => format!("spec.executionTemplate.spec.{}", p.field),
            };
            Problem::new(field, p.message)
        })
        .collect();
    InvalidSpec { problems }
}

/// The name of the execution a schedule creates for `scheduled`: `<schedule>-<minutes since
/// the epoch>`, as a CronJob names its Jobs.
pub fn execution_name(schedule: &str, scheduled: Timestamp) -> String {
    format!("{schedule}-{}", scheduled.as_second().div_euclid(60))
}

/// The name of the execution `errand schedule trigger` creates at `at`: `<schedule>-<seconds
/// since the epoch>`, ten digits where a scheduled run's minutes have eight, so the two never
/// meet.
pub fn manual_execution_name(schedule: &str, at: Timestamp) -> String {
    format!("{schedule}-{}", at.as_second())
}

/// The time an execution of `schedule` was created for, read back from its name (a scheduled
/// run's minute, or a manual run's second); none for a name of another shape.
pub fn scheduled_time_of(schedule: &str, execution: &str) -> Option<Timestamp> {
    let digits = execution.strip_prefix(schedule)?.strip_prefix('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: i64 = digits.parse().ok()?;
    let seconds = if digits.len() >= 10 {
        number
    } else {
        number.checked_mul(60)?
    };
    Timestamp::from_second(seconds).ok()
}

/// The tag a local schedule's executions carry (`schedule.<name>`), by which its supervisor
/// finds them; a cluster's carry the label [`SCHEDULE_LABEL`] and an owner reference instead.
pub fn schedule_tag(schedule: &str) -> String {
    format!("schedule.{schedule}")
}

/// The execution `schedule` creates for `scheduled`, named `name`: the template, labelled
/// [`SCHEDULE_LABEL`] and annotated with the scheduled time (the caller adds the owner).
pub fn execution_for(
    schedule: &AgentSchedule,
    name: String,
    scheduled: Timestamp,
) -> AgentExecution {
    let template = &schedule.spec.execution_template;
    let schedule_name = schedule.metadata.name.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template.metadata.labels.clone();
    labels.insert(SCHEDULE_LABEL.to_owned(), schedule_name);
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    let mut annotations = template.metadata.annotations.clone();
    annotations.insert(SCHEDULED_TIME_ANNOTATION.to_owned(), scheduled.to_string());
    AgentExecution {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: schedule.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Where one of a schedule's executions is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Not ended.
    Active,
    /// Succeeded.
    Succeeded,
    /// Failed or cancelled.
    Failed,
}

/// One execution a schedule created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// Its name.
    pub name: String,
    /// The scheduled time it was created for.
    pub scheduled: Timestamp,
    /// Where it is.
    pub state: RunState,
}

/// What a schedule is and has, for [`plan`].
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// The schedule's name.
    pub name: &'a str,
    /// Its spec.
    pub spec: &'a AgentScheduleSpec,
    /// When it was created: the earliest time it can be due from.
    pub created: Timestamp,
    /// `status.lastScheduleTime`.
    pub last_schedule: Option<Timestamp>,
    /// Its executions.
    pub runs: &'a [Run],
    /// Now.
    pub now: Timestamp,
}

/// What a due time comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Nothing is due.
    Nothing,
    /// Create the execution for this scheduled time.
    Start(Timestamp),
    /// Its execution exists already (a status write was lost): only record it.
    Started(Timestamp),
    /// `Forbid` holds it while a run is active.
    Held(Timestamp),
    /// Its starting deadline passed: it counts as missed.
    Missed(Timestamp),
}

/// What to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The latest due scheduled time and what it comes to.
    pub due: Due,
    /// Scheduled times that passed since the last one without a run of their own (the due
    /// one not counted); at least this many when it is [`MISSED_WALK_LIMIT`].
    pub missed: u64,
    /// Active executions to cancel (`Replace`).
    pub cancel: Vec<String>,
    /// Ended executions beyond the history limits, oldest first.
    pub delete: Vec<String>,
    /// `status.lastScheduleTime` after this plan.
    pub last_schedule: Option<Timestamp>,
    /// The next scheduled time after now (none while suspended).
    pub next: Option<Timestamp>,
    /// When to look again, at the latest (the next time, or a held run's deadline).
    pub wake_at: Option<Timestamp>,
}

/// What the schedule does now (CronJob's `syncCronJob`).
pub fn plan(observed: &Observed<'_>, timing: &Timing) -> Plan {
    let spec = observed.spec;
    let now = observed.now;
    let deadline = spec
        .starting_deadline_seconds
        .map(|s| SignedDuration::from_secs(s.max(0)));
    let active: Vec<&Run> = observed
        .runs
        .iter()
        .filter(|r| r.state == RunState::Active)
        .collect();
    let delete = beyond_history(observed.runs, spec);
    let mut plan = Plan {
        due: Due::Nothing,
        missed: 0,
        cancel: Vec::new(),
        delete,
        last_schedule: observed.last_schedule,
        next: None,
        wake_at: None,
    };
    if spec.suspend {
        return plan;
    }
    plan.next = timing.cron.next_after(now, &timing.zone);
    plan.wake_at = plan.next;
    let earliest = observed.last_schedule.unwrap_or(observed.created);
    let Some((latest, missed)) = latest_due(timing, earliest, now) else {
        return plan;
    };
    plan.missed = missed;
    let name = execution_name(observed.name, latest);
    plan.due = if observed.runs.iter().any(|r| r.name == name) {
        Due::Started(latest)
    } else if deadline.is_some_and(|d| latest + d < now) {
        Due::Missed(latest)
    } else if spec.concurrency_policy == ConcurrencyPolicy::Forbid && !active.is_empty() {
        if let Some(d) = deadline {
            plan.wake_at = plan
                .wake_at
                .map_or(Some(latest + d), |w| Some(w.min(latest + d)));
        }
        Due::Held(latest)
    } else {
        if spec.concurrency_policy == ConcurrencyPolicy::Replace {
            plan.cancel = active.iter().map(|r| r.name.clone()).collect();
        }
        Due::Start(latest)
    };
    if !matches!(plan.due, Due::Held(_)) {
        plan.last_schedule = Some(latest);
    }
    plan
}

/// The latest scheduled time in `(earliest, now]` and how many before it in that span.
fn latest_due(timing: &Timing, earliest: Timestamp, now: Timestamp) -> Option<(Timestamp, u64)> {
    let next = |t: Timestamp| {
        timing
            .cron
            .next_after(t, &timing.zone)
            .filter(|next| *next <= now)
    };
    let mut latest = next(earliest)?;
    let mut before = 0;
    while let Some(t) = next(latest) {
        before += 1;
        latest = t;
        if before == MISSED_WALK_LIMIT {
            // A long outage: look for the latest time in ever wider windows before now.
            for hours in [1, 24, 24 * 32, 24 * 366, 24 * 366 * 5] {
                let from = now - SignedDuration::from_hours(hours);
                if from <= latest {
                    break;
                }
                if let Some(mut t) = next(from) {
                    while let Some(later) = next(t) {
                        t = later;
                    }
                    return Some((t, MISSED_WALK_LIMIT));
                }
            }
            while let Some(t) = next(latest) {
                latest = t;
            }
            return Some((latest, MISSED_WALK_LIMIT));
        }
    }
    Some((latest, before))
}

/// The ended runs past the history limits, oldest first.
fn beyond_history(runs: &[Run], spec: &AgentScheduleSpec) -> Vec<String> {
    let mut delete = Vec::new();
    for (state, limit) in [
        (
            RunState::Succeeded,
            spec.successful_executions_history_limit,
        ),
        (RunState::Failed, spec.failed_executions_history_limit),
    ] {
        let mut ended: Vec<&Run> = runs.iter().filter(|r| r.state == state).collect();
        ended.sort_by_key(|r| std::cmp::Reverse(r.scheduled));
        let keep = usize::try_from(limit.max(0)).unwrap_or(0);
        delete.extend(ended.iter().skip(keep).rev().map(|r| r.name.clone()));
    }
    delete
}

#[cfg(test)]
mod tests;
