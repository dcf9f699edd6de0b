//! An AgentSchedule's status, as a pure function of the last one, the plan and its executions.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::AgentScheduleStatus;
use crate::api::contract::{ConditionType, Reason};
use crate::resolve::conditions::ConditionWriter;
use crate::resolve::schedule::{Due, Plan, Run, RunState};

/// What the status is rendered from.
pub struct Observed<'a> {
    /// The spec generation.
    pub generation: Option<i64>,
    /// Whether the schedule is suspended.
    pub suspended: bool,
    /// The executions as the plan left them: the one it created added, the ones it deletes
    /// taken out.
    pub runs: &'a [Run],
    /// When the latest succeeded execution ended, from the executions that are left.
    pub last_success: Option<Timestamp>,
    /// Now.
    pub now: Timestamp,
}

/// The status after `plan`.
pub fn render(
    previous: &AgentScheduleStatus,
    plan: &Plan,
    observed: &Observed<'_>,
) -> AgentScheduleStatus {
    let mut status = previous.clone();
    status.observed_generation = observed.generation;
    status.last_schedule_time = plan.last_schedule.map(time);
    status.next_schedule_time = plan.next.map(time);
    let kept = previous.last_successful_time.as_ref().map(|t| t.0);
    status.last_successful_time = kept.max(observed.last_success).map(time);
    let mut active: Vec<&Run> = observed
        .runs
        .iter()
        .filter(|r| r.state == RunState::Active)
        .collect();
    active.sort_by_key(|r| r.scheduled);
    status.active = active.iter().map(|r| r.name.clone()).collect();
    status.active_count = i32::try_from(status.active.len()).unwrap_or(i32::MAX);
    match plan.due {
        Due::Held(at) => {
            status.message = Some(format!(
                "the run due at {at} waits: concurrencyPolicy Forbid and {} still running",
                status.active.join(", ")
            ));
        }
        Due::Missed(at) => {
            status.message = Some(format!(
                "missed the run due at {at}: it could not start within startingDeadlineSeconds"
            ));
        }
        Due::Start(_) | Due::Started(_) => status.message = None,
        Due::Nothing => {}
    }
    let (ready, reason, message) = if observed.suspended {
        (false, Reason::Suspended, "suspended: no runs are created")
    } else {
        (
            true,
            Reason::Scheduling,
            "runs are created when they are due",
        )
    };
    ConditionWriter::new(
        &mut status.conditions,
        observed.generation,
        time(observed.now),
    )
    .set(ConditionType::Ready, ready, reason, message);
    status
}

/// The status of a schedule whose spec slipped past admission invalid (the webhook was off):
/// nothing runs until it is fixed.
pub fn invalid(
    previous: &AgentScheduleStatus,
    generation: Option<i64>,
    message: &str,
    now: Timestamp,
) -> AgentScheduleStatus {
    let mut status = previous.clone();
    status.observed_generation = generation;
    status.next_schedule_time = None;
    status.message = Some(message.to_owned());
    ConditionWriter::new(&mut status.conditions, generation, time(now)).set(
        ConditionType::Ready,
        false,
        Reason::InvalidSpec,
        message,
    );
    status
}

fn time(t: Timestamp) -> Time {
    Time(t)
}
