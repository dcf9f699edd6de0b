//! The status of an execution in three pure steps: observe (Job, pods, Kueue's Workload, events → facts), decide (facts → where the run stands, what to stop, when to look again), render (→ status and conditions).
//!
//! The reconcile shell reads the objects, hands them to [`facts`], carries out the
//! [`Decision`] of [`decide`] and writes what [`render`] returns; nothing here does I/O.

mod control;
mod decide;
mod observe;
mod render;
mod timings;

pub use crate::runner::outcome::MESSAGE_LIMIT;
pub use control::{ACCEPT_MARGIN, ControlPlan, job_deadline_seconds, plan_control};
pub use decide::{
    AgentContainer, Decision, Ending, RUNNING_SHOWN_AFTER, Standing, Stop, decide, queued_message,
};
pub use observe::{
    Cause, ExtensionFacts, Facts, JobFacts, NODE_LOSS_DISRUPTIONS, PodFacts, Waiting, Warning,
    WorkloadFacts, facts, workload_facts,
};
pub use render::{invalid, rejected, render, retrying, starting};
pub use timings::{Timings, timings};

#[cfg(test)]
mod tests;
