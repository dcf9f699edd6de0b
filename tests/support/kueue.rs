//! Kueue objects for the cluster tests: a ResourceFlavor and a ClusterQueue with nominal quotas
//! for cpu, memory and `nvidia.com/gpu` (cluster-scoped, named after the test's namespace), a
//! LocalQueue in the test's namespace, and the Workloads Kueue creates there.
//!
//! Call [`super::cluster::ensure_kueue`] first.

use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
};
use kube::{Api, Client};
use serde_json::json;

/// Nominal quotas of a ClusterQueue's one flavor.
#[derive(Clone, Copy, Debug)]
pub struct Quotas {
    pub cpu: &'static str,
    pub memory: &'static str,
    pub gpus: u32,
}

/// A ClusterQueue with its flavor, and a LocalQueue pointing at it in one namespace.
pub struct Queue {
    client: Client,
    namespace: String,
    /// The LocalQueue's name, in the namespace.
    pub local_queue: String,
    /// The ClusterQueue's name.
    pub cluster_queue: String,
    flavor: String,
}

/// Kueue's resource `kind`, in the version errand reads.
pub fn kueue(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta1", kind))
}

fn object(value: serde_json::Value) -> DynamicObject {
    serde_json::from_value(value).expect("a valid Kueue object")
}

impl Queue {
    /// Creates the flavor `<namespace>-flavor`, ClusterQueue `<namespace>-cq` with `quotas`
    /// for every namespace, and LocalQueue `local_queue` in `namespace`.
    pub async fn create(
        client: &Client,
        namespace: &str,
        local_queue: &str,
        quotas: Quotas,
    ) -> Self {
        let flavor = format!("{namespace}-flavor");
        let cluster_queue = format!("{namespace}-cq");
        Api::<DynamicObject>::all_with(client.clone(), &kueue("ResourceFlavor"))
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                    "metadata": { "name": flavor },
                })),
            )
            .await
            .expect("creating the ResourceFlavor");
        Api::<DynamicObject>::all_with(client.clone(), &kueue("ClusterQueue"))
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                    "metadata": { "name": cluster_queue },
                    "spec": {
                        "namespaceSelector": {},
                        "resourceGroups": [{
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [{
                                "name": flavor,
                                "resources": [
                                    { "name": "cpu", "nominalQuota": quotas.cpu },
                                    { "name": "memory", "nominalQuota": quotas.memory },
                                    { "name": "nvidia.com/gpu", "nominalQuota": quotas.gpus },
                                ],
                            }],
                        }],
                    },
                })),
            )
            .await
            .expect("creating the ClusterQueue");
        Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &kueue("LocalQueue"))
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                    "metadata": { "name": local_queue },
                    "spec": { "clusterQueue": cluster_queue },
                })),
            )
            .await
            .expect("creating the LocalQueue");
        Self {
            client: client.clone(),
            namespace: namespace.to_owned(),
            local_queue: local_queue.to_owned(),
            cluster_queue,
            flavor,
        }
    }

    /// The Workloads in the namespace.
    pub async fn workloads(&self) -> Vec<DynamicObject> {
        Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &kueue("Workload"),
        )
        .list(&ListParams::default())
        .await
        .expect("listing Workloads")
        .items
    }

    /// Deletes the ClusterQueue and the flavor (the LocalQueue goes with the namespace).
    pub async fn delete(self) {
        Api::<DynamicObject>::all_with(self.client.clone(), &kueue("ClusterQueue"))
            .delete(&self.cluster_queue, &DeleteParams::default())
            .await
            .expect("deleting the ClusterQueue");
        Api::<DynamicObject>::all_with(self.client.clone(), &kueue("ResourceFlavor"))
            .delete(&self.flavor, &DeleteParams::default())
            .await
            .expect("deleting the ResourceFlavor");
    }
}

/// Whether `workload` has condition `type_` with status True (and `reason`, if given).
pub fn has_condition(workload: &DynamicObject, type_: &str, reason: Option<&str>) -> bool {
    workload.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c["type"] == type_
                    && c["status"] == "True"
                    && reason.is_none_or(|reason| c["reason"] == reason)
            })
        })
}

/// The name of the Job that owns `workload`.
pub fn job_of(workload: &DynamicObject) -> Option<&str> {
    workload
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Job")
        .map(|o| o.name.as_str())
}
