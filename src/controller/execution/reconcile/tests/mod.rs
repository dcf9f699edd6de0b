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
use crate::resolve::conditions;
use crate::store::grants::{Access, GrantError, HmacSigner, UploadMode, UrlSigner};
use crate::testing::{NS, SECRET_VALUE, UID};

mod arithmetic;
mod costs;
mod failures;

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
        required_runtime_class: None,
        default_model_credentials: Default::default(),
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

fn requests(log: &Log) -> Vec<(Method, String)> {
    log.lock().unwrap().clone()
}
