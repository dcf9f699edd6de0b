//! The CustomResourceDefinitions of every errand resource, as objects and as committed YAML files.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{
    Agent, AgentDeployment, AgentEnvironment, AgentExecution, AgentExtension, AgentRuntime,
    AgentSchedule, Fileset,
};

/// Every CRD with the file name it is committed under in `crds/`, sorted by file name so that
/// `cat crds/*.yaml` equals `errand crds`.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("agentdeployments.errand.dev.yaml", AgentDeployment::crd()),
        ("agentenvironments.errand.dev.yaml", AgentEnvironment::crd()),
        ("agentexecutions.errand.dev.yaml", AgentExecution::crd()),
        ("agentextensions.errand.dev.yaml", AgentExtension::crd()),
        ("agentruntimes.errand.dev.yaml", AgentRuntime::crd()),
        ("agents.errand.dev.yaml", Agent::crd()),
        ("agentschedules.errand.dev.yaml", AgentSchedule::crd()),
        ("filesets.errand.dev.yaml", Fileset::crd()),
    ]
}

/// One CRD as a YAML document, exactly as committed (starting with `---`).
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    Ok(format!("---\n{}", serde_saphyr::to_string(crd)?))
}

/// All CRDs as one multi-document YAML stream, as `errand crds` prints it.
pub fn all_yaml() -> Result<String, serde_saphyr::ser::Error> {
    all().iter().map(|(_, crd)| to_yaml(crd)).collect()
}
