//! Observation: the execution's Job, its pods, Kueue's Workload for the Job and their Warning events reduced to the plain facts its status is decided from.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::ResultEntry;
use crate::api::contract::{
    AGENT_CONTAINER, EXTENSION_CONTAINER, KUEUE_QUEUE_LABEL, STAGE_CONTAINER,
};
use crate::cluster::kueue::Workload;
use crate::runner::ExtensionSummary;
use crate::runner::end_report::RunEndReport;
use crate::runner::termination::{StagedSummary, TerminationSummary};

/// Waiting reasons of a container whose image cannot be pulled.
pub const IMAGE_PULL_REASONS: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// Everything the status of a resolved execution is decided from, besides the execution.
#[derive(Clone, Debug, PartialEq)]
pub struct Facts {
    /// Its Job; `None` when the Job was created and is gone (confirmed with the API server,
    /// not just the cache).
    pub job: Option<JobFacts>,
    /// Its newest pod (at most one is expected).
    pub pod: Option<PodFacts>,
    /// What Kueue says of the Job, when Kueue runs and has a Workload for it.
    pub workload: Option<WorkloadFacts>,
    /// Warning events about its pods, or about its Job when it has no pod, oldest first; read
    /// only once a start timed out without a reason in the pod's status (see
    /// [`Decision::needs_warnings`](super::Decision::needs_warnings)).
    pub warnings: Vec<Warning>,
    /// The run's end as its runner reported it, once the controller checked the report against
    /// the saved manifest and recorded it ([`crate::runner::end_report`]): the execution ends on
    /// it before its pod is seen finished, and the pod's end, once seen, still wins where it
    /// disagrees. `None` when nothing was reported.
    pub report: Option<RunEndReport>,
    /// The current time.
    pub now: Timestamp,
}

/// What the Job says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFacts {
    /// Its uid (its events name it).
    pub uid: Option<String>,
    /// Kueue holds it (`suspend: true`).
    pub suspended: bool,
    /// The Kueue LocalQueue it was submitted to, if any.
    pub queue: Option<String>,
    /// When it started, or else when it was resumed (Kueue unsuspended it) or created; `None`
    /// while Kueue holds it (suspended) and while a resume is on its way (not suspended any more, the Job controller not yet caught
    /// up), which counts from now: a wait in Kueue's queue is no start time.
    pub started: Option<Timestamp>,
    /// Why the Job controller failed it (its `Failed` or `FailureTarget` condition), once it did.
    pub failure: Option<Cause>,
}

/// The reason and message of a condition of the Job or the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cause {
    /// The condition's reason, e.g. `DeadlineExceeded` or `Unschedulable`, empty if none.
    pub reason: String,
    /// The condition's message, empty if none.
    pub message: String,
}

impl Cause {
    fn of(reason: Option<&String>, message: Option<&String>) -> Self {
        Self {
            reason: reason.cloned().unwrap_or_default(),
            message: message.cloned().unwrap_or_default(),
        }
    }
}

/// What Kueue says of the Job's Workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadFacts {
    /// The Workload's name.
    pub name: String,
    /// Why Kueue has not admitted it: its `QuotaReserved` condition while false (no quota yet,
    /// or inadmissible), else its `Admitted` condition while false (admission checks pending).
    /// `None` once admitted or before Kueue said anything.
    pub pending: Option<Cause>,
    /// Kueue admitted it (`Admitted` true): the Job resumes.
    pub admitted: bool,
}

/// What the pod says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// Its name.
    pub name: String,
    /// When it was created.
    pub created: Option<Timestamp>,
    /// Its phase is `Succeeded` or `Failed`.
    pub finished: bool,
    /// It is being deleted.
    pub deleting: bool,
    /// When the agent container started, if it has.
    pub agent_started_at: Option<Time>,
    /// The agent container's exit code, once it terminated.
    pub agent_exit_code: Option<i32>,
    /// When the agent container terminated.
    pub agent_finished_at: Option<Time>,
    /// Why the kubelet says the agent container terminated (`Completed`, `Error`,
    /// `OOMKilled`), empty before it did.
    pub agent_terminated_reason: String,
    /// The agent's image by digest, as the kubelet reports it (`imageID`), once the container
    /// exists.
    pub agent_image_id: Option<String>,
    /// The stage container's exit code, once it terminated.
    pub stage_exit_code: Option<i32>,
    /// The runner's summary from the agent's termination message (else the stage's, when
    /// staging failed).
    pub summary: Option<TerminationSummary>,
    /// What staging saved, from the stage's termination message when it succeeded.
    pub staged: Vec<ResultEntry>,
    /// The extension's container, once it terminated (executions with an extension only).
    pub extension: Option<ExtensionFacts>,
    /// The node it was bound to.
    pub node: Option<String>,
    /// The pod's status reason (`Evicted`, `OutOfnvidia.com/gpu`, ...), empty if none.
    pub reason: String,
    /// The pod's status message, empty if none.
    pub message: String,
    /// Its `DisruptionTarget` condition: why Kubernetes is deleting it (eviction, preemption,
    /// node loss), if it is.
    pub disruption: Option<Cause>,
    /// Its `PodScheduled: False` condition.
    pub unschedulable: Option<Cause>,
    /// Its waiting containers (init containers first).
    pub waiting: Vec<Waiting>,
    /// Its run control annotation (`errand.dev/control`), as the runner reads it.
    pub control: Option<String>,
}

/// How the extension's container ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtensionFacts {
    /// Its exit code.
    pub exit_code: i32,
    /// The step's summary from its termination message; `None` when it did not run the step
    /// (the message then says why) or could not report.
    pub summary: Option<ExtensionSummary>,
    /// Its termination message, when it is not a summary.
    pub message: String,
}

/// A container that waits, with the kubelet's reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Waiting {
    /// The container.
    pub container: String,
    /// The waiting reason, e.g. `ImagePullBackOff`, empty if none.
    pub reason: String,
    /// The waiting message, empty if none.
    pub message: String,
}

/// A Warning event the kubelet or the scheduler published about a pod, or the Job controller
/// about a Job it could not create a pod for. The kubelet's container status can drop back to
/// `PodInitializing` between two pull attempts, and a pod the Job controller could not create
/// has no status at all, so the event is what still names the cause when the start timeout
/// passes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The container the event is about, if it names one.
    pub container: Option<String>,
    /// The event's reason, e.g. `ErrImageNeverPull` or `Failed`.
    pub reason: String,
    /// The event's message.
    pub message: String,
}

impl Warning {
    /// The warning an event carries, if it is a Warning.
    pub fn from_event(event: &Event) -> Option<Self> {
        if event.type_.as_deref() != Some("Warning") {
            return None;
        }
        // `spec.containers{agent}` or `spec.initContainers{errand-stage}`.
        let container = event
            .involved_object
            .field_path
            .as_deref()
            .and_then(|path| path.split_once('{'))
            .map(|(_, rest)| rest.trim_end_matches('}').to_owned());
        Some(Self {
            container,
            reason: event.reason.clone().unwrap_or_default(),
            message: event.message.clone().unwrap_or_default(),
        })
    }

    /// Whether the event says an image cannot be pulled.
    pub fn is_image_pull(&self) -> bool {
        IMAGE_PULL_REASONS.contains(&self.reason.as_str())
            || (self.reason == "Failed"
                && IMAGE_PULL_REASONS.iter().any(|r| self.message.contains(r)))
    }
}

/// The facts of `job` (`None`: gone), the newest of `pods` and Kueue's `workload` for the
/// Job, at `now`, without warnings.
pub fn facts(
    job: Option<&Job>,
    pods: &[&Pod],
    workload: Option<&Workload>,
    now: Timestamp,
) -> Facts {
    let newest = pods
        .iter()
        .copied()
        .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    Facts {
        job: job.map(job_facts),
        pod: newest.map(pod_facts),
        workload: workload.map(workload_facts),
        warnings: Vec::new(),
        report: None,
        now,
    }
}

/// What `workload` says.
pub fn workload_facts(workload: &Workload) -> WorkloadFacts {
    let unmet = |type_| {
        workload
            .condition(type_)
            .filter(|c| c.status == "False")
            .map(|c| Cause {
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
    };
    WorkloadFacts {
        name: workload.metadata.name.clone().unwrap_or_default(),
        pending: unmet("QuotaReserved").or_else(|| unmet("Admitted")),
        admitted: workload
            .condition("Admitted")
            .is_some_and(|c| c.status == "True"),
    }
}

/// Reasons of a `DisruptionTarget` condition that mean the pod's node was lost: the taint
/// manager evicts pods from a node that stayed NotReady or unreachable past their
/// tolerations, and the pod garbage collector deletes pods bound to a node that is gone.
pub const NODE_LOSS_DISRUPTIONS: [&str; 2] = ["DeletionByTaintManager", "DeletionByPodGC"];

impl PodFacts {
    /// Whether Kubernetes is deleting the pod because its node was lost.
    pub fn node_lost(&self) -> bool {
        self.disruption
            .as_ref()
            .is_some_and(|d| NODE_LOSS_DISRUPTIONS.contains(&d.reason.as_str()))
    }
}

/// When the Job's start timeout counts from: its start time; for a Job Kueue held and let go,
/// the time it was resumed (its `Suspended` condition turning false, `None` until then); for
/// any other, its creation.
fn job_started(job: &Job) -> Option<Timestamp> {
    let status = job.status.as_ref();
    if let Some(start) = status.and_then(|s| s.start_time.as_ref()) {
        return Some(start.0);
    }
    if job.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
        return None; // held (by Kueue): not started, and the wait is no start time
    }
    let held = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Suspended"));
    match held {
        Some(condition) => match condition.status.as_str() {
            "False" => condition.last_transition_time.as_ref().map(|t| t.0),
            _ => None,
        },
        _ => job.metadata.creation_timestamp.as_ref().map(|t| t.0),
    }
}

/// What `job` says.
fn job_facts(job: &Job) -> JobFacts {
    let status = job.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    JobFacts {
        uid: job.metadata.uid.clone(),
        suspended: job.spec.as_ref().and_then(|s| s.suspend) == Some(true),
        queue: job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(KUEUE_QUEUE_LABEL))
            .cloned(),
        started: job_started(job),
        failure: conditions
            .iter()
            .find(|c| (c.type_ == "Failed" || c.type_ == "FailureTarget") && c.status == "True")
            .map(|c| Cause::of(c.reason.as_ref(), c.message.as_ref())),
    }
}

/// What `pod` says.
pub fn pod_facts(pod: &Pod) -> PodFacts {
    let status = pod.status.as_ref();
    let agent = container_status(pod, AGENT_CONTAINER, false);
    let stage = container_status(pod, STAGE_CONTAINER, true);
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    PodFacts {
        name: pod.metadata.name.clone().unwrap_or_default(),
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        finished: matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        control: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::api::contract::CONTROL_ANNOTATION))
            .cloned(),
        agent_started_at: started_at(agent).cloned(),
        agent_exit_code: terminated(agent).map(|t| t.exit_code),
        agent_finished_at: terminated(agent).and_then(|t| t.finished_at.clone()),
        agent_terminated_reason: terminated(agent)
            .and_then(|t| t.reason.clone())
            .unwrap_or_default(),
        agent_image_id: agent
            .map(|a| a.image_id.clone())
            .filter(|id| !id.is_empty()),
        stage_exit_code: terminated(stage).map(|t| t.exit_code),
        summary: termination_message(agent)
            .and_then(TerminationSummary::parse)
            .or_else(|| termination_message(stage).and_then(TerminationSummary::parse)),
        staged: termination_message(stage)
            .and_then(StagedSummary::parse)
            .map(|s| s.staged)
            .unwrap_or_default(),
        extension: terminated(container_status(pod, EXTENSION_CONTAINER, false)).map(|t| {
            let message = t.message.clone().unwrap_or_default();
            let summary = serde_json::from_str::<ExtensionSummary>(message.trim()).ok();
            ExtensionFacts {
                exit_code: t.exit_code,
                message: if summary.is_some() {
                    String::new()
                } else {
                    message
                },
                summary,
            }
        }),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        reason: status.and_then(|s| s.reason.clone()).unwrap_or_default(),
        message: status.and_then(|s| s.message.clone()).unwrap_or_default(),
        disruption: conditions
            .iter()
            .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
            .map(|c| Cause::of(c.reason.as_ref(), c.message.as_ref())),
        unschedulable: conditions
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .map(|c| Cause::of(c.reason.as_ref(), c.message.as_ref())),
        waiting: all_statuses(pod)
            .filter_map(|cs| {
                let waiting = cs.state.as_ref()?.waiting.as_ref()?;
                Some(Waiting {
                    container: cs.name.clone(),
                    reason: waiting.reason.clone().unwrap_or_default(),
                    message: waiting.message.clone().unwrap_or_default(),
                })
            })
            .collect(),
    }
}

/// When the container started, if it has.
fn started_at(status: Option<&ContainerStatus>) -> Option<&Time> {
    match status?.state.as_ref()? {
        ContainerState {
            running: Some(running),
            ..
        } => running.started_at.as_ref(),
        ContainerState {
            terminated: Some(terminated),
            ..
        } => terminated.started_at.as_ref(),
        _ => None,
    }
}

fn container_status<'a>(pod: &'a Pod, name: &str, init: bool) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    let list = if init {
        status.init_container_statuses.as_ref()
    } else {
        status.container_statuses.as_ref()
    };
    list?.iter().find(|c| c.name == name)
}

fn all_statuses(pod: &Pod) -> impl Iterator<Item = &ContainerStatus> {
    let status = pod.status.as_ref();
    let init = status
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten();
    let main = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten();
    init.chain(main)
}

fn terminated(
    status: Option<&ContainerStatus>,
) -> Option<&k8s_openapi::api::core::v1::ContainerStateTerminated> {
    status?.state.as_ref()?.terminated.as_ref()
}

fn termination_message(status: Option<&ContainerStatus>) -> Option<&str> {
    terminated(status)?.message.as_deref()
}
