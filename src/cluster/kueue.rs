//! Kueue's `Workload`, as much of it as errand reads (who owns it and its conditions), and whether the cluster serves it.
//!
//! Kueue admits a queued Job through the Workload it creates for it (owned by the Job): while
//! the Job waits, the Workload's `QuotaReserved` condition says why, e.g. "couldn't assign
//! flavors to pod set main: insufficient unused quota for nvidia.com/gpu ...". `v1beta1` is
//! Kueue's storage version from v0.9 to v0.15 and still served after.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kube::{Client, CustomResource};
use serde::{Deserialize, Serialize};

/// The API group of Kueue's resources.
pub const GROUP: &str = "kueue.x-k8s.io";
/// The version of Kueue's API errand reads.
pub const VERSION: &str = "v1beta1";

/// What errand reads of a Workload's spec: nothing (serde drops the pod sets, so a cached
/// Workload costs little).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta1",
    kind = "Workload",
    namespaced,
    status = "WorkloadStatus",
    schema = "disabled"
)]
pub struct WorkloadSpec {}

/// What errand reads of a Workload's status: its conditions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadStatus {
    /// `QuotaReserved`, `Admitted`, `Evicted`, `Finished`, ...
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

impl Workload {
    /// The uid of the Job that owns this Workload, if a Job does (the Workload cache is
    /// indexed by it).
    pub fn job_uid(&self) -> Option<&str> {
        self.job().map(|o| o.uid.as_str())
    }

    /// The name of the Job that owns this Workload, if a Job does.
    pub fn job_name(&self) -> Option<&str> {
        self.job().map(|o| o.name.as_str())
    }

    fn job(&self) -> Option<&OwnerReference> {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Job")
    }

    /// Its condition `type_`, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }
}

/// Keeps only what the status needs of a Workload: its identity, owners and conditions.
pub fn trim_workload(workload: &mut Workload) {
    workload.metadata.annotations = None;
    workload.metadata.labels = None;
    workload.metadata.finalizers = None;
}

/// Whether the API server serves Kueue's Workloads (Kueue is installed), from discovery, which
/// every authenticated client may read.
pub async fn workloads_served(client: &Client) -> Result<bool, kube::Error> {
    match client
        .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
        .await
    {
        Ok(resources) => Ok(resources.resources.iter().any(|r| r.name == "workloads")),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_reads_with_its_owner_and_conditions_and_without_its_pod_sets() {
        let workload: Workload = serde_json::from_value(serde_json::json!({
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {
                "name": "job-errand-calc-3f2a1",
                "namespace": "team-a",
                "ownerReferences": [{
                    "apiVersion": "batch/v1", "kind": "Job", "name": "errand-calc",
                    "uid": "job-uid", "controller": true,
                }],
            },
            "spec": {"queueName": "gpu", "podSets": [{"name": "main", "count": 1, "template": {}}]},
            "status": {"conditions": [{
                "type": "QuotaReserved", "status": "False", "reason": "Pending",
                "message": "couldn't assign flavors to pod set main: insufficient unused quota \
                            for nvidia.com/gpu in flavor gpu, 1 more needed",
                "lastTransitionTime": "2026-11-30T12:00:00Z",
            }]},
        }))
        .unwrap();
        assert_eq!(workload.job_uid(), Some("job-uid"));
        assert_eq!(workload.job_name(), Some("errand-calc"));
        let reserved = workload.condition("QuotaReserved").unwrap();
        assert_eq!(reserved.reason, "Pending");
        assert!(workload.condition("Admitted").is_none());
        let kept = serde_json::to_value(&workload).unwrap();
        assert_eq!(kept["spec"], serde_json::json!({}), "{kept}");
    }

    #[test]
    fn a_jobs_workload_is_found_by_the_jobs_uid_in_its_namespace() {
        use kube::runtime::watcher::Event;

        let owned_by = |job_uid: &str| {
            let mut workload = Workload::new("job-errand-calc-3f2a1", WorkloadSpec {});
            workload.metadata.namespace = Some("team-a".into());
            workload.metadata.owner_references = Some(vec![OwnerReference {
                kind: "Job".into(),
                name: "errand-calc".into(),
                uid: job_uid.into(),
                ..OwnerReference::default()
            }]);
            workload
        };
        let (workloads, mut writer) = crate::cluster::index::indexed_store(Workload::job_uid);
        writer.apply_watcher_event(&Event::Apply(owned_by("job-uid")));
        let found = workloads.get("team-a", "job-uid");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].job_name(), Some("errand-calc"));
        assert!(workloads.get("team-b", "job-uid").is_empty());
        assert!(workloads.get("team-a", "other-job").is_empty());
        // Re-created for a new Job of the same name: found by the new Job's uid only.
        writer.apply_watcher_event(&Event::Apply(owned_by("new-job-uid")));
        assert!(workloads.get("team-a", "job-uid").is_empty());
        assert_eq!(workloads.get("team-a", "new-job-uid").len(), 1);
    }
}
