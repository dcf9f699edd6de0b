//! What a reconcile costs in API requests: an admitted execution two creates and one status write, a finished, unchanged or not yet expired one none, an expired one its delete.

use super::*;

fn context_with_config(client: Client, config: ControllerConfig) -> Arc<Context> {
    let signer = Arc::new(HmacSigner::new("http://errand", b"key"));
    Arc::new(context_from(
        client,
        config,
        filled(vec![]),
        filled_pods(vec![]),
        signer,
    ))
}

fn running_pod() -> Pod {
    let started = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
    let mut pod = namespaced(
        Pod {
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "agent".into(),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: Some(started),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Pod::default()
        },
        "errand-calc-x1",
    );
    pod.metadata.labels = Some([(contract::EXECUTION_UID_LABEL.to_owned(), UID.to_owned())].into());
    pod
}

#[tokio::test]
async fn admitting_an_execution_costs_two_creates_and_one_status_write() {
    let log = Log::default();
    let ctx = context(scripted_client(Arc::clone(&log)), vec![], vec![]);
    let action = reconcile(Arc::new(execution(None)), Arc::clone(&ctx))
        .await
        .unwrap();
    assert_ne!(
        action,
        Action::await_change(),
        "a starting execution is looked at again"
    );
    let (reads, mut writes): (Vec<_>, Vec<_>) = requests(&log)
        .into_iter()
        .partition(|(method, _)| method == Method::GET);
    writes.sort();
    let base = format!("/api/v1/namespaces/{NS}");
    assert_eq!(
        reads,
        vec![(Method::GET, format!("{base}/secrets/model-keys"))],
        "Secrets are read when needed, not cached"
    );
    assert_eq!(
        writes,
        vec![
            (
                Method::PATCH,
                format!("/apis/errand.dev/v1alpha1/namespaces/{NS}/agentexecutions/calc/status")
            ),
            (Method::POST, format!("{base}/configmaps")),
            (Method::POST, format!("/apis/batch/v1/namespaces/{NS}/jobs")),
        ],
        "two creates and the Starting status: no grants Secret (the pod asks for its grants), \
         no finalizer write"
    );
}

#[tokio::test]
async fn a_finished_execution_costs_no_request() {
    let log = Log::default();
    let ctx = context(scripted_client(Arc::clone(&log)), vec![], vec![]);
    let done = AgentExecutionStatus {
        phase: Some(Phase::Succeeded),
        ..Default::default()
    };
    let action = reconcile(Arc::new(execution(Some(done))), ctx)
        .await
        .unwrap();
    assert_eq!(action, Action::await_change());
    assert!(requests(&log).is_empty(), "{:?}", requests(&log));
}

fn finished_at(completed: Timestamp, ttl: Option<i64>) -> AgentExecution {
    let mut done = execution(Some(AgentExecutionStatus {
        phase: Some(Phase::Succeeded),
        completion_time: Some(Time(completed)),
        ..Default::default()
    }));
    done.spec.ttl_seconds_after_finished = ttl;
    done
}

#[tokio::test]
async fn a_finished_execution_within_its_lifetime_costs_no_request_and_is_looked_at_when_it_ends() {
    let log = Log::default();
    let ctx = context(scripted_client(Arc::clone(&log)), vec![], vec![]);
    let just_done = finished_at(Timestamp::now(), Some(600));
    let action = reconcile(Arc::new(just_done), ctx).await.unwrap();
    assert!(requests(&log).is_empty(), "{:?}", requests(&log));
    // The time of the next look is the pure decision's (retention::ttl's tests pin it).
    assert_ne!(
        action,
        Action::await_change(),
        "looked at again when it ends"
    );
}

#[tokio::test]
async fn an_expired_execution_costs_exactly_its_delete() {
    let log = Log::default();
    let ctx = context(scripted_client(Arc::clone(&log)), vec![], vec![]);
    let long_done = finished_at(
        Timestamp::now() - jiff::SignedDuration::from_secs(61),
        Some(60),
    );
    let action = reconcile(Arc::new(long_done), ctx).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        requests(&log),
        vec![(
            Method::DELETE,
            format!("/apis/errand.dev/v1alpha1/namespaces/{NS}/agentexecutions/calc")
        )]
    );
}

#[tokio::test]
async fn the_controller_default_lifetime_applies_to_an_execution_without_its_own() {
    let log = Log::default();
    let mut config = ControllerConfig::new("errand.local/errand:dev");
    config.default_ttl_seconds_after_finished = Some(0);
    let ctx = context_with_config(scripted_client(Arc::clone(&log)), config);
    reconcile(Arc::new(finished_at(Timestamp::now(), None)), ctx)
        .await
        .unwrap();
    assert_eq!(requests(&log).len(), 1, "{:?}", requests(&log));
    assert_eq!(requests(&log)[0].0, Method::DELETE);
}

/// A namespace as the controller caches it, with the lifetime annotation set to `ttl`.
fn namespace_with_lifetime(ttl: &str) -> PartialObjectMeta<Namespace> {
    let mut namespace: PartialObjectMeta<Namespace> = kube::core::ObjectMeta {
        name: Some(NS.into()),
        annotations: Some(
            [(
                contract::NAMESPACE_TTL_ANNOTATION.to_owned(),
                ttl.to_owned(),
            )]
            .into(),
        ),
        ..Default::default()
    }
    .into_request_partial();
    namespace.types = None;
    namespace
}

#[tokio::test]
async fn a_namespace_lifetime_wins_over_the_controller_default_and_a_bad_one_is_ignored() {
    let mut config = ControllerConfig::new("errand.local/errand:dev");
    config.default_ttl_seconds_after_finished = Some(0);
    let just_done = Arc::new(finished_at(Timestamp::now(), None));
    for (annotation, deleted) in [("600", false), ("0", true), ("ten minutes", true)] {
        let log = Log::default();
        let signer = Arc::new(HmacSigner::new("http://errand", b"key"));
        let ctx = context_from(
            scripted_client(Arc::clone(&log)),
            config.clone(),
            filled(vec![]),
            filled_pods(vec![]),
            signer,
        )
        .with_namespaces(filled(vec![namespace_with_lifetime(annotation)]));
        reconcile(Arc::clone(&just_done), Arc::new(ctx))
            .await
            .unwrap();
        let deletes = requests(&log)
            .iter()
            .filter(|(method, _)| method == Method::DELETE)
            .count();
        assert_eq!(deletes, usize::from(deleted), "annotation {annotation:?}");
    }
}

/// The execution as it stands while `running_pod` runs its agent.
fn running_execution() -> AgentExecution {
    let starting = execution(None);
    let facts = status::facts(
        Some(&owned_job()),
        &[&running_pod()],
        None,
        Timestamp::now(),
    );
    let decision = status::decide(&starting, &facts);
    let mut running = status::render(&starting, &decision.standing, facts.now);
    running.snapshot = Some(SnapshotRef::test());
    running.job_name = Some("errand-calc".into());
    execution(Some(running))
}

#[tokio::test]
async fn an_unchanged_running_execution_costs_no_request() {
    let log = Log::default();
    let ctx = context(
        scripted_client(Arc::clone(&log)),
        vec![owned_job()],
        vec![running_pod()],
    );
    reconcile(Arc::new(running_execution()), ctx).await.unwrap();
    assert!(requests(&log).is_empty(), "{:?}", requests(&log));
}

/// Right after a start every reconcile waits for the Job and Pod caches at once; all of
/// them go on as soon as the caches are filled (kube-runtime's own wait wakes one of them,
/// and the others slept until their timeout).
#[tokio::test]
async fn reconciles_waiting_for_the_caches_after_a_start_all_go_on_once_they_are_filled() {
    let (jobs, mut job_writer) = reflector::store();
    let (pods, mut pod_writer) = indexed_store(watches::pod_execution_uid);
    let ctx = context_over(
        scripted_client(Log::default()),
        jobs,
        pods,
        Arc::new(HmacSigner::new("http://errand", b"key")),
    );
    let reconciles: Vec<_> = (0..16)
        .map(|_| tokio::spawn(reconcile(Arc::new(running_execution()), Arc::clone(&ctx))))
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        reconciles.iter().all(|r| !r.is_finished()),
        "they wait for the caches"
    );
    listed(vec![owned_job()], |event| {
        job_writer.apply_watcher_event(event)
    });
    listed(vec![running_pod()], |event| {
        pod_writer.apply_watcher_event(event)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let done = reconciles.iter().filter(|r| r.is_finished()).count();
    assert_eq!(
        done, 16,
        "every reconcile went on once the caches were filled"
    );
    for reconcile in reconciles {
        reconcile.await.unwrap().unwrap();
    }
}
