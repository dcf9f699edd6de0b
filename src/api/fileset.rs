//! The `Fileset` resource: a named directory tree stored as a content-addressed tarball.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A named directory tree, pushed with `errand filesets push NAME DIR`. Its content is a
/// content-addressed `tar.gz` in the store; each push records a new digest, and executions
/// keep the digest they were admitted with.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "errand.dev",
    version = "v1alpha1",
    kind = "Fileset",
    doc = "A named directory tree stored as a content-addressed tarball.",
    namespaced,
    status = "FilesetStatus",
    shortname = "fs",
    printcolumn(name = "Digest", type_ = "string", json_path = ".status.digest"),
    printcolumn(name = "Files", type_ = "integer", json_path = ".status.fileCount"),
    printcolumn(name = "Size", type_ = "integer", json_path = ".status.size"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FilesetSpec {
    /// What the directory tree holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Where the Fileset's current content is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilesetStatus {
    /// sha256 of the stored `tar.gz`, as `sha256:<hex>`; absent until the first push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Size of the stored `tar.gz` in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Number of regular files in the tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_count: Option<u64>,
    /// When the current content was pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushed_at: Option<Time>,
}
