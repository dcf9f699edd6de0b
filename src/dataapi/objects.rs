//! What the data API reads and writes in the cluster, behind two traits: executions and Filesets (from the process's caches, falling back to the API server), a Fileset's new content status, and the SubjectAccessReview of each request.

use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewStatus};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client};

use crate::api::{AgentExecution, Fileset, FilesetStatus};
use crate::cluster::ApiError;

/// The objects the data API serves data of.
pub trait Objects: Send + Sync {
    /// The execution, if it exists.
    fn execution<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<AgentExecution>, ApiError>>;

    /// The Fileset, if it exists.
    fn fileset<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Fileset>, ApiError>>;

    /// Records `content` as the Fileset's status, all fields at once; `None` when the Fileset
    /// is gone.
    fn set_content<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        content: &'a FilesetStatus,
    ) -> BoxFuture<'a, Result<Option<Fileset>, ApiError>>;
}

/// Asks the cluster's authorizer.
pub trait Authorizer: Send + Sync {
    /// The verdict on `review`.
    fn review(
        &self,
        review: SubjectAccessReview,
    ) -> BoxFuture<'_, Result<SubjectAccessReviewStatus, ApiError>>;
}

/// The objects in the cluster: the caches first, then the API server for an object created
/// moments ago.
pub struct ClusterObjects {
    /// The client (this replica's ServiceAccount).
    pub client: Client,
    /// The executions' cache.
    pub executions: Store<AgentExecution>,
    /// The Filesets' cache.
    pub filesets: Store<Fileset>,
}

impl Objects for ClusterObjects {
    fn execution<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<AgentExecution>, ApiError>> {
        Box::pin(async move {
            let key = ObjectRef::new(name).within(namespace);
            if let Some(cached) = self.executions.get(&key) {
                return Ok(Some((*cached).clone()));
            }
            Api::<AgentExecution>::namespaced(self.client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(ApiError::during(format!(
                    "reading AgentExecution {namespace}/{name}"
                )))
        })
    }

    fn fileset<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Fileset>, ApiError>> {
        Box::pin(async move {
            let key = ObjectRef::new(name).within(namespace);
            if let Some(cached) = self.filesets.get(&key) {
                return Ok(Some((*cached).clone()));
            }
            Api::<Fileset>::namespaced(self.client.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(ApiError::during(format!(
                    "reading Fileset {namespace}/{name}"
                )))
        })
    }

    fn set_content<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        content: &'a FilesetStatus,
    ) -> BoxFuture<'a, Result<Option<Fileset>, ApiError>> {
        Box::pin(async move {
            // A merge patch of the whole status: digest, size, count and time change together.
            let patch = serde_json::json!({"status": content});
            match Api::<Fileset>::namespaced(self.client.clone(), namespace)
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(fileset) => Ok(Some(fileset)),
                Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
                Err(source) => Err(ApiError {
                    action: format!("recording the content of Fileset {namespace}/{name}"),
                    source,
                }),
            }
        })
    }
}

/// SubjectAccessReviews through the API server.
pub struct ClusterAuthorizer {
    /// The client (this replica's ServiceAccount, which may create reviews).
    pub client: Client,
}

impl Authorizer for ClusterAuthorizer {
    fn review(
        &self,
        review: SubjectAccessReview,
    ) -> BoxFuture<'_, Result<SubjectAccessReviewStatus, ApiError>> {
        Box::pin(async move {
            let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(ApiError::during("creating a SubjectAccessReview"))?;
            Ok(reviewed.status.unwrap_or_default())
        })
    }
}
