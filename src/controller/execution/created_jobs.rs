//! The Jobs this controller created whose first watch event has not come yet: the Job cache cannot show them, and asking the API server instead cost a GET per execution at scale.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;

use crate::cluster::watches;

/// Created Jobs (trimmed as the Job cache keeps them) by the uid of their execution, each
/// until the Job cache has seen an event of it: from then on the cache knows whether it exists.
#[derive(Default)]
pub struct CreatedJobs(Mutex<HashMap<String, Arc<Job>>>);

impl CreatedJobs {
    /// Remembers `job`, just created for execution `execution_uid`.
    pub fn created(&self, execution_uid: &str, mut job: Job) {
        job.metadata.managed_fields = None;
        watches::trim_job(&mut job);
        self.lock().insert(execution_uid.to_owned(), Arc::new(job));
    }

    /// The Job `name` created for execution `execution_uid`, if the Job cache has not seen it
    /// yet.
    pub fn get(&self, execution_uid: &str, name: &str) -> Option<Arc<Job>> {
        self.lock()
            .get(execution_uid)
            .filter(|job| job.metadata.name.as_deref() == Some(name))
            .cloned()
    }

    /// The Job cache saw an event of `job` (created, changed or deleted): it knows it now.
    pub fn seen(&self, job: &Job) {
        if let Some(owner) = job
            .owner_references()
            .iter()
            .find(|o| o.kind == "AgentExecution" && o.controller == Some(true))
        {
            self.forget(&owner.uid);
        }
    }

    /// Forgets the Job of an execution that is gone.
    pub fn forget(&self, execution_uid: &str) {
        self.lock().remove(execution_uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Job>>> {
        self.0.lock().expect("no panics while holding the lock")
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;
    use crate::testing::UID;

    fn job(name: &str, owner_uid: &str) -> Job {
        let mut job = Job::default();
        job.metadata.name = Some(name.into());
        job.metadata.owner_references = Some(vec![OwnerReference {
            kind: "AgentExecution".into(),
            name: "calc".into(),
            uid: owner_uid.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        job
    }

    #[test]
    fn a_created_job_is_known_until_the_cache_sees_it() {
        let created = CreatedJobs::default();
        created.created(UID, job("errand-calc", UID));
        assert!(created.get(UID, "errand-calc").is_some());
        assert!(
            created.get(UID, "errand-other").is_none(),
            "only by its name"
        );
        assert!(created.get("another-uid", "errand-calc").is_none());
        created.seen(&job("errand-calc", "another-uid"));
        assert!(
            created.get(UID, "errand-calc").is_some(),
            "another execution's Job"
        );
        created.seen(&job("errand-calc", UID));
        assert!(created.get(UID, "errand-calc").is_none());
    }

    #[test]
    fn a_gone_execution_is_forgotten() {
        let created = CreatedJobs::default();
        created.created(UID, job("errand-calc", UID));
        created.forget(UID);
        assert!(created.get(UID, "errand-calc").is_none());
    }
}
