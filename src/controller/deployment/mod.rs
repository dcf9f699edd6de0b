//! The AgentDeployment reconciler: an agent served by a Deployment behind a ClusterIP Service, from a snapshot taken when the deployment is created or redeployed.
//!
//! The pure parts: [`build`] (the children), and, shared with the local backend,
//! [`crate::resolve::deployment::window`] (the starting window) and
//! [`crate::resolve::deployment::status`] (phase and conditions); [`reconcile`] is the shell
//! that resolves, applies and writes.

pub mod build;
pub mod reconcile;

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::watcher;

use crate::api::AgentDeployment;
use crate::cluster::catalog::ClusterCatalog;
use crate::cluster::scope::Namespaces;
use crate::cluster::watches;
use crate::controller::config::ControllerConfig;
use reconcile::DeploymentContext;

/// Reconciles the AgentDeployments of `namespaces` until `shutdown`.
pub async fn run(
    client: Client,
    namespaces: Namespaces,
    catalog: ClusterCatalog,
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let (deployments, deployment_stream) = watches::cache(
        namespaces.watches::<AgentDeployment>(&client, &watcher::Config::default()),
        |_| {},
    );
    // The Deployments serving them, by metadata only: a change to one reconciles its owner.
    let managed = watcher::Config::default().labels(&watches::managed_selector());
    let (_, workload_stream) = watches::cache(
        namespaces.watches::<PartialObjectMeta<Deployment>>(&client, &managed),
        watches::trim_to_owners,
    );
    let ctx = Arc::new(DeploymentContext {
        client,
        catalog,
        config,
    });
    Controller::for_stream(deployment_stream, deployments)
        .owns_stream(workload_stream)
        .with_config(controller::Config::default().concurrency(16))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| crate::controller::log_outcome("deployment", result))
        .await;
}
