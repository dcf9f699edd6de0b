//! AgentDeployments through the API server: the cluster's side of the deployment commands.

use std::time::Duration;

use async_trait::async_trait;
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams, PropagationPolicy,
};
use serde_json::json;

use super::{Cluster, FIELD_MANAGER, api_error};
use crate::api::AgentDeployment;
use crate::api::contract::{AGENT_CONTAINER, DEPLOYMENT_LABEL, REPLACED_AGENT_ANNOTATION};
use crate::controller::names::label_value;
use crate::ops::backend::Deployments;
use crate::ops::{Error, ErrorCode};
use crate::ops::{GatewayClient, GatewayEndpoint};

/// How long `undeploy` waits for a deployment's children to go.
const DELETE_WAIT: Duration = Duration::from_secs(120);

#[async_trait]
impl Deployments for Cluster {
    async fn create_deployment(
        &self,
        deployment: &AgentDeployment,
    ) -> Result<AgentDeployment, Error> {
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        self.api::<AgentDeployment>()
            .create(&params, deployment)
            .await
            .map_err(api_error)
    }

    async fn deployment(&self, name: &str) -> Result<AgentDeployment, Error> {
        self.api::<AgentDeployment>()
            .get_opt(name)
            .await
            .map_err(api_error)?
            .ok_or_else(|| not_found(name, &self.namespace))
    }

    async fn deployments(&self) -> Result<Vec<AgentDeployment>, Error> {
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
    ) -> Result<(), Error> {
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

    async fn forget_replaced_agent(&self, name: &str) -> Result<(), Error> {
        let patch = json!({"metadata": {"annotations": {REPLACED_AGENT_ANNOTATION: null}}});
        self.api::<AgentDeployment>()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(api_error)?;
        Ok(())
    }

    async fn delete_deployment(&self, name: &str) -> Result<(), Error> {
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
                return Err(Error::new(
                    ErrorCode::Timeout,
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

    async fn gateway(&self, args: &GatewayEndpoint) -> Result<GatewayClient, Error> {
        GatewayClient::new(args, self.token.clone())
    }

    async fn logs(&self, name: &str, lines: usize, follow: bool) -> Result<(), Error> {
        self.deployment(name).await?;
        // The label the controller puts on the deployment's pods (shortened with a hash when
        // the name is not a valid label value).
        let selector = format!("{DEPLOYMENT_LABEL}={}", label_value(name));
        let pods = self.api::<Pod>();
        let mut names: Vec<String> = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_error)?
            .items
            .into_iter()
            .filter_map(|pod| pod.metadata.name)
            .collect();
        if names.is_empty() {
            return Err(Error::new(
                ErrorCode::NotReady,
                format!(
                    "AgentDeployment {name:?} has no pods yet (label {selector} in namespace {:?}); \
                     try again once `errand deployments get {name}` shows it starting",
                    self.namespace
                ),
            ));
        }
        names.sort();
        let params = LogParams {
            container: Some(AGENT_CONTAINER.into()),
            follow,
            tail_lines: Some(i64::try_from(lines).unwrap_or(i64::MAX)),
            ..LogParams::default()
        };
        let opened = futures::future::join_all(names.iter().map(|pod| {
            let (pods, params) = (pods.clone(), params.clone());
            async move { pods.log_stream(pod, &params).await }
        }))
        .await;
        // A pod whose agent container has not started has no log yet: the others are read.
        let mut streams = Vec::new();
        let mut first_error = None;
        for (pod, stream) in names.iter().zip(opened) {
            match stream {
                Ok(stream) => streams.push(Box::pin(stream.lines().map(move |l| (pod, l)))),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if streams.is_empty() {
            return Err(first_error.map_or_else(|| not_found(name, &self.namespace), api_error));
        }
        // Several replicas interleave, each line prefixed with its pod as `kubectl logs --prefix`.
        let prefixed = names.len() > 1;
        let mut merged = futures::stream::select_all(streams);
        while let Some((pod, line)) = merged.next().await {
            let line = line.map_err(|e| {
                Error::new(
                    ErrorCode::ClusterError,
                    format!("reading the log of pod {pod}: {e}"),
                )
            })?;
            if prefixed {
                crate::ops::stdout::write_line(format!("[{pod}] {line}"));
            } else {
                crate::ops::stdout::write_line(line);
            }
        }
        Ok(())
    }
}

fn not_found(name: &str, namespace: &str) -> Error {
    Error::new(
        ErrorCode::NotFound,
        format!("no AgentDeployment named {name:?} in namespace {namespace:?}"),
    )
}
