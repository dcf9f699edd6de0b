//! Tests of the builders: every property DESIGN.md §4 asks of the Job, on the built objects, by subject over the fixtures here.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::api::contract::{AGENT_CONTAINER, STAGE_CONTAINER};
use crate::api::{
    AgentEnvironmentSpec, AgentExecution, AgentExecutionSpec, AgentSpec, Compute, ComputeResources,
    RuntimeSecurity,
};
use crate::controller::build::{
    AGENT_CONFIG_KEY, BuildError, ExecutionOwner, SNAPSHOT_KEY, SNAPSHOT_PATH, resources,
};
use crate::controller::config::ControllerConfig;
use crate::resolve::{InMemoryCatalog, Snapshot, resolve_execution};
use crate::testing::{NS, SECRET_VALUE};

mod children;
mod extension;
mod network_policy;
mod pod;

fn agent(security: Option<RuntimeSecurity>) -> AgentSpec {
    AgentSpec::test()
        .with_args(&["--verbose"])
        .with_security(security)
}

/// `prod` with a GPU, placement and a scheduling class.
fn gpu_environment() -> AgentEnvironmentSpec {
    AgentEnvironmentSpec::test().with_compute(Compute {
        resources: Some(ComputeResources {
            limits: [
                ("cpu".into(), Quantity("2".into())),
                ("memory".into(), Quantity("4Gi".into())),
                ("nvidia.com/gpu".into(), Quantity("1".into())),
            ]
            .into(),
            requests: [("cpu".into(), Quantity("1".into()))].into(),
        }),
        node_selector: [("gpu".into(), "a100".into())].into(),
        tolerations: vec![Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }],
        priority_class_name: Some("batch-high".into()),
        runtime_class_name: Some("nvidia".into()),
        ..Compute::default()
    })
}

fn spec(queue: Option<&str>) -> AgentExecutionSpec {
    AgentExecutionSpec::test()
        .with_workdir("repo", &[("data#tables/", "data")])
        .with_timeouts(600, 120)
        .with_queue(queue)
}

fn resolve(spec: &AgentExecutionSpec, security: Option<RuntimeSecurity>) -> Snapshot {
    resolve_in(spec, security, gpu_environment())
}

/// Resolves `spec` with the GPU environment replaced by `environment`.
fn resolve_in(
    spec: &AgentExecutionSpec,
    security: Option<RuntimeSecurity>,
    environment: AgentEnvironmentSpec,
) -> Snapshot {
    let catalog = InMemoryCatalog::test()
        .with_agent(NS, "calculator", agent(security))
        .with_environment(NS, "prod", environment);
    resolve_execution(NS, spec, &catalog).expect("the fixture resolves")
}

/// A resolved snapshot with a GPU environment, a secret binding and a two-part workdir.
fn snapshot() -> Snapshot {
    resolve(&spec(None), None)
}

fn identity() -> ExecutionOwner {
    ExecutionOwner::of(&AgentExecution::test().with_spec(spec(None))).unwrap()
}

fn config() -> ControllerConfig {
    ControllerConfig::new("errand.local/errand:dev")
}

fn built_job(snapshot: &Snapshot) -> Job {
    job(&identity(), snapshot, &config())
}

fn pod_spec(job: &Job) -> &PodSpec {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn container<'a>(job: &'a Job, name: &str) -> &'a Container {
    let pod = pod_spec(job);
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn mount_paths(container: &Container) -> Vec<(&str, bool)> {
    container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.mount_path.as_str(), m.read_only == Some(true)))
        .collect()
}
