//! The CustomResourceDefinitions of every errand resource, as objects and as committed YAML files.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{Agent, AgentEnvironment, AgentExecution, Fileset};

/// Every CRD with the file name it is committed under in `crds/`.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("agents.errand.dev.yaml", Agent::crd()),
        ("agentenvironments.errand.dev.yaml", AgentEnvironment::crd()),
        ("filesets.errand.dev.yaml", Fileset::crd()),
        ("agentexecutions.errand.dev.yaml", AgentExecution::crd()),
    ]
}

/// One CRD as YAML, exactly as committed.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(crd)
}

/// All CRDs as one multi-document YAML stream, as `errand crds` prints it.
pub fn all_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for (_, crd) in all() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}
