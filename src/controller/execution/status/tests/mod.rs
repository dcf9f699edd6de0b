//! Table-driven tests of the status decisions from plain facts, one row per way a run can go, and of the observation that turns Jobs, pods and events into those facts; by subject, over the fixtures here.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Event, ObjectReference, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};

use super::observe::pod_facts;
use super::render::format_duration;
use super::*;
use crate::api::contract::{self, COMPLETED_RUN_RESULTS, ConditionType, Reason};
use crate::api::{
    AgentExecution, AgentExecutionSpec, AgentExecutionStatus, Phase, ResultEntry, SnapshotRef,
};
use crate::resolve::conditions;
use crate::resolve::{InvalidSpec, Problem};
use crate::runner::outcome::with_tail;
use crate::runner::termination::TerminationSummary;
use crate::runner::{ExtensionSummary, RunState};

mod early_finish;
mod extension;
mod observation;
mod outcomes;
mod phases;
mod retrying;
mod stopped;

const T0: i64 = 1_800_000_000;

fn at(offset: i64) -> Time {
    Time(Timestamp::from_second(T0 + offset).unwrap())
}

fn now(offset: i64) -> Timestamp {
    at(offset).0
}

/// [`AgentExecution::test`] created at +0, with a 600s run and a 120s start timeout, Starting
/// since +1 with its snapshot and Job `errand-calc`.
fn execution() -> AgentExecution {
    let mut execution = AgentExecution::test()
        .with_spec(AgentExecutionSpec::test().with_timeouts(600, 120))
        .with_creation_timestamp(at(0));
    execution.status = Some(starting(
        &execution,
        "calculator",
        SnapshotRef::test(),
        "errand-calc",
        None,
        now(1),
    ));
    execution
}

/// [`execution`] whose deadline `errand deadline set` moved to +300 (accepted).
fn with_changed_deadline() -> AgentExecution {
    let mut execution = execution();
    execution.spec.deadline = Some(crate::api::DeadlineChange {
        in_seconds: Some(200),
        request: "r1".into(),
    });
    execution.status.as_mut().unwrap().deadline = Some(crate::api::DeadlineStatus {
        request: "r1".into(),
        accepted_at: Some(at(100)),
        deadline: Some(at(300)),
        refused: None,
    });
    execution
}

fn cancelled(mut execution: AgentExecution) -> AgentExecution {
    execution.spec.cancel = true;
    execution.metadata.generation = Some(2);
    execution
}

/// A Job created and started at +1.
fn job() -> JobFacts {
    JobFacts {
        uid: Some("job-uid".into()),
        suspended: false,
        queue: None,
        started: Some(now(1)),
        failure: None,
    }
}

/// A Job Kueue holds in LocalQueue `gpu`, created at +1 and not started.
fn suspended_job() -> JobFacts {
    JobFacts {
        suspended: true,
        queue: Some("gpu".into()),
        started: None,
        ..job()
    }
}

fn failed_job(reason: &str) -> JobFacts {
    JobFacts {
        failure: Some(Cause {
            reason: reason.into(),
            message: "Job was active longer than specified deadline".into(),
        }),
        ..job()
    }
}

/// A pod created at +2 that nothing has happened to yet.
fn pod() -> PodFacts {
    PodFacts {
        name: "errand-calc-x7k2p".into(),
        created: Some(now(2)),
        ..PodFacts::default()
    }
}

fn waiting(container: &str, reason: &str, message: &str) -> Waiting {
    Waiting {
        container: container.into(),
        reason: reason.into(),
        message: message.into(),
    }
}

/// A pod whose agent runs since `since`.
fn running(since: i64) -> PodFacts {
    PodFacts {
        agent_started_at: Some(at(since)),
        stage_exit_code: Some(0),
        ..pod()
    }
}

/// A finished pod whose agent ran from +10 to +90.
fn finished(exit_code: i32, summary: Option<TerminationSummary>) -> PodFacts {
    PodFacts {
        finished: true,
        agent_started_at: Some(at(10)),
        agent_exit_code: Some(exit_code),
        agent_finished_at: Some(at(90)),
        stage_exit_code: Some(0),
        summary,
        ..pod()
    }
}

fn results() -> Vec<ResultEntry> {
    COMPLETED_RUN_RESULTS
        .iter()
        .map(|name| ResultEntry {
            name: (*name).into(),
            size: 100,
            sha256: "d".repeat(64),
        })
        .collect()
}

fn summary(state: RunState, exit_code: i32, stderr: &str) -> TerminationSummary {
    TerminationSummary {
        state,
        exit_code: Some(exit_code),
        timed_out: state == RunState::TimedOut,
        stderr_tail: stderr.into(),
        results: results(),
        results_error: None,
        gpu_devices: Vec::new(),
    }
}

fn facts_at(job: JobFacts, pod: Option<PodFacts>, offset: i64) -> Facts {
    Facts {
        job: Some(job),
        pod,
        workload: None,
        warnings: Vec::new(),
        report: None,
        now: now(offset),
    }
}

/// The decision on `facts` and the status it renders.
fn assess(execution: &AgentExecution, facts: &Facts) -> (AgentExecutionStatus, Decision) {
    let decision = decide(execution, facts);
    (render(execution, &decision.standing, facts.now), decision)
}

fn condition(status: &AgentExecutionStatus, type_: ConditionType) -> Option<&Condition> {
    conditions::get(&status.conditions, type_)
}

fn container(name: &str, state: ContainerState) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(state),
        ..Default::default()
    }
}

fn terminated_state(exit_code: i32, message: Option<String>) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            started_at: Some(at(10)),
            finished_at: Some(at(90)),
            message,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn waiting_state(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: Some(message.into()),
        }),
        ..Default::default()
    }
}

fn k8s_pod(phase: &str, init: Vec<ContainerStatus>, main: Vec<ContainerStatus>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("errand-calc-x7k2p".into()),
            creation_timestamp: Some(at(2)),
            ..Default::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some(phase.into()),
            init_container_statuses: Some(init),
            container_statuses: Some(main),
            ..Default::default()
        }),
    }
}

fn staged() -> Vec<ResultEntry> {
    results().into_iter().take(1).collect()
}

fn disruption(reason: &str, message: &str) -> Option<Cause> {
    Some(Cause {
        reason: reason.into(),
        message: message.into(),
    })
}
