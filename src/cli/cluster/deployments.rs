//! AgentDeployments through the API server: the cluster's side of the deployment commands.

use std::time::Duration;

use async_trait::async_trait;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::json;

use super::{Cluster, FIELD_MANAGER, api_error};
use crate::api::AgentDeployment;
use crate::api::contract::REPLACED_AGENT_ANNOTATION;
use crate::cli::backend::Deployments;
use crate::cli::gateway_client::{GatewayArgs, GatewayClient};
use crate::cli::output::CliError;

/// How long `undeploy` waits for a deployment's children to go.
const DELETE_WAIT: Duration = Duration::from_secs(120);

#[async_trait]
impl Deployments for Cluster {
    async fn create_deployment(
        &self,
        deployment: &AgentDeployment,
    ) -> Result<AgentDeployment, CliError> {
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        self.api::<AgentDeployment>()
            .create(&params, deployment)
            .await
            .map_err(api_error)
    }

    async fn deployment(&self, name: &str) -> Result<AgentDeployment, CliError> {
        self.api::<AgentDeployment>()
            .get_opt(name)
            .await
            .map_err(api_error)?
            .ok_or_else(|| not_found(name, &self.namespace))
    }

    async fn deployments(&self) -> Result<Vec<AgentDeployment>, CliError> {
        Ok(self
            .api::<AgentDeployment>()
            .list(&ListParams::default())
            .await
            .map_err(api_error)?
            .items)
    }

    async fn point_at_agent(
        &self,
        name: &str,
        agent: &str,
        replaced: &str,
        dry_run: bool,
    ) -> Result<(), CliError> {
        // A merge patch: `agentRef` replaces the inline agent (the CEL rule allows one).
        let patch = json!({
            "metadata": {"annotations": {REPLACED_AGENT_ANNOTATION: replaced}},
            "spec": {"agentRef": {"name": agent}, "agent": null},
        });
        let params = PatchParams {
            dry_run,
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        self.api::<AgentDeployment>()
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(api_error)?;
        Ok(())
    }

    async fn forget_replaced_agent(&self, name: &str) -> Result<(), CliError> {
        let patch = json!({"metadata": {"annotations": {REPLACED_AGENT_ANNOTATION: null}}});
        self.api::<AgentDeployment>()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(api_error)?;
        Ok(())
    }

    async fn delete_deployment(&self, name: &str) -> Result<(), CliError> {
        let api = self.api::<AgentDeployment>();
        // Foreground: the deployment stays (Terminating) until its children are gone.
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {
                return Err(not_found(name, &self.namespace));
            }
            Err(e) => return Err(api_error(e)),
        }
        let deadline = tokio::time::Instant::now() + DELETE_WAIT;
        while api.get_opt(name).await.map_err(api_error)?.is_some() {
            if tokio::time::Instant::now() >= deadline {
                return Err(CliError::new(
                    "timeout",
                    format!(
                        "AgentDeployment {name:?} is still being deleted after {}s",
                        DELETE_WAIT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(super::POLL).await;
        }
        Ok(())
    }

    async fn gateway(&self, args: &GatewayArgs) -> Result<GatewayClient, CliError> {
        GatewayClient::new(args, self.token.clone())
    }

    async fn logs(&self, name: &str, _lines: usize, _follow: bool) -> Result<(), CliError> {
        // The agent servers are pods: kubectl reads their logs with the caller's RBAC.
        self.deployment(name).await?;
        Err(CliError::new(
            "local_only",
            format!(
                "errand logs reads the agent servers of a local deployment; on a cluster use \
                 `kubectl logs -n {} -l {}={name} -f`",
                self.namespace,
                crate::api::contract::DEPLOYMENT_LABEL
            ),
        ))
    }
}

fn not_found(name: &str, namespace: &str) -> CliError {
    CliError::new(
        "not_found",
        format!("no AgentDeployment named {name:?} in namespace {namespace:?}"),
    )
}
