//! What the cluster still references in the store, for the store sweep: the uids of its AgentExecutions and AgentDeployments, and the Fileset blobs its Filesets and live snapshots pin.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::{Client, ResourceExt};

use super::ApiError;
use super::scope::Namespaces;
use super::watches::managed_selector;
use crate::api::contract::SNAPSHOT_KEY;
use crate::api::{AgentDeployment, AgentExecution, Fileset};
use crate::resolve::Snapshot;
use crate::retention::sweep::References;

/// Every AgentExecution and AgentDeployment in `namespaces` and every blob its Filesets and
/// snapshot ConfigMaps pin, read in that order (a snapshot made while this runs pins what its
/// Fileset pinned when it was read). A snapshot that does not parse fails the whole read: a
/// sweep must not run on part of the references.
pub async fn references(client: &Client, namespaces: &Namespaces) -> Result<References, ApiError> {
    let mut references = References::default();
    let executions = list::<AgentExecution>(client, namespaces, &ListParams::default())
        .await
        .map_err(ApiError::during("listing AgentExecutions"))?;
    references
        .executions
        .extend(executions.iter().filter_map(|e| e.uid()));
    let deployments = list::<AgentDeployment>(client, namespaces, &ListParams::default())
        .await
        .map_err(ApiError::during("listing AgentDeployments"))?;
    references
        .deployments
        .extend(deployments.iter().filter_map(|d| d.uid()));
    let filesets = list::<Fileset>(client, namespaces, &ListParams::default())
        .await
        .map_err(ApiError::during("listing Filesets"))?;
    for fileset in &filesets {
        let digest = fileset.status.as_ref().and_then(|s| s.digest.as_deref());
        if let (Some(namespace), Some(digest)) = (fileset.namespace(), digest) {
            references.pin(&namespace, digest);
        }
    }
    let managed = ListParams::default().labels(&managed_selector());
    let snapshots = list::<ConfigMap>(client, namespaces, &managed)
        .await
        .map_err(ApiError::during("listing snapshot ConfigMaps"))?;
    for config_map in &snapshots {
        let Some(document) = config_map.data.as_ref().and_then(|d| d.get(SNAPSHOT_KEY)) else {
            continue;
        };
        let snapshot: Snapshot = serde_json::from_str(document).map_err(|e| ApiError {
            action: format!(
                "reading the snapshot in ConfigMap {}/{}",
                config_map.namespace().unwrap_or_default(),
                config_map.name_any()
            ),
            source: kube::Error::SerdeError(e),
        })?;
        references.pin_snapshot(&snapshot);
    }
    Ok(references)
}

/// Every `K` in `namespaces` that `params` selects.
async fn list<K>(
    client: &Client,
    namespaces: &Namespaces,
    params: &ListParams,
) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut listed = Vec::new();
    for api in namespaces.apis::<K>(client) {
        listed.extend(api.list(params).await?.items);
    }
    Ok(listed)
}
