//! A controller confined to the namespaces an operator opted in (`--watch-namespace`, the chart's `controller.watchNamespaces`), acting with only the chart's RBAC for them: it runs their executions, leaves every other namespace's untouched, and the API server refuses it there.

use std::time::Duration;

use errand::api::{AgentExecution, Phase};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kube::config::KubeConfigOptions;
use kube::{Api, Client, Config};

use crate::support::chart_rbac;
use crate::support::cluster::{self, TestNamespace};
use crate::support::harness::{Harness, phase_of};

/// A client acting as `user`, as the confined controller does.
async fn client_as(user: &str) -> Client {
    let config = Config::from_custom_kubeconfig(
        chart_rbac::kubeconfig_as(user),
        &KubeConfigOptions::default(),
    )
    .await
    .expect("the admin kubeconfig loads");
    Client::try_from(config).expect("a client")
}

/// Whether the API server answered 403 Forbidden.
fn forbidden<T>(result: Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(status)) if status.code == 403)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_of_opted_in_namespaces_runs_theirs_and_is_refused_everywhere_else() {
    let Some(client) = cluster::client().await else {
        return;
    };
    let also = TestNamespace::create(&client, "optin-b").await;
    let outside = TestNamespace::create(&client, "optin-out").await;
    // The release is named after a namespace of this test, so parallel runs never share it.
    let release = also.name().to_owned();
    let Some(harness) = Harness::start_opted_in("optin-a", &release, &[also.name()]).await else {
        return;
    };
    let served = [harness.namespace.name(), also.name()];
    for namespace in [served[0], served[1], outside.name()] {
        harness
            .create_agent_in(namespace, "calc", cluster::BUSYBOX_IMAGE, "echo 96")
            .await;
        harness
            .create_execution_in(namespace, "sum", "calc", serde_json::json!({}))
            .await;
    }

    // Both opted-in namespaces' executions run to the end.
    for namespace in served {
        harness
            .wait_for_phase_in(namespace, "sum", Phase::Succeeded)
            .await;
    }

    // The other namespace's execution is untouched: no status, no Job.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let untouched = Api::<AgentExecution>::namespaced(client.clone(), outside.name())
        .get("sum")
        .await
        .expect("the execution outside");
    assert_eq!(phase_of(&untouched), None, "{:?}", untouched.status);
    let jobs_outside = outside
        .api::<Job>()
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        jobs_outside.items.is_empty(),
        "a Job outside: {jobs_outside:?}"
    );

    // The API server refuses the controller's identity outside, and admits it inside.
    let confined = client_as(harness.acts_as()).await;
    let inside = harness.namespace.name();
    let of = |namespace: &str| {
        (
            Api::<AgentExecution>::namespaced(confined.clone(), namespace),
            Api::<Pod>::namespaced(confined.clone(), namespace),
            Api::<Secret>::namespaced(confined.clone(), namespace),
        )
    };
    let (executions, pods, secrets) = of(inside);
    executions
        .list(&Default::default())
        .await
        .expect("executions inside");
    pods.list(&Default::default()).await.expect("pods inside");
    assert!(
        matches!(secrets.get("absent").await, Err(kube::Error::Api(s)) if s.code == 404),
        "a Secret inside is looked up (and not found)"
    );
    let (executions, pods, secrets) = of(outside.name());
    assert!(
        forbidden(executions.list(&Default::default()).await),
        "executions outside"
    );
    assert!(
        forbidden(executions.get("sum").await),
        "the execution outside"
    );
    assert!(
        forbidden(pods.list(&Default::default()).await),
        "pods outside"
    );
    assert!(forbidden(secrets.get("absent").await), "Secrets outside");
    let jobs = Api::<Job>::namespaced(confined.clone(), outside.name());
    assert!(
        forbidden(jobs.list(&Default::default()).await),
        "Jobs outside"
    );
    let namespaces = Api::<Namespace>::all(confined.clone());
    namespaces
        .get(inside)
        .await
        .expect("its own namespace's metadata");
    assert!(
        forbidden(namespaces.get(outside.name()).await),
        "another namespace's metadata"
    );
    assert!(
        forbidden(
            Api::<AgentExecution>::all(confined)
                .list(&Default::default())
                .await
        ),
        "every namespace at once"
    );

    chart_rbac::revoke_opted_in(&client, &release).await;
    harness.finish().await;
    also.delete().await;
    outside.delete().await;
}
