//! The test cluster's API audit log: `hack/testenv/up.sh` has the API server record every
//! request of a ServiceAccount outside kube-system (metadata only) to `logs/audit.log`, so a
//! test can read which API calls an installed component made and how each was answered.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::cluster;

/// One kind of API call: the same verb on the same resource, in the same namespace, on the
/// same named object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call {
    /// The API group ("" for the core group).
    pub group: String,
    /// The resource, with its subresource if any (`agentexecutions/status`).
    pub resource: String,
    /// The API verb (`get`, `list`, `watch`, `create`, `patch`, ...).
    pub verb: String,
    /// The namespace, for a namespaced resource.
    pub namespace: Option<String>,
    /// The object's name, when the request named one.
    pub name: Option<String>,
}

/// The directory of the API server's logs: beside the admin kubeconfig.
fn logs_dir() -> PathBuf {
    let kubeconfig = cluster::kubeconfig_path();
    kubeconfig
        .parent()
        .expect("the kubeconfig is in the test environment's directory")
        .join("logs")
}

/// How the API server answered one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status code.
    pub code: u16,
    /// The authorizer's decision (`allow`, `forbid`): a 403 may also come from admission, for
    /// example a create in a namespace being deleted.
    pub decision: String,
}

/// The resource calls `user` made, each with how the API server answered it, from the audit
/// log and its rotated predecessor.
///
/// # Panics
/// When the log is missing (a cluster started by an older `up.sh`).
pub fn calls_of(user: &str) -> BTreeMap<Call, Vec<Answer>> {
    let dir = logs_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with("audit") && name.ends_with(".log")
        })
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no audit log in {} (restart the test cluster with hack/testenv/up.sh)",
        dir.display()
    );
    let mut calls: BTreeMap<Call, Vec<Answer>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        for event in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            if event["user"]["username"] != user || event["stage"] != "ResponseComplete" {
                continue;
            }
            let Some(object) = event["objectRef"].as_object() else {
                continue;
            };
            let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_owned);
            let resource = match text("subresource") {
                Some(sub) => format!("{}/{sub}", text("resource").unwrap_or_default()),
                None => text("resource").unwrap_or_default(),
            };
            let call = Call {
                group: text("apiGroup").unwrap_or_default(),
                resource,
                verb: event["verb"].as_str().unwrap_or_default().to_owned(),
                namespace: text("namespace"),
                name: text("name"),
            };
            let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
            let decision = event["annotations"]["authorization.k8s.io/decision"]
                .as_str()
                .unwrap_or_default();
            calls.entry(call).or_default().push(Answer {
                code: u16::try_from(code).unwrap_or(0),
                decision: decision.to_owned(),
            });
        }
    }
    calls
}
