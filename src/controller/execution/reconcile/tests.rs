//! The reconcile pipeline against a scripted API server that records every request: which
//! writes an execution costs, and that finished or unchanged executions cost none.

use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::batch::v1::{Job, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, Namespace, Pod, PodStatus, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::{Value, json};

use super::*;
use crate::api::{
    Agent, AgentEnvironment, AgentEnvironmentSpec, AgentExecutionStatus, AgentExtension,
    AgentRuntime, AgentSpec, Fileset, contract,
};
use crate::cluster::catalog::ClusterCatalog;
use crate::cluster::index::{Index, indexed_store};
use crate::cluster::readiness::{Cache, CachesReady};
use crate::cluster::watches;
use crate::controller::config::ControllerConfig;
use crate::controller::metrics::Metrics;
use crate::store::grants::{Access, GrantError, HmacSigner, UploadMode, UrlSigner};
use crate::testing::{NS, SECRET_VALUE, UID};

type Log = Arc<Mutex<Vec<(Method, String)>>>;

/// A client whose API server answers writes by echoing them and records every request.
fn scripted_client(log: Log) -> Client {
    refusing_client(log, &[])
}

/// A request path the scripted API server refuses, with the HTTP code and message it answers.
type Refusal = (String, u16, &'static str);

/// [`scripted_client`], except that a POST to each path of `refusals` is refused.
fn refusing_client(log: Log, refusals: &[Refusal]) -> Client {
    let refusals = refusals.to_vec();
    let service = tower::service_fn(move |request: Request<kube::client::Body>| {
        let log = Arc::clone(&log);
        let refusals = refusals.clone();
        async move {
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            log.lock().unwrap().push((method.clone(), path.clone()));
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let refused = refusals
                .iter()
                .find(|(refused, _, _)| method == Method::POST && *refused == path);
            let (status, answer) = match method {
                _ if refused.is_some() => {
                    let (_, code, message) = refused.unwrap();
                    (
                        StatusCode::from_u16(*code).unwrap(),
                        failure(*code, message),
                    )
                }
                Method::POST => (StatusCode::CREATED, echo(&body, &path)),
                Method::PATCH if path.ends_with("/status") => {
                    (StatusCode::OK, patched_status(&body))
                }
                Method::PATCH => (
                    StatusCode::OK,
                    serde_json::to_vec(&execution(None)).unwrap(),
                ),
                Method::DELETE => (StatusCode::OK, success()),
                Method::GET if path == format!("/api/v1/namespaces/{NS}/secrets/model-keys") => {
                    (StatusCode::OK, serde_json::to_vec(&model_keys()).unwrap())
                }
                _ => (StatusCode::NOT_FOUND, not_found()),
            };
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(answer)))
                    .unwrap(),
            )
        }
    });
    Client::new(service, NS)
}

/// A client whose API server never answers.
fn hanging_client() -> Client {
    let service = tower::service_fn(|_: Request<kube::client::Body>| async {
        std::future::pending::<Result<Response<Full<Bytes>>, std::convert::Infallible>>().await
    });
    Client::new(service, NS)
}

fn echo(body: &[u8], path: &str) -> Vec<u8> {
    let mut object: Value = serde_json::from_slice(body).unwrap();
    let name = path.rsplit('/').next().unwrap();
    object["metadata"]["uid"] = json!(format!("uid-of-{name}"));
    serde_json::to_vec(&object).unwrap()
}

fn patched_status(body: &[u8]) -> Vec<u8> {
    let patch: Value = serde_json::from_slice(body).unwrap();
    let mut object = serde_json::to_value(execution(None)).unwrap();
    object["status"] = patch["status"].clone();
    serde_json::to_vec(&object).unwrap()
}

fn not_found() -> Vec<u8> {
    failure(404, "not found")
}

fn failure(code: u16, message: &str) -> Vec<u8> {
    let reason = match code {
        404 => "NotFound",
        403 => "Forbidden",
        _ => "Invalid",
    };
    serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": message})).unwrap()
}

fn success() -> Vec<u8> {
    serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})).unwrap()
}

/// [`AgentExecution::test`] with this status.
fn execution(status: Option<AgentExecutionStatus>) -> AgentExecution {
    AgentExecution::test().with_status(status)
}

/// Gives `apply` the events of a watch listing `objects`.
fn listed<K>(objects: Vec<K>, mut apply: impl FnMut(&watcher::Event<K>)) {
    apply(&watcher::Event::Init);
    for object in objects {
        apply(&watcher::Event::InitApply(object));
    }
    apply(&watcher::Event::InitDone);
}

fn filled<K>(objects: Vec<K>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store();
    listed(objects, |event| writer.apply_watcher_event(event));
    store
}

/// A pod cache indexed as the controller's, filled with `pods`.
fn filled_pods(pods: Vec<Pod>) -> Index<Pod> {
    let (index, mut writer) = indexed_store(watches::pod_execution_uid);
    listed(pods, |event| writer.apply_watcher_event(event));
    index
}

fn namespaced<K: Resource<DynamicType = ()>>(mut object: K, name: &str) -> K {
    object.meta_mut().name = Some(name.into());
    object.meta_mut().namespace = Some(NS.into());
    object
}

/// The Secret the environment binds, as the API server returns it.
fn model_keys() -> Secret {
    let mut secret = namespaced(
        Secret {
            data: Some(
                [(
                    "openai".to_owned(),
                    k8s_openapi::ByteString(SECRET_VALUE.as_bytes().to_vec()),
                )]
                .into(),
            ),
            ..Secret::default()
        },
        "model-keys",
    );
    secret.metadata.uid = Some("uid-of-model-keys".into());
    secret
}

fn context(client: Client, jobs: Vec<Job>, pods: Vec<Pod>) -> Arc<Context> {
    context_signing_with(
        client,
        jobs,
        pods,
        Arc::new(HmacSigner::new("http://errand", b"key")),
    )
}

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

fn context_signing_with(
    client: Client,
    jobs: Vec<Job>,
    pods: Vec<Pod>,
    signer: Arc<dyn UrlSigner>,
) -> Arc<Context> {
    context_over(client, filled(jobs), filled_pods(pods), signer)
}

/// A context over the Job and Pod caches given, which may still be filling.
fn context_over(
    client: Client,
    jobs: Store<Job>,
    pods: Index<Pod>,
    signer: Arc<dyn UrlSigner>,
) -> Arc<Context> {
    let config = ControllerConfig::new("errand.local/errand:dev");
    Arc::new(context_from(client, config, jobs, pods, signer))
}

/// A context with these settings over the Job and Pod caches given.
fn context_from(
    client: Client,
    config: ControllerConfig,
    jobs: Store<Job>,
    pods: Index<Pod>,
    signer: Arc<dyn UrlSigner>,
) -> Context {
    let agent = namespaced(Agent::new("calculator", AgentSpec::test()), "calculator");
    let environment = namespaced(
        AgentEnvironment::new("prod", AgentEnvironmentSpec::test()),
        "prod",
    );
    let catalog = ClusterCatalog {
        agents: filled(vec![agent]),
        environments: filled(vec![environment]),
        runtimes: filled(Vec::<AgentRuntime>::new()),
        extensions: filled(Vec::<AgentExtension>::new()),
        filesets: filled(Vec::<Fileset>::new()),
        fileset_paths: Default::default(),
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "errand-controller".into(),
            instance: None,
        },
    );
    let (caches_ready, report_ready) = CachesReady::of(vec![
        Cache::new("Job", &jobs),
        Cache::new("Pod", pods.store()),
    ]);
    tokio::spawn(report_ready);
    Context::new(
        client,
        config,
        catalog,
        jobs,
        pods,
        None,
        caches_ready,
        crate::store::Store::open("file:///tmp/errand-reconcile-tests").unwrap(),
        signer,
        recorder,
        Arc::new(Metrics::default()),
    )
}

fn owned_job() -> Job {
    let mut job = namespaced(
        Job {
            spec: Some(JobSpec::default()),
            status: Some(JobStatus::default()),
            ..Job::default()
        },
        "errand-calc",
    );
    job.metadata.owner_references = execution(None).controller_owner_ref(&()).map(|o| vec![o]);
    job
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

fn requests(log: &Log) -> Vec<(Method, String)> {
    log.lock().unwrap().clone()
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
    let failed =
        status::conditions::get(&status.conditions, contract::ConditionType::Failed).unwrap();
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
    let retrying =
        status::conditions::get(&status.conditions, contract::ConditionType::Retrying).unwrap();
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

mod arithmetic {
    //! Every deadline and budget the controller computes, over the whole `i64` range of both
    //! timeouts: a spec is refused, or it becomes a valid Job, and nothing overflows.

    use proptest::prelude::*;

    use super::*;
    use crate::api::{AgentExecutionSpec, MAX_TIMEOUT_SECONDS};
    use crate::controller::build::ExecutionOwner;
    use crate::controller::execution::build;
    use crate::resolve::{InMemoryCatalog, RunBudget, RunLimits, resolve_execution};

    fn spec(timeout: i64, start: Option<i64>) -> AgentExecutionSpec {
        let agent = serde_json::from_value(json!({
            "runtime": {"image": "errand.local/calculator:dev", "command": ["sh"]},
            "config": {"config_format": "agents-spec-v1", "name": "calculator"},
        }))
        .unwrap();
        AgentExecutionSpec {
            agent: Some(agent),
            timeout_seconds: timeout,
            start_timeout_seconds: start,
            ..AgentExecutionSpec::default()
        }
    }

    fn timeout_seconds() -> impl Strategy<Value = i64> {
        prop_oneof![
            any::<i64>(),
            Just(i64::MAX),
            Just(i64::MIN),
            Just(0),
            -2i64..=2,
            (MAX_TIMEOUT_SECONDS - 2)..=(MAX_TIMEOUT_SECONDS + 2),
            1..=MAX_TIMEOUT_SECONDS,
        ]
    }

    proptest! {
        #[test]
        fn any_timeouts_are_refused_or_make_a_valid_job(
            timeout in timeout_seconds(),
            start in prop::option::of(timeout_seconds()),
            url_limit in prop::option::of(Just(MAX_TIMEOUT_SECONDS)),
            now in 0i64..4_000_000_000,
        ) {
            let now = Timestamp::from_second(now).unwrap();
            let config = ControllerConfig::new("errand.local/errand:dev");
            let limits = RunLimits {
                allowance: config.allowance(),
                max_url_lifetime_seconds: url_limit,
                telemetry_configured: false,
            };
            let mut execution = execution(None);
            execution.spec = spec(timeout, start);
            let resolved = resolve_execution(NS, &execution.spec, &InMemoryCatalog::default())
                .and_then(|s| validate::validate(s, &config, &limits));
            let in_range = |s: i64| (1..=MAX_TIMEOUT_SECONDS).contains(&s);
            match resolved {
                Err(invalid) => {
                    prop_assert!(
                        !in_range(timeout) || !start.is_none_or(in_range) || url_limit.is_some(),
                        "{invalid}"
                    );
                    prop_assert!(invalid.problems.iter().all(|p| p.field == "spec.timeoutSeconds"
                        || p.field == "spec.startTimeoutSeconds"), "{invalid}");
                }
                Ok(snapshot) => {
                    prop_assert!(in_range(timeout) && start.is_none_or(in_range));
                    let owner = ExecutionOwner::of(&execution).unwrap();
                    let job = build::job(&owner, &snapshot, &config);
                    let deadline = job.spec.unwrap().active_deadline_seconds.unwrap();
                    prop_assert!(deadline > snapshot.timeout_seconds);
                    prop_assert!(deadline <= 2 * MAX_TIMEOUT_SECONDS + config.staging_budget_seconds);
                    let budget = RunBudget::of(&snapshot, config.allowance());
                    prop_assert!(budget.urls_expire_at(now) > now);
                    prop_assert!(start_recheck(snapshot.start_timeout_seconds) <= MAX_RECHECK);
                }
            }
            // What the shell computes without validation holds for anything.
            prop_assert!(start_recheck(start.unwrap_or(timeout)) <= MAX_RECHECK);
            let starting = status::starting(
                &execution,
                "calculator",
                SnapshotRef::default(),
                "errand-calc",
                None,
                now,
            );
            execution.status = Some(starting);
            let facts = status::facts(Some(&owned_job()), &[], None, now);
            let decision = status::decide(&execution, &facts);
            if let Some(after) = decision.recheck_after {
                prop_assert!(recheck_delay(after) <= MAX_RECHECK);
            }
        }
    }
}
