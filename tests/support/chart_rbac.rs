//! The chart's own RBAC for the controllers the cluster tests run: the Helm chart's
//! ClusterRoles (rendered by `helm template`, as an install renders them) bound to a
//! ServiceAccount that those controllers impersonate. The suites so run with exactly the
//! permissions an installed controller has: an API call the chart grants no rule for fails
//! them, as it would fail in a real install.
//!
//! Needs `helm` on PATH (`hack/test.sh` puts it there).

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::cluster;

/// The release the RBAC is rendered for; its ServiceAccount's name is the release's.
const RELEASE: &str = "errand-harness";
/// The release's namespace, where its ServiceAccount would live (impersonation needs no
/// ServiceAccount object).
const RELEASE_NAMESPACE: &str = "errand-harness";
/// The user the test controllers act as: the release's ServiceAccount.
pub const USER: &str = "system:serviceaccount:errand-harness:errand-harness";

static GRANTED: OnceCell<()> = OnceCell::const_new();

/// Applies the chart's ClusterRoles and their bindings to [`USER`], once per process
/// (server-side apply: processes and repeated runs on one cluster agree).
pub async fn grant(client: &Client) {
    GRANTED
        .get_or_init(|| async {
            for object in render() {
                apply(client, object).await;
            }
        })
        .await;
}

/// The chart's RBAC for all namespaces (its default), as `helm template` renders it.
fn render() -> Vec<Value> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/errand");
    let output = Command::new("helm")
        .args(["template", RELEASE])
        .arg(&chart)
        .args(["--namespace", RELEASE_NAMESPACE])
        .args(["--show-only", "templates/rbac/controller.yaml"])
        .output()
        .unwrap_or_else(|e| panic!("running helm (hack/test.sh puts it on PATH): {e}"));
    assert!(
        output.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("helm prints UTF-8");
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).expect("helm prints YAML");
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

async fn apply(client: &Client, object: Value) {
    let params = PatchParams::apply("errand-tests").force();
    match object["kind"].as_str() {
        Some("ClusterRole") => {
            let role: ClusterRole = serde_json::from_value(object).expect("a ClusterRole");
            Api::<ClusterRole>::all(client.clone())
                .patch(&role.name_any(), &params, &Patch::Apply(&role))
                .await
                .unwrap_or_else(|e| panic!("applying ClusterRole {}: {e}", role.name_any()));
        }
        Some("ClusterRoleBinding") => {
            let binding: ClusterRoleBinding =
                serde_json::from_value(object).expect("a ClusterRoleBinding");
            Api::<ClusterRoleBinding>::all(client.clone())
                .patch(&binding.name_any(), &params, &Patch::Apply(&binding))
                .await
                .unwrap_or_else(|e| {
                    panic!("applying ClusterRoleBinding {}: {e}", binding.name_any())
                });
        }
        other => panic!("the chart's controller RBAC renders only cluster roles, not {other:?}"),
    }
}

/// The test cluster's admin kubeconfig, acting as [`USER`].
pub fn kubeconfig() -> Kubeconfig {
    let path = cluster::kubeconfig_path();
    let mut kubeconfig =
        Kubeconfig::read_from(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    for user in &mut kubeconfig.auth_infos {
        if let Some(auth) = &mut user.auth_info {
            auth.impersonate = Some(USER.to_owned());
        }
    }
    kubeconfig
}

/// Writes [`kubeconfig`] to `path`, for a controller process.
pub fn write_kubeconfig(path: &Path) {
    let json = serde_json::to_vec(&kubeconfig()).expect("a kubeconfig serializes");
    // JSON is YAML: the controller reads it as a kubeconfig file.
    std::fs::write(path, json).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// A client acting as [`USER`], for a controller in this process.
pub async fn client() -> Client {
    let config = Config::from_custom_kubeconfig(kubeconfig(), &KubeConfigOptions::default())
        .await
        .expect("the admin kubeconfig loads");
    Client::try_from(config).expect("a client")
}
