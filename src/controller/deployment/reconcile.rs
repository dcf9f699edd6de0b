//! One reconcile of an AgentDeployment: resolve its agent and environment when they change, apply the children with server-side apply, and write the status the pure decision returns.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::build::{self, Children};
use crate::api::contract::SNAPSHOT_KEY;
use crate::api::{AgentDeployment, AgentDeploymentStatus, DeploymentPhase, SnapshotRef};
use crate::cluster::catalog::{self, ClusterCatalog};
use crate::controller::build::ExecutionOwner;
use crate::controller::config::{ControllerConfig, FIELD_MANAGER};
use crate::controller::error::{Error, Result};
use crate::controller::status_write::{Written, write_status};
use crate::resolve::deployment::status::{self, Observed};
use crate::resolve::{InvalidSpec, Snapshot, as_execution_spec, source_digest};

/// How long one reconcile may take before it is retried.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a failed reconcile waits before it is retried.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// How soon a reconcile that read a deployment older than the API server's looks again.
const STALE_READ_RETRY: Duration = Duration::from_secs(1);

/// What every deployment reconcile shares.
pub struct DeploymentContext {
    /// The API client.
    pub client: Client,
    /// The Agents, AgentEnvironments and AgentRuntimes to resolve against.
    pub catalog: ClusterCatalog,
    /// The pods' settings shared with executions (pull secrets, ServiceAccount, size limits).
    pub config: ControllerConfig,
}

/// Reconciles one deployment, failing (and so retrying) if it hangs.
pub async fn reconcile(
    deployment: Arc<AgentDeployment>,
    ctx: Arc<DeploymentContext>,
) -> Result<Action> {
    crate::controller::within_limit(RECONCILE_TIMEOUT, reconcile_once(&deployment, &ctx)).await
}

/// Logs a failed reconcile and retries it.
pub fn error_policy(
    deployment: Arc<AgentDeployment>,
    error: &Error,
    _ctx: Arc<DeploymentContext>,
) -> Action {
    crate::controller::retry_after_failure(&*deployment, error, RETRY_AFTER)
}

async fn reconcile_once(deployment: &AgentDeployment, ctx: &DeploymentContext) -> Result<Action> {
    let owner = ExecutionOwner::of_object(deployment)?;
    let writer = StatusWriter {
        api: Api::namespaced(ctx.client.clone(), &owner.namespace),
        deployment,
    };
    let previous = deployment.status.clone().unwrap_or_default();
    let now = Timestamp::now();
    let generation = deployment.metadata.generation;
    if deployment.metadata.deletion_timestamp.is_some() {
        // Foreground deletion keeps the deployment until its children are gone: say so.
        if previous.phase != Some(DeploymentPhase::Terminating)
            && let Some(stale) = writer.write(status::terminating(&previous, now)).await?
        {
            return Ok(stale);
        }
        return Ok(Action::await_change());
    }
    let source = source_digest(&deployment.spec);
    let current = match (&previous.snapshot, previous.source_digest.as_deref()) {
        (Some(current), Some(recorded)) if recorded == source => {
            read_snapshot(ctx, &owner.namespace, current).await?
        }
        _ => None,
    };
    let (snapshot, source, refused_redeploy) = match current {
        Some(snapshot) => (snapshot, source, None),
        None => match resolve(ctx, &owner.namespace, deployment).await? {
            Ok(snapshot) => (snapshot, source, None),
            Err(invalid) => {
                let message = invalid.to_string();
                let serving = match &previous.snapshot {
                    Some(serving) => read_snapshot(ctx, &owner.namespace, serving).await?,
                    None => None,
                };
                let (Some(serving), Some(serving_source)) =
                    (serving, previous.source_digest.clone())
                else {
                    info!(deployment = %owner.name, namespace = %owner.namespace, "invalid: {message}");
                    let status = status::invalid(&previous, generation, &message, now);
                    if let Some(stale) = writer.write(status).await? {
                        return Ok(stale);
                    }
                    return Ok(Action::await_change());
                };
                // A redeploy that slipped past admission: the running snapshot keeps serving.
                (serving, serving_source, Some(message))
            }
        },
    };
    let children = build::children(&owner, &deployment.spec, &snapshot, &ctx.config);
    let applied = apply_children(ctx, &owner.namespace, &children).await?;
    let ready_replicas = applied
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let timeout = u64::try_from(deployment.spec.starting_timeout_seconds)
        .ok()
        .filter(|seconds| *seconds > 0)
        .map(Duration::from_secs);
    let observed = Observed {
        generation,
        agent: snapshot.agent.name.clone(),
        snapshot: SnapshotRef {
            config_map: children.snapshot.name_any(),
            digest: snapshot.digest(),
        },
        source_digest: source,
        replicas: deployment.spec.replicas,
        ready_replicas,
        address: build::address(&owner),
        refused_redeploy,
        timeout,
        now,
    };
    let decision = status::decide(&previous, &observed);
    if let Some(stale) = writer.write(decision.status).await? {
        return Ok(stale);
    }
    Ok(match decision.recheck_after {
        // A second late, so the window has closed when it is looked at.
        Some(after) => Action::requeue(after + Duration::from_secs(1)),
        None => Action::await_change(),
    })
}

/// The deployment's snapshot, resolved with the rules of executions against the live objects;
/// `Err` holds every problem.
async fn resolve(
    ctx: &DeploymentContext,
    namespace: &str,
    deployment: &AgentDeployment,
) -> Result<std::result::Result<Snapshot, InvalidSpec>> {
    let spec = as_execution_spec(&deployment.spec);
    Ok(catalog::resolve(&ctx.client, &ctx.catalog, namespace, &spec).await?)
}

/// The snapshot a deployment recorded, read back from its ConfigMap; `None` when the
/// ConfigMap is gone or altered (the deployment is then resolved again).
async fn read_snapshot(
    ctx: &DeploymentContext,
    namespace: &str,
    recorded: &SnapshotRef,
) -> Result<Option<Snapshot>> {
    let config_map = Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace)
        .get_opt(&recorded.config_map)
        .await
        .map_err(Error::kube(format!(
            "reading ConfigMap {}",
            recorded.config_map
        )))?;
    let snapshot = config_map
        .and_then(|c| c.data?.remove(SNAPSHOT_KEY))
        .and_then(|json| serde_json::from_str::<Snapshot>(&json).ok())
        .filter(|snapshot| snapshot.digest() == recorded.digest);
    if snapshot.is_none() {
        warn!(config_map = %recorded.config_map, "the recorded snapshot is gone or altered; resolving again");
    }
    Ok(snapshot)
}

/// Applies the children (server-side, errand's field manager) and returns the Deployment as
/// the API server now has it, with its status.
async fn apply_children(
    ctx: &DeploymentContext,
    namespace: &str,
    children: &Children,
) -> Result<Deployment> {
    // The policy first: no pod of a new deployment is ever reachable past the gateway.
    if let Some(policy) = &children.network_policy {
        apply::<NetworkPolicy>(ctx, namespace, policy).await?;
    }
    apply::<ConfigMap>(ctx, namespace, &children.snapshot).await?;
    apply::<Service>(ctx, namespace, &children.service).await?;
    apply::<Deployment>(ctx, namespace, &children.deployment).await
}

async fn apply<K>(ctx: &DeploymentContext, namespace: &str, object: &K) -> Result<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    // k8s-openapi objects serialize with their apiVersion and kind, as an apply needs.
    let name = object.name_any();
    Api::<K>::namespaced(ctx.client.clone(), namespace)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .map_err(Error::kube(format!("applying {} {name}", K::kind(&()))))
}

/// Writes a deployment's status.
struct StatusWriter<'a> {
    api: Api<AgentDeployment>,
    deployment: &'a AgentDeployment,
}

impl StatusWriter<'_> {
    /// Writes `status` unless it equals the current one; `Some(action)` when the deployment
    /// changed since it was read, so the decision is dropped and taken again on the newer one.
    async fn write(&self, status: AgentDeploymentStatus) -> Result<Option<Action>> {
        let current = self.deployment.status.as_ref();
        match write_status(&self.api, self.deployment, current, &status).await? {
            Written::Done => Ok(None),
            Written::Stale => Ok(Some(Action::requeue(STALE_READ_RETRY))),
        }
    }
}
