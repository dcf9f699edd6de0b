//! The chart's own RBAC for the controllers the cluster tests run: the Helm chart's
//! ClusterRoles (or, for opted-in namespaces, its Roles in each; rendered by `helm template`,
//! as an install renders them) bound to a ServiceAccount that those controllers impersonate.
//! The suites so run with exactly the permissions an installed controller has: an API call the
//! chart grants no rule for fails them, as it would fail in a real install.
//!
//! Needs `helm` on PATH (`hack/test.sh` puts it there).

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
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
            for object in render(RELEASE, &[]) {
                apply(client, object).await;
            }
        })
        .await;
}

/// Applies the chart's RBAC of a release `release` that serves only `namespaces`: a Role and
/// RoleBinding in each, and the cluster-scoped reads. Returns the user its controller acts as.
pub async fn grant_opted_in(client: &Client, release: &str, namespaces: &[&str]) -> String {
    for object in render(release, namespaces) {
        apply(client, object).await;
    }
    format!("system:serviceaccount:{RELEASE_NAMESPACE}:{release}")
}

/// Removes the cluster-scoped RBAC of [`grant_opted_in`]'s `release` (its Roles go with
/// their namespaces).
pub async fn revoke_opted_in(client: &Client, release: &str) {
    let selector = format!("app.kubernetes.io/instance={release}");
    let params = kube::api::ListParams::default().labels(&selector);
    let delete = kube::api::DeleteParams::default();
    let roles = Api::<ClusterRole>::all(client.clone());
    let _ = roles.delete_collection(&delete, &params).await;
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    let _ = bindings.delete_collection(&delete, &params).await;
}

/// The chart's RBAC of release `release` for `namespaces` (all of them when empty), as
/// `helm template` renders it.
fn render(release: &str, namespaces: &[&str]) -> Vec<Value> {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/errand");
    let mut command = Command::new("helm");
    command
        .args(["template", release])
        .arg(&chart)
        .args(["--namespace", RELEASE_NAMESPACE])
        .args(["--show-only", "templates/rbac/controller.yaml"]);
    if !namespaces.is_empty() {
        let list = format!("controller.watchNamespaces={{{}}}", namespaces.join(","));
        command.args(["--set", &list]);
    }
    let output = command
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
        Some("Role") => {
            let role: Role = serde_json::from_value(object).expect("a Role");
            Api::<Role>::namespaced(client.clone(), &role.namespace().expect("a namespace"))
                .patch(&role.name_any(), &params, &Patch::Apply(&role))
                .await
                .unwrap_or_else(|e| panic!("applying Role {}: {e}", role.name_any()));
        }
        Some("RoleBinding") => {
            let binding: RoleBinding = serde_json::from_value(object).expect("a RoleBinding");
            let namespace = binding.namespace().expect("a namespace");
            Api::<RoleBinding>::namespaced(client.clone(), &namespace)
                .patch(&binding.name_any(), &params, &Patch::Apply(&binding))
                .await
                .unwrap_or_else(|e| panic!("applying RoleBinding {}: {e}", binding.name_any()));
        }
        other => panic!("the chart's controller RBAC renders only (cluster) roles, not {other:?}"),
    }
}

/// The test cluster's admin kubeconfig, acting as [`USER`].
pub fn kubeconfig() -> Kubeconfig {
    kubeconfig_as(USER)
}

/// The test cluster's admin kubeconfig, acting as `user`.
pub fn kubeconfig_as(user: &str) -> Kubeconfig {
    let path = cluster::kubeconfig_path();
    let mut kubeconfig =
        Kubeconfig::read_from(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    for named in &mut kubeconfig.auth_infos {
        if let Some(auth) = &mut named.auth_info {
            auth.impersonate = Some(user.to_owned());
        }
    }
    kubeconfig
}

/// Writes [`kubeconfig_as`] `user` to `path`, for a controller process.
pub fn write_kubeconfig(path: &Path, user: &str) {
    let json = serde_json::to_vec(&kubeconfig_as(user)).expect("a kubeconfig serializes");
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
