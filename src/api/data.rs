//! The `data.errand.dev/v1alpha1` API errand serves through the Kubernetes aggregation layer: the names of its resources and subresources, and the objects it answers with.
//!
//! Tenants reach results and Fileset content here with their namespace RBAC only, never with
//! store credentials. The server is [`crate::dataapi`]; its clients share these definitions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::{FilesetStatus, Phase};

/// The aggregated API's group, the one tenants' Roles name its resources in:
/// `agentexecutions` and `agentexecutions/results` (`get`), `filesets` (`get`) and
/// `filesets/content` (`get`, `update`). The Kubernetes API server authorizes exactly these
/// attributes before it proxies a request, and errand checks them again.
pub const DATA_GROUP: &str = "data.errand.dev";
/// The aggregated API's version.
pub const DATA_VERSION: &str = "v1alpha1";
/// `data.errand.dev/v1alpha1`.
pub const DATA_API_VERSION: &str = "data.errand.dev/v1alpha1";
/// The name of the APIService that registers the group with the aggregation layer.
pub const DATA_API_SERVICE: &str = "v1alpha1.data.errand.dev";

/// The executions' resource in the data API (its objects are [`AgentExecutionResults`]).
pub const EXECUTIONS_RESOURCE: &str = "agentexecutions";
/// An execution's results: the listing, and `results/<name>` the bytes of one.
pub const RESULTS_SUBRESOURCE: &str = "results";
/// The Filesets' resource in the data API (its objects are [`FilesetContent`]).
pub const FILESETS_RESOURCE: &str = "filesets";
/// A Fileset's content: its `tar.gz`, downloaded with `get`, replaced with `update` (PUT).
pub const CONTENT_SUBRESOURCE: &str = "content";

/// Kind of [`AgentExecutionResults`].
pub const RESULTS_KIND: &str = "AgentExecutionResults";
/// Kind of [`FilesetContent`].
pub const CONTENT_KIND: &str = "FilesetContent";

/// Content type of a Fileset's content and of the directory results.
pub const TAR_GZ_CONTENT_TYPE: &str = "application/gzip";
/// Content type of the JSON results (`run_result`, `run_error`, `manifest.json`).
pub const JSON_CONTENT_TYPE: &str = "application/json";
/// Content type of a [`DownloadLink`]: its own, so a client that asked for a link tells it from
/// a result that is itself JSON (a store that gives no links streams the bytes instead).
pub const LINK_CONTENT_TYPE: &str = "application/vnd.errand.link+json";

/// A presigned GET URL of one object in the store, the answer to a download asked with
/// `?link=true` when the store gives links. The URL is a bearer credential for that object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DownloadLink {
    /// The presigned GET URL; it needs no Kubernetes credentials.
    pub url: String,
    /// When the URL stops working (RFC 3339).
    pub expires_at: jiff::Timestamp,
    /// The object's size in bytes.
    pub size: u64,
}

/// The results of one execution, as far as they are saved.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentExecutionResults {
    /// `data.errand.dev/v1alpha1`.
    pub api_version: String,
    /// `AgentExecutionResults`.
    pub kind: String,
    /// The execution's name, namespace and uid.
    pub metadata: ObjectMeta,
    /// The execution's phase when the listing was made (absent before the first reconcile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Whether the run has ended, so no result will be added: the listing is the execution's
    /// recorded results, each with its sha256. While the run goes on, it is what the store holds
    /// so far, and the digests come with the end of the run.
    pub complete: bool,
    /// The saved results.
    #[serde(default)]
    pub results: Vec<ResultItem>,
}

/// One saved result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultItem {
    /// `input_workdir`, `output_workdir`, `output_artifacts`, `run_result`, `run_error` or
    /// `manifest.json`.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Hex sha256 of the bytes; absent while the run goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The content type the download is served with.
    pub content_type: String,
}

/// A Fileset's current content: what its status records.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilesetContent {
    /// `data.errand.dev/v1alpha1`.
    pub api_version: String,
    /// `FilesetContent`.
    pub kind: String,
    /// The Fileset's name, namespace and uid.
    pub metadata: ObjectMeta,
    /// Digest, size, file count and push time of the content (empty before the first push).
    #[serde(flatten)]
    pub content: FilesetStatus,
}
