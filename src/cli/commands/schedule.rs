//! `errand schedule create|list|get|suspend|resume|trigger|delete`: AgentSchedules, run by the controller on a cluster and by a detached supervisor per schedule on this machine.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

use crate::api::{AgentSchedule, ConcurrencyPolicy};
use crate::cli::answers::{DeletedObject, ExecutionView};
use crate::cli::output::{Format, print_ok};
use crate::ops::backend::{Backend, ScheduleEntry};
use crate::ops::execute::RunInputs;
use crate::ops::lookup::missing_schedule;
use crate::ops::request::request;
use crate::ops::{Error, backend::undo_push};

/// `errand schedule create NAME --cron EXPR ...`: the schedule's timing, then the spec of
/// the executions it creates, given as `execute` takes it.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The schedule's name (a DNS label of at most 52 characters: its executions are
    /// `NAME-<minutes since the epoch>`).
    pub name: String,
    /// When it runs: a five-field cron expression (`*/15 * * * *`) or `@hourly`, `@daily`,
    /// `@weekly`, `@monthly`, `@yearly`.
    #[arg(long)]
    pub cron: String,
    /// The IANA time zone the cron expression is read in (`Europe/Berlin`); UTC by default.
    #[arg(long)]
    pub time_zone: Option<String>,
    /// What a due run does while an earlier one still runs.
    #[arg(long, value_enum, default_value_t = PolicyArg::Allow)]
    pub concurrency_policy: PolicyArg,
    /// Seconds after its scheduled time a run may still start; later, it counts as missed.
    #[arg(long)]
    pub starting_deadline_seconds: Option<i64>,
    /// Create it suspended: nothing runs until `errand schedule resume`.
    #[arg(long)]
    pub suspend: bool,
    /// Succeeded executions kept (older ones are deleted with their results).
    #[arg(long)]
    pub successful_history_limit: Option<i32>,
    /// Failed and cancelled executions kept.
    #[arg(long)]
    pub failed_history_limit: Option<i32>,
    /// The spec of the executions it creates, as `execute` takes it.
    #[command(flatten)]
    pub spec_args: super::execute::SpecArgs,
}

/// `concurrencyPolicy` as the command line spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    /// Runs may overlap.
    Allow,
    /// A due run waits (and may miss its deadline) while one runs.
    Forbid,
    /// A due run cancels the running one.
    Replace,
}

impl From<PolicyArg> for ConcurrencyPolicy {
    fn from(policy: PolicyArg) -> Self {
        match policy {
            PolicyArg::Allow => ConcurrencyPolicy::Allow,
            PolicyArg::Forbid => ConcurrencyPolicy::Forbid,
            PolicyArg::Replace => ConcurrencyPolicy::Replace,
        }
    }
}

/// `errand schedule ...`
#[derive(Debug, clap::Subcommand)]
pub enum ScheduleAction {
    /// Create a schedule (checked as the API server checks it: a template that could never
    /// run is refused, naming its field).
    Create(Box<CreateArgs>),
    /// List the schedules of the namespace (locally, with whether each one's supervisor runs).
    List,
    /// Print one schedule.
    Get {
        /// The schedule.
        name: String,
    },
    /// Stop creating runs (running ones go on).
    Suspend {
        /// The schedule.
        name: String,
    },
    /// Create runs again (locally, also restarts a supervisor that is gone).
    Resume {
        /// The schedule.
        name: String,
    },
    /// Run it once now, as its next run would be (its policy and history limits count it).
    Trigger {
        /// The schedule.
        name: String,
    },
    /// Delete the schedule with its executions and their results.
    Delete {
        /// The schedule.
        name: String,
    },
}

/// A schedule as the commands show it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ScheduleView {
    /// Its name.
    pub name: String,
    /// The cron expression.
    pub schedule: String,
    /// The time zone it is read in; UTC when none.
    pub time_zone: Option<String>,
    /// `Allow`, `Forbid` or `Replace`.
    pub concurrency_policy: ConcurrencyPolicy,
    /// Whether it is suspended.
    pub suspend: bool,
    /// The executions it runs now.
    pub active: Vec<String>,
    /// The latest scheduled time a run was created for (or missed).
    pub last_schedule_time: Option<jiff::Timestamp>,
    /// When its latest succeeded run ended.
    pub last_successful_time: Option<jiff::Timestamp>,
    /// Its next scheduled time; none while suspended.
    pub next_schedule_time: Option<jiff::Timestamp>,
    /// Why a run waits, was missed or refused.
    pub message: Option<String>,
    /// Locally, `running` or `stopped` (`errand schedule resume` starts it again); none on a
    /// cluster, where the controller runs every schedule.
    pub supervisor: Option<String>,
}

impl ScheduleView {
    fn of(entry: &ScheduleEntry) -> Self {
        let schedule = &entry.schedule;
        let status = schedule.status.clone().unwrap_or_default();
        Self {
            name: schedule.metadata.name.clone().unwrap_or_default(),
            schedule: schedule.spec.schedule.clone(),
            time_zone: schedule.spec.time_zone.clone(),
            concurrency_policy: schedule.spec.concurrency_policy,
            suspend: schedule.spec.suspend,
            active: status.active,
            last_schedule_time: status.last_schedule_time.map(|t| t.0),
            last_successful_time: status.last_successful_time.map(|t| t.0),
            next_schedule_time: status.next_schedule_time.map(|t| t.0),
            message: status.message,
            supervisor: entry
                .supervisor_running
                .map(|running| if running { "running" } else { "stopped" }.to_owned()),
        }
    }

    fn human(&self) -> String {
        let time = |t: Option<jiff::Timestamp>| t.map_or_else(|| "-".to_owned(), |t| t.to_string());
        let mut line = format!(
            "{}\t{}\t{}\t{}\tactive {}\tlast {}\tnext {}",
            self.name,
            self.schedule,
            self.time_zone.as_deref().unwrap_or("UTC"),
            if self.suspend {
                "suspended"
            } else {
                "scheduling"
            },
            self.active.len(),
            time(self.last_schedule_time),
            time(self.next_schedule_time),
        );
        if let Some(supervisor) = &self.supervisor {
            line.push_str(&format!("\tsupervisor {supervisor}"));
        }
        if let Some(message) = &self.message {
            line.push_str(&format!("\t{message}"));
        }
        line
    }
}

impl ScheduleAction {
    /// Runs the action on `backend`; a schedule it names that does not exist is `not_found`
    /// listing those that do.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let named = match self {
            ScheduleAction::Create(_) | ScheduleAction::List => None,
            ScheduleAction::Get { name, .. }
            | ScheduleAction::Suspend { name, .. }
            | ScheduleAction::Resume { name, .. }
            | ScheduleAction::Trigger { name, .. }
            | ScheduleAction::Delete { name, .. } => Some(name),
        };
        match (self.act(backend, format).await, named) {
            (Err(error), Some(name)) => {
                Err(missing_schedule(backend.schedules(), backend.namespace(), name, error).await)
            }
            (done, _) => done,
        }
    }

    async fn act(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let schedules = backend.schedules();
        let print = |format: Format, entry: &ScheduleEntry| {
            let view = ScheduleView::of(entry);
            print_ok(format, "schedule", &view, || view.human());
        };
        match self {
            ScheduleAction::Create(args) => {
                let entry = create(args, backend).await?;
                print(format, &entry);
            }
            ScheduleAction::List => {
                let views: Vec<ScheduleView> = schedules
                    .schedules()
                    .await?
                    .iter()
                    .map(ScheduleView::of)
                    .collect();
                print_ok(format, "schedules", &views, || {
                    views
                        .iter()
                        .map(ScheduleView::human)
                        .collect::<Vec<_>>()
                        .join("\n")
                });
            }
            ScheduleAction::Get { name } => print(format, &schedules.schedule(name).await?),
            ScheduleAction::Suspend { name } => {
                print(format, &schedules.set_suspend(name, true).await?);
            }
            ScheduleAction::Resume { name } => {
                print(format, &schedules.set_suspend(name, false).await?);
            }
            ScheduleAction::Trigger { name } => {
                let record = schedules.trigger(name).await?;
                print_ok(
                    format,
                    "execution",
                    &ExecutionView::of(record.clone()),
                    || {
                        format!(
                            "execution {} of schedule {name} started; follow it with `errand watch {}`",
                            record.name, record.name
                        )
                    },
                );
            }
            ScheduleAction::Delete { name } => {
                schedules.delete_schedule(name).await?;
                let answer = DeletedObject {
                    kind: "AgentSchedule",
                    name: name.clone(),
                };
                print_ok(format, "deleted", &answer, || {
                    format!("AgentSchedule {name} deleted with its executions")
                });
            }
        }
        Ok(())
    }
}

/// Builds the schedule the flags describe and creates it; a refused one leaves nothing behind,
/// not even the workdir its flags pushed.
async fn create(args: &CreateArgs, backend: &dyn Backend) -> Result<ScheduleEntry, Error> {
    let flags = args.spec_args.flags();
    let template = request(&flags, RunInputs::default(), backend).await?;
    let mut spec = json!({
        "schedule": args.cron,
        "concurrencyPolicy": ConcurrencyPolicy::from(args.concurrency_policy),
        "suspend": args.suspend,
        "executionTemplate": {"spec": template.spec},
    });
    let optional = [
        ("timeZone", args.time_zone.as_ref().map(|z| json!(z))),
        (
            "startingDeadlineSeconds",
            args.starting_deadline_seconds.map(|s| json!(s)),
        ),
        (
            "successfulExecutionsHistoryLimit",
            args.successful_history_limit.map(|l| json!(l)),
        ),
        (
            "failedExecutionsHistoryLimit",
            args.failed_history_limit.map(|l| json!(l)),
        ),
    ];
    for (field, value) in optional {
        if let Some(value) = value {
            spec[field] = value;
        }
    }
    let built: Result<AgentSchedule, Error> = serde_json::from_value(json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentSchedule",
        "metadata": {"name": args.name, "namespace": backend.namespace()},
        "spec": spec,
    }))
    .map_err(|e| Error::argument(format!("the schedule: {e}")));
    let created = match built {
        Ok(schedule) => backend.schedules().create_schedule(&schedule).await,
        Err(e) => Err(e),
    };
    if created.is_err() {
        undo_push(backend, template.pushed.as_ref()).await;
    }
    created
}
