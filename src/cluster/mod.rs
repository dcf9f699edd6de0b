//! What the cluster components share: the live-object catalog executions resolve against, the watches behind its caches, their indexes and readiness, Kueue's Workloads as errand reads them, the one metrics registry each component registers on, what the store sweep must keep, and the serving certificate of errand's HTTPS endpoints.
//!
//! The controller and the webhook (and the components still to come) sit above this module
//! as peers; none of them imports another, and the process wiring in [`crate::serve`] hands
//! each the same caches and registry.

pub mod access;
pub mod catalog;
pub mod index;
pub mod kueue;
pub mod listener;
pub mod merged_watch;
pub mod metrics;
pub mod readiness;
pub mod references;
pub mod scope;
pub mod serving;
pub mod watches;

/// A call to the API server that failed, with what was being done.
#[derive(Debug, thiserror::Error)]
#[error("{action}: {source}")]
pub struct ApiError {
    /// What was being done.
    pub action: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

impl ApiError {
    /// Wraps an API error with what was being done.
    pub fn during(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| ApiError { action, source }
    }
}
