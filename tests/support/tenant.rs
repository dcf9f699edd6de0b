//! A tenant of the test cluster as a user meets it: a ServiceAccount with one built-in role in one namespace, a kubeconfig holding only its token, and the `errand` command line run with it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::config::{AuthInfo, Context, Kubeconfig, NamedAuthInfo, NamedContext};
use kube::{Api, Client};
use serde_json::Value;

use super::cluster::{self, kubectl};

/// A tenant: its kubeconfig file.
pub struct Tenant {
    /// The kubeconfig: the API server and its CA, the account's token, the namespace.
    pub kubeconfig: PathBuf,
}

impl Tenant {
    /// ServiceAccount `account` in `namespace`, bound to the built-in ClusterRole `role` there
    /// only, with a kubeconfig in `dir` that holds its token and nothing else (no admin
    /// credential, no store).
    pub async fn create(
        client: &Client,
        namespace: &str,
        account: &str,
        role: &str,
        dir: &Path,
    ) -> Self {
        let account_object: ServiceAccount =
            serde_json::from_value(serde_json::json!({"metadata": {"name": account}})).unwrap();
        Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &account_object)
            .await
            .expect("the ServiceAccount is created");
        kubectl(&[
            "create",
            "rolebinding",
            &format!("{account}-{role}"),
            "--namespace",
            namespace,
            "--clusterrole",
            role,
            "--serviceaccount",
            &format!("{namespace}:{account}"),
        ]);
        let token = kubectl(&[
            "create",
            "token",
            account,
            "--namespace",
            namespace,
            "--duration",
            "1h",
        ]);
        let admin =
            Kubeconfig::read_from(cluster::kubeconfig_path()).expect("the admin kubeconfig");
        let cluster_entry = admin.clusters[0].clone();
        let kubeconfig = Kubeconfig {
            clusters: vec![cluster_entry.clone()],
            auth_infos: vec![NamedAuthInfo {
                name: account.to_owned(),
                auth_info: Some(AuthInfo {
                    token: Some(token.trim().to_owned().into()),
                    ..AuthInfo::default()
                }),
                other: Default::default(),
            }],
            contexts: vec![NamedContext {
                name: account.to_owned(),
                context: Some(Context {
                    cluster: cluster_entry.name,
                    user: Some(account.to_owned()),
                    namespace: Some(namespace.to_owned()),
                    ..Context::default()
                }),
                other: Default::default(),
            }],
            current_context: Some(account.to_owned()),
            ..Kubeconfig::default()
        };
        let path = dir.join(format!("{account}.kubeconfig"));
        let yaml = serde_saphyr::to_string(&kubeconfig).expect("a kubeconfig serializes");
        std::fs::write(&path, yaml).expect("writing the kubeconfig");
        Self { kubeconfig: path }
    }

    /// `errand --kubeconfig KUBECONFIG ARGS -o json`: the exit code and the one JSON answer.
    pub fn errand(&self, args: &[&str]) -> (i32, Value) {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        super::errand::one_json_answer(args, &self.errand_human(&all))
    }

    /// `errand --kubeconfig KUBECONFIG ARGS` for people: its output.
    pub fn errand_human(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_errand"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env_remove("ERRAND_BACKEND")
            .env_remove("ERRAND_NAMESPACE")
            .env_remove("ERRAND_STORE")
            .env_remove("KUBECONFIG")
            .output()
            .expect("errand runs")
    }

    /// `kubectl --kubeconfig KUBECONFIG ARGS`, as this tenant.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .expect("kubectl runs (hack/test.sh puts it on PATH)")
    }
}
