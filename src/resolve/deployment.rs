//! A deployment resolves as an execution with nothing to run once: the same agent, environment, secret and compute rules, and the same snapshot.

pub mod status;
pub mod window;

use sha2::{Digest, Sha256};

use super::{Catalog, InvalidSpec, Snapshot, resolve_execution};
use crate::api::{AgentDeploymentSpec, AgentExecutionSpec};

/// The execution-shaped spec a deployment is resolved as: its agent and environment fields,
/// which carry the same names (so every problem names the deployment's own field), and the
/// execution defaults for the rest, which a deployment's pods never read.
pub fn as_execution_spec(spec: &AgentDeploymentSpec) -> AgentExecutionSpec {
    AgentExecutionSpec {
        agent_ref: spec.agent_ref.clone(),
        agent: spec.agent.clone(),
        environment_ref: spec.environment_ref.clone(),
        environment: spec.environment.clone(),
        ..AgentExecutionSpec::default()
    }
}

/// Resolves, merges and validates a deployment's agent and environment in `namespace` with
/// the rules of [`resolve_execution`], reporting every problem at once.
pub fn resolve_deployment(
    namespace: &str,
    spec: &AgentDeploymentSpec,
    catalog: &dyn Catalog,
) -> Result<Snapshot, InvalidSpec> {
    resolve_execution(namespace, &as_execution_spec(spec), catalog)
}

/// `sha256:<hex>` of the spec fields a snapshot is taken from (agent and environment): a
/// deployment is resolved again only when this changes, so an edit of its replicas or probe
/// never picks up a changed AgentEnvironment, and a redeploy always does.
pub fn source_digest(spec: &AgentDeploymentSpec) -> String {
    let source = serde_json::json!({
        "agentRef": spec.agent_ref,
        "agent": spec.agent,
        "environmentRef": spec.environment_ref,
        "environment": spec.environment,
    });
    let bytes = serde_json::to_vec(&source).expect("a spec always serializes");
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AgentEnvironmentSpec, Reference};
    use crate::resolve::InMemoryCatalog;

    #[test]
    fn problems_name_the_deployments_own_fields() {
        let spec = AgentDeploymentSpec {
            agent_ref: Some(Reference::named("nope")),
            environment_ref: Some(Reference::named("missing")),
            ..AgentDeploymentSpec::default()
        };
        let invalid = resolve_deployment("team-a", &spec, &InMemoryCatalog::default())
            .expect_err("nothing exists");
        let fields: Vec<&str> = invalid.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.agentRef.name", "spec.environmentRef.name"],
            "{invalid}"
        );
    }

    #[test]
    fn the_source_digest_changes_with_the_agent_and_environment_only() {
        let spec = AgentDeploymentSpec {
            agent_ref: Some(Reference::named("calc")),
            ..AgentDeploymentSpec::default()
        };
        let scaled = AgentDeploymentSpec {
            replicas: 3,
            starting_timeout_seconds: 5,
            ..spec.clone()
        };
        assert_eq!(source_digest(&spec), source_digest(&scaled));
        let redeployed = AgentDeploymentSpec {
            agent_ref: Some(Reference::named("calc-v2")),
            ..spec.clone()
        };
        assert_ne!(source_digest(&spec), source_digest(&redeployed));
        let environment = AgentDeploymentSpec {
            environment: Some(AgentEnvironmentSpec::default()),
            ..spec.clone()
        };
        assert_ne!(source_digest(&spec), source_digest(&environment));
    }
}
