//! The deployment operations above the [`Deployments`] seam: waiting until a deployment settles, the deployments serving an Agent, and `redeploy`'s steps (the new Agent checked and pointed at, then the replaced one removed once unused).

use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::backend::{Backend, Deployments, Document};
use super::{Error, ErrorCode};
use crate::api::contract::REPLACED_AGENT_ANNOTATION;
use crate::api::{AgentDeployment, DeploymentPhase};
use crate::local::ObjectKind;

/// How often waiting commands look at a deployment again.
const POLL: Duration = Duration::from_millis(500);

/// Waits until deployment `name` is Ready or Failed for its current spec.
pub async fn settled(deployments: &dyn Deployments, name: &str) -> Result<AgentDeployment, Error> {
    loop {
        let deployment = deployments.deployment(name).await?;
        if settled_phase(&deployment).is_some() {
            return Ok(deployment);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Ready or Failed, as observed for the deployment's current generation.
pub fn settled_phase(deployment: &AgentDeployment) -> Option<DeploymentPhase> {
    let status = deployment.status.as_ref()?;
    let current = status.observed_generation.is_some()
        && status.observed_generation == deployment.metadata.generation;
    status
        .phase
        .filter(|p| current && matches!(p, DeploymentPhase::Ready | DeploymentPhase::Failed))
}

/// The deployments whose spec names Agent `agent`.
pub fn serving(deployments: &[AgentDeployment], agent: &str) -> Vec<String> {
    deployments
        .iter()
        .filter(|d| d.spec.agent_ref.as_ref().is_some_and(|r| r.name == agent))
        .filter_map(|d| d.metadata.name.clone())
        .collect()
}

/// `<deployment>-<8 hex of the spec's sha256>`: the same config always gets the same name, so
/// a re-run finds the Agent it created.
fn new_agent_name(deployment: &str, spec: &serde_json::Value) -> String {
    let digest = hex::encode(Sha256::digest(spec.to_string().as_bytes()));
    let base: String = deployment.chars().take(54).collect();
    format!("{}-{}", base.trim_end_matches('-'), &digest[..8])
}

/// The first step of `redeploy`: the new Agent (`document`, named here by its config) is
/// created and checked against `deployment` (named `name`) first (an admission dry run), so an invalid
/// one changes nothing and is removed again; then the deployment is pointed at it. Returns the
/// new Agent's name and the Agent it replaces, if any.
pub async fn roll_out(
    backend: &dyn Backend,
    name: &str,
    deployment: &AgentDeployment,
    mut document: Document,
) -> Result<(String, Option<String>), Error> {
    let deployments = backend.deployments();
    let agent = new_agent_name(name, &document.object["spec"]);
    document.object["metadata"]["name"] = json!(agent);
    let current = deployment.spec.agent_ref.as_ref().map(|r| r.name.clone());
    let replaced = deployment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REPLACED_AGENT_ANNOTATION))
        .cloned()
        .or_else(|| current.clone().filter(|c| *c != agent));
    if current.as_deref() != Some(agent.as_str()) {
        let existed = backend
            .objects(ObjectKind::Agent)
            .await?
            .iter()
            .any(|o| o["metadata"]["name"] == agent.as_str());
        backend.apply(std::slice::from_ref(&document)).await?;
        let from = replaced.as_deref().unwrap_or_default();
        if let Err(refused) = deployments.point_at_agent(name, &agent, from, true).await {
            if !existed {
                backend.delete_object(ObjectKind::Agent, &agent).await?;
            }
            return Err(refused);
        }
        deployments
            .point_at_agent(name, &agent, from, false)
            .await?;
    }
    Ok((agent, replaced))
}

/// The last step of `redeploy`, once the deployment is Ready: the Agent it replaced is removed
/// when no deployment references it any more. Returns whether it was removed.
pub async fn remove_replaced(
    backend: &dyn Backend,
    name: &str,
    agent: &str,
    replaced: Option<&str>,
) -> Result<bool, Error> {
    let deployments = backend.deployments();
    let mut replaced_removed = false;
    if let Some(old) = replaced.filter(|old| *old != agent) {
        if serving(&deployments.deployments().await?, old).is_empty() {
            match backend.delete_object(ObjectKind::Agent, old).await {
                Ok(()) => replaced_removed = true,
                Err(e) if e.code == ErrorCode::NotFound => replaced_removed = true,
                Err(e) => return Err(e),
            }
        }
        deployments.forget_replaced_agent(name).await?;
    }
    Ok(replaced_removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(
        generation: i64,
        observed: Option<i64>,
        phase: DeploymentPhase,
    ) -> AgentDeployment {
        serde_json::from_value(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentDeployment",
            "metadata": {"name": "calc", "generation": generation},
            "spec": {"agentRef": {"name": "calculator"}},
            "status": {"phase": phase, "observedGeneration": observed},
        }))
        .unwrap()
    }

    #[test]
    fn a_deployment_settles_only_on_ready_or_failed_of_its_current_spec() {
        use DeploymentPhase::*;
        assert_eq!(settled_phase(&deployment(2, Some(2), Ready)), Some(Ready));
        assert_eq!(settled_phase(&deployment(2, Some(2), Failed)), Some(Failed));
        assert_eq!(settled_phase(&deployment(2, Some(2), Starting)), None);
        // Ready for the previous spec: a redeploy has not been seen yet.
        assert_eq!(settled_phase(&deployment(2, Some(1), Ready)), None);
        assert_eq!(settled_phase(&deployment(1, None, Ready)), None);
    }

    #[test]
    fn a_redeployed_agent_is_named_by_its_config_and_fits_a_label() {
        let a = new_agent_name("calc", &json!({"config": {"name": "a"}}));
        assert_eq!(a, new_agent_name("calc", &json!({"config": {"name": "a"}})));
        assert_ne!(a, new_agent_name("calc", &json!({"config": {"name": "b"}})));
        assert!(a.starts_with("calc-") && a.len() == 13, "{a}");
        let long = new_agent_name(&"x".repeat(56), &json!({}));
        assert!(long.len() <= 63, "{long}");
    }
}
