//! The cluster process, wired: the shared caches, the HTTP endpoints, the admission webhook, leader election and the reconcilers, started in order and stopped together.
//!
//! Its parts know nothing of each other: [`crate::controller`], [`crate::webhook`] and
//! [`crate::dataapi`] are peers over [`crate::cluster`], and this module, above them all, hands
//! each the caches, the metrics registry and the serving certificate it shares. The HTTP
//! endpoints ([`http`]), the grant endpoint ([`grants`]) and the signed-URL blob endpoint
//! ([`blobs`]) are served here;
//! [`leader`] decides which replica reconciles. The gateway and the egress proxy are wired here
//! too.

pub mod blobs;
pub mod grants;
pub mod http;
pub mod leader;
pub mod run_ended;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client};
use tracing::info;

use crate::api::{
    Agent, AgentDeployment, AgentEnvironment, AgentExecution, AgentExtension, AgentRuntime, Fileset,
};
use crate::cluster::catalog::{ClusterCatalog, FilesetPaths};
use crate::cluster::metrics::MetricsRegistry;
use crate::cluster::scope::Namespaces;
use crate::cluster::serving::tls::ServingCertificate;
use crate::cluster::serving::{Certificates, provision};
use crate::cluster::watches;
use crate::controller::config::ControllerConfig;
use crate::controller::execution::handed_reports::HandedReports;
use crate::controller::metrics::Metrics;
use crate::controller::{self, ControllerSettings};
use crate::dataapi::{self, DataApiOptions};
use crate::egress_proxy::model_route::{ModelRoute, SecretKeys};
use crate::egress_proxy::{self, EgressProxy, ProxyMetrics};
use crate::gateway::sessions::Sessions;
use crate::gateway::{self, GatewayOptions};
use crate::store::grants::{HmacSigner, UrlSigner};
use crate::webhook::metrics::AdmissionMetrics;
use crate::webhook::{self, WebhookOptions};
use leader::LeaseSettings;

/// Everything [`run`] needs besides the client.
pub struct ServeOptions {
    /// Settings of the Jobs.
    pub config: ControllerConfig,
    /// The namespaces reconciled, admitted and served.
    pub namespaces: Namespaces,
    /// Where results are kept (the finalizer deletes from it).
    pub results: crate::store::Store,
    /// Signs the store URLs each pod gets.
    pub signer: Arc<dyn UrlSigner>,
    /// Serve the signed URLs of this signer at `/blobs/` (for `file://` stores, whose URLs
    /// point at the controller itself).
    pub serve_blobs: Option<Arc<HmacSigner>>,
    /// Where to serve `/healthz`, `/readyz` and `/metrics` (not served when `None`).
    pub listen: Option<SocketAddr>,
    /// Where the certificate of the HTTPS endpoints (the webhook, the data API) comes from;
    /// needed when either is served.
    pub certificates: Option<Certificates>,
    /// Serve the validating admission webhook (every replica does, leader or not).
    pub webhook: Option<WebhookOptions>,
    /// Serve the `data.errand.dev` aggregated API (every replica does, leader or not).
    pub data_api: Option<DataApiOptions>,
    /// Serve the gateway to AgentDeployments (every replica does, leader or not); over TLS
    /// with the serving certificate when `certificates` is given.
    pub gateway: Option<GatewayOptions>,
    /// Serve errand's egress proxy (every replica does, leader or not); agent pods reach it
    /// at the configuration's `egress_proxy_url`.
    pub egress_proxy: Option<EgressProxyOptions>,
    /// The Lease to hold before reconciling, in its namespace (no election when `None`).
    pub leader_election: Option<(String, LeaseSettings)>,
    /// This replica's name in events.
    pub instance: String,
    /// What every server (the HTTP endpoint, the webhook, the data API, the gateway)
    /// tolerates from its clients.
    pub server_limits: crate::cluster::listener::ServerLimits,
    /// The largest result a pod may upload through the blob endpoint (`file://` stores).
    pub max_result_bytes: u64,
}

/// Where errand's egress proxy listens and resolves.
#[derive(Clone, Debug)]
pub struct EgressProxyOptions {
    /// Its address.
    pub listen: SocketAddr,
    /// Resolve host names at this nameserver instead of the system's (a controller running
    /// off-cluster).
    pub nameserver: Option<SocketAddr>,
    /// Roots the model route trusts beside the native ones (an operator's own CA for
    /// in-house model endpoints).
    pub model_roots: Vec<reqwest::Certificate>,
}

/// Why the process stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The HTTP endpoints could not be served.
    #[error("listening on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The gateway's TLS could not be configured.
    #[error("starting the gateway: {0}")]
    Gateway(String),
    /// The admission webhook could not be served.
    #[error("starting the webhook: {0}")]
    Webhook(#[from] webhook::StartError),
    /// The data API could not be served.
    #[error("starting the data API: {0}")]
    DataApi(#[from] dataapi::StartError),
    /// An HTTPS endpoint is asked for without saying where its certificate comes from.
    #[error("the webhook and the data API need a serving certificate (self-signed or files)")]
    NoCertificate,
    /// A cache stopped before it was filled.
    #[error("a cache stopped before it was filled")]
    CacheStopped,
    /// This replica could not renew its Lease; another may be reconciling now.
    #[error("lost the leader lease")]
    LostLease,
}

impl RunError {
    /// A short, stable label for metrics and exit reporting.
    pub fn metric_label(&self) -> &'static str {
        match self {
            RunError::Listen { .. } => "listen",
            RunError::Webhook(_) => "webhook",
            RunError::DataApi(_) => "data_api",
            RunError::Gateway(_) => "gateway",
            RunError::NoCertificate => "no_certificate",
            RunError::CacheStopped => "cache_stopped",
            RunError::LostLease => "lost_lease",
        }
    }
}

/// Binds one of the process's ports: the probes' and blobs' HTTP, the webhook's and the data
/// API's HTTPS.
async fn bind(address: SocketAddr) -> Result<tokio::net::TcpListener, RunError> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| RunError::Listen { address, source })
}

/// The metrics of every part of the process, on one registry.
struct ProcessMetrics {
    controller: Arc<Metrics>,
    admission: Arc<AdmissionMetrics>,
    egress_proxy: Arc<ProxyMetrics>,
    registry: MetricsRegistry,
}

impl ProcessMetrics {
    fn new() -> Self {
        let controller = Arc::new(Metrics::default());
        let admission = Arc::new(AdmissionMetrics::default());
        let egress_proxy = Arc::new(ProxyMetrics::default());
        let mut registry = MetricsRegistry::default();
        controller.register(&mut registry);
        admission.register(&mut registry);
        egress_proxy.register(&mut registry);
        Self {
            controller,
            admission,
            egress_proxy,
            registry,
        }
    }

    /// The text `/metrics` answers, with the phase gauge counted from `executions` first.
    fn render(&self, executions: &[Arc<AgentExecution>]) -> String {
        self.controller
            .count_phases(executions, jiff::Timestamp::now());
        self.registry.render()
    }
}

/// Runs the process until `shutdown` completes (in-flight reconciles finish first) or the
/// Lease is lost.
///
/// Every replica fills the caches, serves the webhook and the data API and reports ready; only
/// the one holding the Lease reconciles. Readiness therefore means "can answer admission
/// reviews", which is what the webhook Service routes by; the data API answers 503 until it
/// has read the front proxy's CA.
pub async fn run(
    client: Client,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), RunError> {
    let namespaces = &options.namespaces;
    let metrics = Arc::new(ProcessMetrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();

    let all = watcher::Config::default();
    let (executions, execution_stream) =
        watches::cache(namespaces.watches::<AgentExecution>(&client, &all), |_| {});
    let (agents, agent_stream) = watches::cache(namespaces.watches::<Agent>(&client, &all), |_| {});
    let (environments, environment_stream) = watches::cache(
        namespaces.watches::<AgentEnvironment>(&client, &all),
        |_| {},
    );
    let (filesets, fileset_stream) =
        watches::cache(namespaces.watches::<Fileset>(&client, &all), |_| {});
    // AgentRuntimes and AgentExtensions are cluster-scoped: watched cluster-wide even when
    // only some namespaces are served.
    let (runtimes, runtime_stream) = watches::cache(
        vec![(Api::<AgentRuntime>::all(client.clone()), all.clone())],
        |_| {},
    );
    let (extensions, extension_stream) = watches::cache(
        vec![(Api::<AgentExtension>::all(client.clone()), all.clone())],
        |_| {},
    );
    tasks.spawn(watches::drive(agent_stream));
    tasks.spawn(watches::drive(runtime_stream));
    tasks.spawn(watches::drive(extension_stream));
    tasks.spawn(watches::drive(environment_stream));
    tasks.spawn(watches::drive(fileset_stream));
    let catalog = ClusterCatalog {
        agents,
        environments,
        runtimes,
        extensions,
        filesets,
        fileset_paths: FilesetPaths::from_store(options.results.clone()),
        required_runtime_class: options.config.required_runtime_class.clone(),
        default_model_credentials: options.config.default_model_credentials,
    };

    let handed_reports = Arc::new(HandedReports::default());
    if let Some(address) = options.listen {
        let listener = bind(address).await?;
        let controller_metrics = Arc::clone(&metrics.controller);
        let (store, metrics) = (executions.clone(), Arc::clone(&metrics));
        let probes = http::Probes {
            ready: Arc::clone(&ready),
            metrics: Arc::new(move || metrics.render(&store.state())),
            blobs: options.serve_blobs.map(|signer| {
                Arc::new(
                    blobs::BlobEndpoint::new(options.results.clone(), signer)
                        .with_max_put_bytes(options.max_result_bytes),
                )
            }),
            grants: Some(Arc::new(grants::GrantEndpoint::new(
                client.clone(),
                Arc::clone(&options.signer),
                &options.config,
                Arc::clone(&controller_metrics),
            ))),
            run_ended: options.config.run_end_tokens.clone().map(|tokens| {
                let recorder = run_ended::HandOver {
                    handed: Arc::clone(&handed_reports),
                    otherwise: run_ended::ExecutionAnnotation {
                        client: client.clone(),
                        tokens: tokens.clone(),
                    },
                };
                Arc::new(run_ended::RunEndedEndpoint::new(
                    options.results.clone(),
                    tokens,
                    Arc::new(recorder),
                    Arc::clone(&controller_metrics),
                ))
            }),
        };
        tasks.spawn(http::serve(listener, options.server_limits, probes));
    }
    let certificate = if options.webhook.is_some() || options.data_api.is_some() {
        let certificates = options.certificates.ok_or(RunError::NoCertificate)?;
        let certificate = Arc::new(ServingCertificate::default());
        let (kept, client) = (Arc::clone(&certificate), client.clone());
        tasks.spawn(async move { provision::keep(client, certificates, &kept).await });
        Some(certificate)
    } else {
        None
    };
    if let (Some(webhook), Some(certificate)) = (options.webhook, &certificate) {
        webhook::start(
            webhook::ClusterResolver {
                client: client.clone(),
                catalog: catalog.clone(),
            },
            Arc::clone(&metrics.admission),
            options.config.run_limits(options.signer.as_ref()),
            webhook.path_token,
            bind(webhook.listen).await?,
            options.server_limits,
            Arc::clone(certificate),
            &mut tasks,
        )?;
    }
    if let (Some(data_api), Some(certificate)) = (options.data_api, &certificate) {
        let sources = dataapi::Sources {
            executions: executions.clone(),
            filesets: catalog.filesets.clone(),
            store: options.results.clone(),
            namespaces: options.namespaces.clone(),
        };
        dataapi::start(
            client.clone(),
            sources,
            bind(data_api.listen).await?,
            options.server_limits,
            data_api.limits,
            data_api.links,
            Arc::clone(certificate),
            &mut tasks,
        )?;
    }
    if let Some(gateway) = options.gateway {
        let (deployments, deployment_stream) =
            watches::cache(namespaces.watches::<AgentDeployment>(&client, &all), |_| {});
        // The slices of errand's Services: the EndpointSlice controller copies a Service's
        // labels onto its slices.
        let managed = all.clone().labels(&watches::managed_selector());
        let (slices, slice_stream) = watches::cache(
            namespaces.watches::<EndpointSlice>(&client, &managed),
            |_| {},
        );
        tasks.spawn(watches::drive(deployment_stream));
        tasks.spawn(watches::drive(slice_stream));
        let acceptor = match &certificate {
            Some(certificate) => Some(
                crate::cluster::serving::tls::acceptor(Arc::clone(certificate))
                    .map_err(|e| RunError::Gateway(e.to_string()))?,
            ),
            None => None,
        };
        gateway::start(
            client.clone(),
            deployments,
            slices,
            Sessions::new(options.results.clone(), gateway.sessions),
            bind(gateway.listen).await?,
            options.server_limits,
            acceptor,
            &mut tasks,
        );
    }
    if let Some(proxy_options) = options.egress_proxy {
        let managed = all.clone().labels(&watches::managed_selector());
        let (pods, pod_stream) = watches::cache(
            namespaces.watches::<Pod>(&client, &managed),
            egress_proxy::trim_pod,
        );
        tasks.spawn(watches::drive(pod_stream));
        let resolver: Arc<dyn egress_proxy::Resolver> = match proxy_options.nameserver {
            Some(nameserver) => Arc::new(egress_proxy::NameserverResolver::new(nameserver)),
            None => Arc::new(egress_proxy::SystemResolver),
        };
        let policy = Arc::clone(&options.config.outbound);
        let mut proxy = EgressProxy::new(
            pods,
            Arc::clone(&policy),
            Arc::clone(&metrics.egress_proxy),
            options.server_limits,
        )
        .with_resolver(Arc::clone(&resolver));
        if let Some(tokens) = options.config.model_tokens.clone() {
            proxy = proxy.with_model_route(ModelRoute::new(
                tokens,
                Arc::new(SecretKeys::new(client.clone())),
                policy,
                resolver,
                proxy_options.model_roots,
            ));
        }
        let listener = bind(proxy_options.listen).await?;
        egress_proxy::start(proxy, listener, options.server_limits, &mut tasks);
    }
    if !catalog.wait_until_ready().await {
        return Err(RunError::CacheStopped);
    }
    if let Some(certificate) = &certificate {
        certificate.wait_loaded().await;
    }
    ready.store(true, Ordering::Relaxed);

    let lease = options.leader_election.map(|(lease_namespace, settings)| {
        (
            Api::<Lease>::namespaced(client.clone(), &lease_namespace),
            settings,
        )
    });
    if let Some((api, settings)) = &lease {
        leader::acquire(api, settings).await;
    }

    let settings = ControllerSettings {
        namespaces: options.namespaces.clone(),
        config: options.config,
        results: options.results,
        signer: options.signer,
        instance: options.instance,
        handed_reports,
    };
    let reconcilers = controller::run(
        client,
        settings,
        catalog,
        Arc::clone(&metrics.controller),
        (executions, execution_stream),
        shutdown,
    );
    info!(
        namespaces = %options.namespaces,
        "reconciling AgentExecutions"
    );
    let outcome = match &lease {
        Some((api, settings)) => tokio::select! {
            () = reconcilers => Ok(()),
            () = leader::keep(api, settings) => Err(RunError::LostLease),
        },
        None => {
            reconcilers.await;
            Ok(())
        }
    };
    ready.store(false, Ordering::Relaxed);
    tasks.abort_all();
    outcome
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::contract::{ConditionType, Reason};
    use crate::api::{AgentExecutionStatus, Phase};

    /// [`AgentExecution::test`] in `phase`.
    fn execution(phase: Option<Phase>) -> Arc<AgentExecution> {
        Arc::new(
            AgentExecution::test().with_status(Some(AgentExecutionStatus {
                phase,
                ..Default::default()
            })),
        )
    }

    #[test]
    fn the_text_format_has_every_metric() {
        let process = ProcessMetrics::new();
        let metrics = &process.controller;
        drop(metrics.reconcile_started());
        metrics
            .work_queue
            .wants(kube::runtime::reflector::ObjectRef::new("run").within("team"));
        metrics.reconcile_failed("conflict");
        metrics.job_created(0.02);
        metrics.observe(&crate::controller::execution::status::Timings {
            queue_wait: Some(30.0),
            start_latency: Some(35.0),
            run_duration: Some(7.0),
            completed_after: Some(42.0),
            results_bytes: Some(4096),
        });
        metrics.grants_issued(0.001, true);
        metrics.expired("namespace");
        let mut removed = std::collections::BTreeMap::new();
        removed.insert(
            "results",
            crate::retention::sweep_store::Tally {
                groups: 1,
                objects: 5,
                bytes: 700,
            },
        );
        metrics.swept(&crate::retention::sweep_store::SweepReport {
            dry_run: false,
            grace_seconds: 0,
            removed,
            groups: vec![],
            in_grace: 0,
            referenced: 0,
            unknown_keys: 0,
        });
        metrics.sweep_failed();
        process.admission.reviewed("invalid", 0.002);
        let text = process.render(&[
            execution(Some(Phase::Running)),
            execution(Some(Phase::Running)),
            execution(None),
        ]);
        assert!(
            text.contains("errand_controller_reconciles_total 1"),
            "{text}"
        );
        assert!(text.contains("errand_controller_reconcile_errors_total{reason=\"conflict\"} 1"));
        assert!(text.contains("errand_controller_reconcile_duration_seconds_count 1"));
        assert!(text.contains("errand_controller_executions{phase=\"Running\"} 2"));
        assert!(text.contains("errand_controller_executions{phase=\"None\"} 1"));
        assert!(text.contains("errand_controller_job_created_after_seconds_count 1"));
        assert!(text.contains("errand_controller_work_queue_depth 1"));
        assert!(text.contains("errand_controller_completed_after_seconds_sum 42.0"));
        for observed in [
            "errand_controller_queue_wait_seconds_sum 30.0",
            "errand_controller_start_latency_seconds_sum 35.0",
            "errand_controller_run_duration_seconds_sum 7.0",
            "errand_controller_results_bytes_sum 4096.0",
            "errand_controller_grants_issued_total{outcome=\"ok\"} 1",
            "errand_controller_grant_issue_duration_seconds_count 1",
            "errand_controller_store_sweeps_total{outcome=\"failed\"} 1",
        ] {
            assert!(text.contains(observed), "{observed} in {text}");
        }
        assert!(
            text.contains("errand_controller_executions_expired_total{source=\"namespace\"} 1")
        );
        assert!(text.contains("errand_controller_admission_reviews_total{verdict=\"invalid\"} 1"));
        assert!(text.contains("errand_controller_admission_duration_seconds_count 1"));
        let later = process.render(&[execution(Some(Phase::Succeeded))]);
        assert!(!later.contains("phase=\"Running\""), "{later}");
        assert!(
            later.contains("errand_controller_longest_starting_seconds 0.0"),
            "{later}"
        );

        // An execution Starting for an hour shows; one Kueue holds longer does not.
        let hour_ago = Time(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600));
        let starting = |reason: Reason, created: Time| {
            let mut status = AgentExecutionStatus {
                phase: Some(Phase::Starting),
                ..Default::default()
            };
            crate::resolve::conditions::ConditionWriter::new(
                &mut status.conditions,
                Some(1),
                created.clone(),
            )
            .set(ConditionType::Started, false, reason, "");
            Arc::new(
                AgentExecution::test()
                    .with_creation_timestamp(created)
                    .with_status(Some(status)),
            )
        };
        let day_ago = Time(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(86400));
        let text = process.render(&[
            starting(Reason::PodStarting, hour_ago),
            starting(Reason::Queued, day_ago),
        ]);
        let longest: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("errand_controller_longest_starting_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        assert!((3600.0..3700.0).contains(&longest), "{longest}");
    }
}
