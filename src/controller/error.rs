//! Everything a reconcile can fail with; each error has a stable metric label.

use super::build::BuildError;
use crate::cluster::ApiError;
use crate::store::StoreError;
use crate::store::keys::KeyError;

/// Why a reconcile failed. All of these are retried with backoff; an invalid spec is not an
/// error but a terminal status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("{action}: {source}")]
    Kube {
        /// What the controller was doing.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The execution's children could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The execution's results could not be deleted from the store.
    #[error("deleting results: {0}")]
    Store(#[from] StoreError),
    /// The execution's ids do not form a store key.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A reconcile did not finish in time (an API or store call hung); it is retried.
    #[error("the reconcile did not finish within {0:?}")]
    TimedOut(std::time::Duration),
    /// A cache the status depends on stopped before it was filled.
    #[error("the {0} cache stopped before it was filled")]
    CacheStopped(&'static str),
    /// The API server refused to create a child for good (400, 413 or 422: its validation or
    /// an admission policy); retrying cannot help, so the execution fails.
    #[error("the API server refused to create {kind} {name}: {message}")]
    Rejected {
        /// The child's kind.
        kind: String,
        /// The child's name.
        name: String,
        /// The API server's message.
        message: String,
    },
    /// A child with the deterministic name exists but belongs to another object (for example
    /// an execution of the same name that is still being deleted).
    #[error("{kind} {name} exists and is not owned by this execution")]
    ForeignChild {
        /// The child's kind.
        kind: &'static str,
        /// The child's name.
        name: String,
    },
}

impl Error {
    /// Wraps an API error with what was being done.
    pub fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Error::Kube { action, source }
    }

    /// A short, stable label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube { source, .. } => match source {
                kube::Error::Api(status) if status.code == 409 => "conflict",
                kube::Error::Api(status) if status.code == 403 => "forbidden",
                kube::Error::Api(_) => "api",
                _ => "transport",
            },
            Error::Build(e) => e.metric_label(),
            Error::Store(_) => "store",
            Error::Key(_) => "store_key",
            Error::TimedOut(_) => "timeout",
            Error::CacheStopped(_) => "cache_stopped",
            Error::ForeignChild { .. } => "foreign_child",
            Error::Rejected { .. } => "rejected",
        }
    }

    /// Whether the API server refused a create for good: its validation (400, 422) or the
    /// request's size (413). Forbidden (403: RBAC, quota) and conflicts may pass with time.
    pub fn is_permanent_refusal(status: &kube::core::Status) -> bool {
        matches!(status.code, 400 | 413 | 422)
    }
}

impl From<ApiError> for Error {
    fn from(error: ApiError) -> Self {
        Error::Kube {
            action: error.action,
            source: error.source,
        }
    }
}

/// A `Result` of a reconcile step.
pub type Result<T, E = Error> = std::result::Result<T, E>;
