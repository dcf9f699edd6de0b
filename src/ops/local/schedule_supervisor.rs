//! The supervisor of one local AgentSchedule (`errand __serve-schedule NAME`): every second it reads the schedule and its executions, asks the pure plan what is due, creates, cancels and deletes what the plan says, and writes the status the controller's render gives.

use std::time::Duration;

use jiff::Timestamp;

use super::Local;
use crate::api::{AgentSchedule, Phase};
use crate::local::{ProcessIdentity, ScheduleState};
use crate::ops::Error;
use crate::ops::Execution;
use crate::ops::backend::Backend;
use crate::resolve::schedule::status::{self, Observed as StatusObserved};
use crate::resolve::schedule::{self, Due, Observed, Run, RunState};
use crate::runner::signals::cancel_on_stop_signal;

/// The longest the supervisor sleeps: a suspend, resume or delete is seen within it.
const TICK: Duration = Duration::from_secs(1);
/// How far past a due time it wakes, so the time has passed when it looks.
const WAKE_MARGIN: Duration = Duration::from_millis(200);

/// Runs schedule `name` until it is deleted or this process is told to stop.
pub async fn serve_schedule(local: Local, name: &str) -> Result<(), Error> {
    let records = local.schedule_records();
    let namespace = local.namespace.clone();
    let stop = cancel_on_stop_signal();
    let mut state = records.state(&namespace, name);
    state.supervisor = ProcessIdentity::current();
    records.write_state(&namespace, name, &state)?;
    // A schedule deleted (its directory gone) ends the supervisor.
    while let Ok(schedule) = records.read(&namespace, name) {
        let wait = match tick(&local, &schedule, &mut state).await {
            Ok(wait) => wait.min(TICK),
            Err(error) => {
                eprintln!("schedule {name}: {}", error.message);
                TICK
            }
        };
        if records.write_state(&namespace, name, &state).is_err() {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => break,
        }
    }
    Ok(())
}

/// One look at the schedule: acts on the plan and renders the status into `state`; returns
/// how long to sleep before the next look.
async fn tick(
    local: &Local,
    schedule: &AgentSchedule,
    state: &mut ScheduleState,
) -> Result<Duration, Error> {
    let now = Timestamp::now();
    let name = schedule.metadata.name.clone().unwrap_or_default();
    let previous = state.status.clone();
    let generation = schedule.metadata.generation;
    let timing = match schedule::check(&schedule.spec, now) {
        Ok(timing) => timing,
        Err(invalid) => {
            let message = invalid.describe("AgentSchedule");
            state.status = status::invalid(&previous, generation, &message, now);
            return Ok(TICK);
        }
    };
    let executions = local.schedule_runs(&name).await?;
    let mut runs: Vec<Run> = executions.iter().map(|e| as_run(&name, e)).collect();
    let created = schedule
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let plan = schedule::plan(
        &Observed {
            name: &name,
            spec: &schedule.spec,
            created,
            last_schedule: previous.last_schedule_time.as_ref().map(|t| t.0),
            runs: &runs,
            now,
        },
        &timing,
    );
    for execution in executions.iter().filter(|e| plan.cancel.contains(&e.name)) {
        local.cancel(execution).await?;
    }
    let mut refused = None;
    if let Due::Start(at) = plan.due {
        let run = schedule::execution_name(&name, at);
        match local.start_run(schedule, run.clone(), at).await {
            Ok(_) => runs.push(Run {
                name: run,
                scheduled: at,
                state: RunState::Active,
            }),
            Err(error) => {
                refused = Some(format!(
                    "the run due at {at} was refused: {}",
                    error.message
                ));
            }
        }
    }
    for execution in executions.iter().filter(|e| plan.delete.contains(&e.name)) {
        local.delete(execution).await?;
    }
    runs.retain(|r| !plan.delete.contains(&r.name));
    let last_success = executions
        .iter()
        .filter(|e| !plan.delete.contains(&e.name) && e.phase == Phase::Succeeded)
        .filter_map(|e| e.completed_at)
        .max();
    let mut next = status::render(
        &previous,
        &plan,
        &StatusObserved {
            generation,
            suspended: schedule.spec.suspend,
            runs: &runs,
            last_success,
            now,
        },
    );
    if refused.is_some() {
        next.message = refused;
    }
    state.status = next;
    Ok(plan.wake_at.map_or(TICK, |at| {
        Duration::try_from(at.duration_since(Timestamp::now())).unwrap_or_default() + WAKE_MARGIN
    }))
}

/// One execution as the plan sees it: its scheduled time from its name (its creation when the
/// name does not say) and whether it ended.
fn as_run(schedule: &str, execution: &Execution) -> Run {
    let state = match execution.phase {
        Phase::Succeeded => RunState::Succeeded,
        Phase::Failed | Phase::Cancelled => RunState::Failed,
        _ => RunState::Active,
    };
    Run {
        name: execution.name.clone(),
        scheduled: schedule::scheduled_time_of(schedule, &execution.name)
            .unwrap_or(execution.created_at),
        state,
    }
}
