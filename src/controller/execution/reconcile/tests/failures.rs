//! Reconciles that cannot go on: waiting for the caches, a hang that is retried, URLs that do not last the run, and children the API server refuses for good or for now.

use super::*;

/// A client whose API server never answers.
fn hanging_client() -> Client {
    let service = tower::service_fn(|_: Request<kube::client::Body>| async {
        std::future::pending::<Result<Response<Full<Bytes>>, std::convert::Infallible>>().await
    });
    Client::new(service, NS)
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_that_hangs_fails_and_is_retried() {
    let ctx = context(hanging_client(), vec![], vec![]);
    let started = tokio::time::Instant::now();
    let error = reconcile(Arc::new(execution(None)), Arc::clone(&ctx))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::TimedOut(_)), "{error}");
    assert_eq!(started.elapsed(), RECONCILE_TIMEOUT);
    assert_eq!(
        error_policy(Arc::new(execution(None)), &error, ctx),
        Action::requeue(Duration::from_secs(1))
    );
}

/// A signer whose URLs cannot last as long as any run needs; it fails whatever it is asked
/// to sign, so a run it cannot serve must be refused before signing.
struct ShortLivedUrls;

#[async_trait::async_trait]
impl UrlSigner for ShortLivedUrls {
    async fn sign(&self, _: Access, _: &str, _: Timestamp) -> Result<String, GrantError> {
        Err(GrantError::Lifetime {
            needed: 4620,
            max: 600,
        })
    }

    fn upload_mode(&self) -> UploadMode {
        UploadMode::Sized
    }

    fn max_lifetime_seconds(&self) -> Option<i64> {
        Some(600)
    }
}

#[tokio::test]
async fn a_run_longer_than_the_stores_urls_last_is_refused_with_nothing_created() {
    let log = Log::default();
    let ctx = context_signing_with(
        scripted_client(Arc::clone(&log)),
        vec![],
        vec![],
        Arc::new(ShortLivedUrls),
    );
    let action = reconcile(Arc::new(execution(None)), Arc::clone(&ctx))
        .await
        .unwrap();
    assert_eq!(action, Action::await_change(), "not retried");
    let status = ctx
        .latest(Arc::new(execution(None)))
        .status
        .clone()
        .unwrap();
    assert_eq!(status.phase, Some(Phase::Failed));
    let message = status.message.unwrap();
    assert!(
        message.contains("spec.timeoutSeconds: 3600:") && message.contains("at most 600s"),
        "{message}"
    );
    let writes: Vec<_> = requests(&log)
        .into_iter()
        .filter(|(method, _)| method != Method::GET)
        .collect();
    assert_eq!(
        writes,
        vec![
            (
                Method::PATCH,
                format!("/apis/errand.dev/v1alpha1/namespaces/{NS}/agentexecutions/calc/status")
            ),
            (
                Method::POST,
                format!("/apis/events.k8s.io/v1/namespaces/{NS}/events")
            ),
        ],
        "the Failed status and its Warning event, no children"
    );
}

#[tokio::test]
async fn a_child_refused_for_good_fails_the_execution_and_leaves_no_other_child() {
    let log = Log::default();
    let jobs = format!("/apis/batch/v1/namespaces/{NS}/jobs");
    let refusal = "Job.batch \"errand-calc\" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1";
    let client = refusing_client(Arc::clone(&log), &[(jobs.clone(), 422, refusal)]);
    let ctx = context(client, vec![], vec![]);
    let action = reconcile(Arc::new(execution(None)), Arc::clone(&ctx))
        .await
        .unwrap();
    assert_eq!(
        action,
        Action::await_change(),
        "a retry would be refused the same way"
    );
    let status = ctx
        .latest(Arc::new(execution(None)))
        .status
        .clone()
        .unwrap();
    assert_eq!(status.phase, Some(Phase::Failed));
    let failed = conditions::get(&status.conditions, contract::ConditionType::Failed).unwrap();
    assert_eq!(failed.reason, contract::Reason::CreateRejected.as_str());
    assert_eq!(
        failed.message,
        format!("the API server refused to create Job errand-calc: {refusal}")
    );
    let base = format!("/api/v1/namespaces/{NS}");
    let mut writes: Vec<_> = requests(&log)
        .into_iter()
        .filter(|(method, _)| method != Method::GET)
        .collect();
    writes.sort();
    assert_eq!(
        writes,
        vec![
            (
                Method::DELETE,
                format!("{base}/configmaps/errand-calc-snapshot")
            ),
            (
                Method::PATCH,
                format!("/apis/errand.dev/v1alpha1/namespaces/{NS}/agentexecutions/calc/status")
            ),
            (Method::POST, format!("{base}/configmaps")),
            (Method::POST, format!("/apis/batch/v1/namespaces/{NS}/jobs")),
            (
                Method::POST,
                format!("/apis/events.k8s.io/v1/namespaces/{NS}/events")
            ),
        ],
        "the child that was created is deleted again, then Failed and its event"
    );
}

#[tokio::test]
async fn a_refusal_that_may_pass_is_retried_and_shows_in_the_status_from_the_third_attempt() {
    let log = Log::default();
    let jobs = format!("/apis/batch/v1/namespaces/{NS}/jobs");
    let quota = "jobs.batch \"errand-calc\" is forbidden: exceeded quota: jobs, requested: count/jobs.batch=1, used: count/jobs.batch=0, limited: count/jobs.batch=0";
    let client = refusing_client(Arc::clone(&log), &[(jobs, 403, quota)]);
    let ctx = context(client, vec![], vec![]);
    let status_writes = |log: &Log| {
        requests(log)
            .iter()
            .filter(|(method, path)| method == Method::PATCH && path.ends_with("/status"))
            .count()
    };
    for attempt in 1..=3 {
        let execution = ctx.latest(Arc::new(execution(None)));
        let error = reconcile(Arc::clone(&execution), Arc::clone(&ctx))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("exceeded quota"), "{error}");
        let expected_writes = usize::from(attempt >= FAILURES_BEFORE_RETRYING_SHOWS);
        assert_eq!(status_writes(&log), expected_writes, "attempt {attempt}");
        let retry = error_policy(execution, &error, Arc::clone(&ctx));
        assert_ne!(retry, Action::await_change(), "retried with backoff");
    }
    let status = ctx
        .latest(Arc::new(execution(None)))
        .status
        .clone()
        .unwrap();
    let retrying = conditions::get(&status.conditions, contract::ConditionType::Retrying).unwrap();
    assert_eq!(retrying.reason, contract::Reason::ReconcileError.as_str());
    assert!(
        retrying.message.starts_with(
            "reconciling failed 3 times in a row; retrying with backoff. Last error: \
                 creating Job errand-calc:"
        ) && retrying.message.contains("exceeded quota"),
        "{}",
        retrying.message
    );
    assert_eq!(status.phase, None, "nothing else changes");
    assert!(
        !requests(&log)
            .iter()
            .any(|(method, _)| method == Method::DELETE),
        "what was created stays for the retry"
    );
}
