//! Apply: create the children (create-only, concurrently; none left behind when the API server refuses one for good) and stop what a decision says must stop.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Reconciler;
use super::build::Children;
use crate::controller::error::{Error, Result};
use crate::controller::execution::status::Stop;

/// What creating the children came to.
pub(super) enum Creation {
    /// Both exist: the snapshot ConfigMap and the Job as they are in the cluster, which
    /// after a restart may be the ones an earlier reconcile created.
    Created(Box<ConfigMap>, Box<Job>),
    /// The API server refused one for good: which and why, in its words. Those that were
    /// created are deleted again.
    Rejected(String),
}

impl Reconciler<'_> {
    /// Creates the pod's egress NetworkPolicy first (so the pod never starts open), then the
    /// snapshot ConfigMap and the Job, concurrently; all create-only. A permanent refusal of
    /// any removes the others; any other failure is an error to retry (what was created
    /// stays, and is found again next time).
    pub(super) async fn create(&self, children: Children) -> Result<Creation> {
        let (client, namespace, uid) = (
            &self.ctx.client,
            self.owner.namespace.as_str(),
            self.owner.uid.as_str(),
        );
        let policy = match children.network_policy {
            Some(policy) => match create_owned(client, namespace, uid, policy).await {
                Ok(created) => Some(created),
                Err(rejected @ Error::Rejected { .. }) => {
                    return Ok(Creation::Rejected(rejected.to_string()));
                }
                Err(e) => return Err(e),
            },
            None => None,
        };
        let (config_map, job) = futures::join!(
            create_owned(client, namespace, uid, children.config_map),
            create_owned(client, namespace, uid, children.job),
        );
        let rejection = [config_map.as_ref().err(), job.as_ref().err()]
            .into_iter()
            .flatten()
            .find(|e| matches!(e, Error::Rejected { .. }))
            .map(ToString::to_string);
        let Some(rejection) = rejection else {
            let (config_map, job) = (config_map?, job?);
            return Ok(Creation::Created(Box::new(config_map), Box::new(job)));
        };
        if let Ok(created) = &config_map {
            delete_if_present(client, namespace, created, &DeleteParams::default()).await?;
        }
        if let Ok(created) = &job {
            delete_if_present(client, namespace, created, &DeleteParams::background()).await?;
        }
        if let Some(created) = &policy {
            delete_if_present(client, namespace, created, &DeleteParams::default()).await?;
        }
        Ok(Creation::Rejected(rejection))
    }

    /// Deletes the pod (gracefully, so the runner saves partial results) or the whole Job.
    pub(super) async fn stop(&self, stop: &Stop, job_name: &str) -> Result<()> {
        let (client, namespace) = (self.ctx.client.clone(), self.owner.namespace.as_str());
        let result = match stop {
            Stop::DeletePod(pod) => {
                let params = DeleteParams {
                    grace_period_seconds: u32::try_from(self.ctx.config.termination_grace_seconds)
                        .ok(),
                    ..DeleteParams::default()
                };
                Api::<Pod>::namespaced(client, namespace)
                    .delete(pod, &params)
                    .await
                    .map(|_| ())
                    .map_err(|e| (format!("deleting pod {pod}"), e))
            }
            Stop::DeleteJob => Api::<Job>::namespaced(client, namespace)
                .delete(job_name, &DeleteParams::background())
                .await
                .map(|_| ())
                .map_err(|e| (format!("deleting Job {job_name}"), e)),
        };
        match result {
            Ok(()) => Ok(()),
            Err((_, kube::Error::Api(status))) if status.is_not_found() => Ok(()),
            Err((action, e)) => Err(Error::kube(action)(e)),
        }
    }
}

/// Deletes `object` unless it is gone already.
async fn delete_if_present<K>(
    client: &kube::Client,
    namespace: &str,
    object: &K,
    params: &DeleteParams,
) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let name = object.name_any();
    match Api::<K>::namespaced(client.clone(), namespace)
        .delete(&name, params)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
        Err(e) => Err(Error::kube(format!("deleting {} {name}", K::kind(&())))(e)),
    }
}

/// Creates `object`; if it already exists and this execution owns it, that is success (a
/// restarted controller never makes a second one). A permanent refusal is
/// [`Error::Rejected`].
async fn create_owned<K>(client: &kube::Client, namespace: &str, uid: &str, object: K) -> Result<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api = Api::<K>::namespaced(client.clone(), namespace);
    let name = object.name_any();
    let kind = K::kind(&());
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            let existing = api
                .get(&name)
                .await
                .map_err(Error::kube(format!("reading the existing {kind} {name}")))?;
            let ours = existing
                .owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true));
            if ours {
                Ok(existing)
            } else {
                Err(Error::ForeignChild {
                    kind: if kind == "Job" { "Job" } else { "ConfigMap" },
                    name,
                })
            }
        }
        Err(kube::Error::Api(status)) if Error::is_permanent_refusal(&status) => {
            Err(Error::Rejected {
                kind: kind.into_owned(),
                name,
                message: status.message,
            })
        }
        Err(e) => Err(Error::kube(format!("creating {kind} {name}"))(e)),
    }
}
