//! `errand controller`: runs the cluster controller in this process with JSON logs.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::NetworkPolicyEgressRule;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::ModelCredentials;
use crate::api::data::DATA_API_SERVICE;
use crate::cluster::listener::ServerLimits;
use crate::cluster::scope::Namespaces;
use crate::cluster::serving::{CaBundleHolder, Certificates, SelfSigned, caller};
use crate::controller::config::{
    AgentIngress, ControllerConfig, ExecutionEgress, StoreSweepSchedule, parse_labels,
};
use crate::dataapi::{DEFAULT_MAX_UPLOAD_BYTES, DataApiOptions, UploadLimits};
use crate::gateway::GatewayOptions;
use crate::gateway::sessions::{DEFAULT_MAX_TURNS, SessionLimits};
use crate::outbound::{Cidr, OutboundPolicy, OutboundSettings};
use crate::resolve::run_tokens::RunTokens;
use crate::retention::gc::parse_age;
use crate::runner::signals::stop_signal;
use crate::serve::leader::LeaseSettings;
use crate::serve::{EgressProxyOptions, ServeOptions, run};
use crate::store::Store;
use crate::store::grants::{HmacSigner, UrlSigner};
use crate::webhook::WebhookOptions;

use crate::ops::{Error, ErrorCode};

/// Options of `errand controller`.
#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// The errand image whose binary the `errand-stage` init container installs in each pod.
    #[arg(long, env = "ERRAND_IMAGE")]
    pub errand_image: String,
    /// Path of the errand binary inside the errand image.
    #[arg(long, env = "ERRAND_BINARY", default_value = "/usr/local/bin/errand")]
    pub errand_binary: String,
    /// Pull policy of the errand image.
    #[arg(long, env = "ERRAND_IMAGE_PULL_POLICY")]
    pub errand_image_pull_policy: Option<String>,
    /// Store URL (`file://`, `s3://`, `gs://`, `az://`) where results are kept.
    #[arg(long, env = "ERRAND_STORE")]
    pub store: String,
    /// Base URL of this controller's HTTP endpoint (`--listen`) as pods reach it, for example
    /// its Service: pods ask it for their grants, and with a `file://` store fetch and upload
    /// through its blob endpoint.
    #[arg(long, env = "ERRAND_BLOB_URL")]
    pub blob_url: String,
    /// Reconcile, admit and serve only these namespaces (comma-separated or repeated; all
    /// namespaces when unset). The controller then needs RBAC in these namespaces only.
    #[arg(long, env = "WATCH_NAMESPACE", value_delimiter = ',', value_parser = namespace_name)]
    pub watch_namespace: Vec<String>,
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "ERRAND_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Hold a Lease before reconciling, so only one replica acts.
    #[arg(long, env = "ERRAND_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// The controller's own namespace: of the leader Lease and the serving certificate's Secret.
    #[arg(long, env = "POD_NAMESPACE", default_value = "errand-system")]
    pub lease_namespace: String,
    /// Create the leader Lease when it is missing (off when an installer owns the Lease).
    #[arg(long, env = "ERRAND_CREATE_LEASE", default_value_t = true, action = clap::ArgAction::Set)]
    pub create_lease: bool,
    /// This replica's identity in the Lease and in events.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Seconds staging may take in a pod (`errand stage` fails past it); also added to each
    /// Job's deadline, with the time to upload results.
    #[arg(long, default_value_t = crate::runner::DEFAULT_STAGING_BUDGET.as_secs() as i64,
          value_parser = clap::value_parser!(i64).range(1..))]
    pub staging_budget_seconds: i64,
    /// What staging may extract in each pod.
    #[command(flatten)]
    pub extract: crate::cli::staging::ExtractArgs,
    /// Seconds a cancelled pod gets to save its partial results.
    #[arg(long, default_value_t = 120)]
    pub termination_grace_seconds: i64,
    /// The longest a pod's grants (signed store URLs) may last, in seconds; an execution whose
    /// start timeout, timeout, staging budget and termination grace add up to more is refused.
    /// Unset: as long as each run needs (within a presigning store's own limit).
    #[arg(long, env = "ERRAND_MAX_GRANT_LIFETIME_SECONDS",
          value_parser = clap::value_parser!(i64).range(1..))]
    pub max_grant_lifetime_seconds: Option<i64>,
    /// Kueue LocalQueue for executions that name none.
    #[arg(long, env = "ERRAND_DEFAULT_QUEUE_NAME")]
    pub default_queue_name: Option<String>,
    /// Seconds a finished execution is kept when neither its `ttlSecondsAfterFinished` nor its
    /// namespace's `errand.dev/ttl-seconds-after-finished` annotation sets a lifetime (0 to
    /// 31622400); unset keeps such executions until they are deleted.
    #[arg(long, env = "ERRAND_DEFAULT_TTL_SECONDS_AFTER_FINISHED", value_parser = crate::retention::ttl::parse_seconds)]
    pub default_ttl_seconds_after_finished: Option<i64>,
    /// An image pull Secret (in each execution's namespace) every agent pod gets, before its
    /// AgentEnvironment's own; repeat for several.
    #[arg(long = "agent-image-pull-secret", value_name = "SECRET", value_parser = agent_object_name)]
    pub agent_image_pull_secrets: Vec<String>,
    /// ServiceAccount of agent pods whose AgentEnvironment names none (unset: the namespace's
    /// `default`). Its token is never mounted.
    #[arg(long, value_name = "NAME", value_parser = agent_object_name)]
    pub agent_service_account: Option<String>,
    /// The RuntimeClass every agent pod runs under (for example `gvisor`), executions and
    /// AgentDeployments alike: one whose environment or AgentRuntime names another is refused
    /// at create (unset: each run's own, or the node's default runtime).
    #[arg(long, env = "ERRAND_EXECUTION_RUNTIME_CLASS", value_name = "NAME", value_parser = agent_object_name)]
    pub execution_runtime_class: Option<String>,
    /// `sizeLimit` of each execution's workspace `emptyDir`, as in `20Gi` (unset: none).
    #[arg(long, value_name = "SIZE", value_parser = crate::controller::config::parse_size_limit)]
    pub workspace_size_limit: Option<Quantity>,
    /// `sizeLimit` of each execution's scratch `emptyDir` (input, logs, artifacts), as in `2Gi`.
    #[arg(long, value_name = "SIZE", value_parser = crate::controller::config::parse_size_limit)]
    pub scratch_size_limit: Option<Quantity>,
    /// Sweep the store this often while leading (seconds, or a number with s, m, h, d or w):
    /// remove the results of executions that are gone, Fileset blobs nothing pins and
    /// abandoned uploads (in the watched namespaces only, with --watch-namespace). Unset: no
    /// periodic sweep (`errand admin sweep-store` runs one by hand).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub store_sweep_interval: Option<u64>,
    /// Anything in the store written more recently than this stays, referenced or not.
    #[arg(long, value_name = "AGE", value_parser = parse_age, default_value = "24h")]
    pub store_sweep_grace: u64,
    /// Serve the validating admission webhook over HTTPS at this address.
    #[arg(long, env = "ERRAND_WEBHOOK_LISTEN")]
    pub webhook_listen: Option<SocketAddr>,
    /// Serve the `data.errand.dev` aggregated API (results and Fileset content) over HTTPS at
    /// this address.
    #[arg(long, env = "ERRAND_DATA_API_LISTEN")]
    pub data_api_listen: Option<SocketAddr>,
    /// Serve the gateway to AgentDeployments at this address (over HTTPS with the serving
    /// certificate when the webhook or the data API is served too, else plain HTTP).
    #[arg(long, env = "ERRAND_GATEWAY_LISTEN")]
    pub gateway_listen: Option<SocketAddr>,
    /// The largest Fileset content the data API accepts, in bytes; a larger upload is refused
    /// with 413.
    #[arg(long, env = "ERRAND_MAX_UPLOAD_BYTES", default_value_t = DEFAULT_MAX_UPLOAD_BYTES)]
    pub max_upload_bytes: u64,
    /// The largest result a pod may upload through this controller's blob endpoint (a
    /// `file://` store), in bytes; a larger upload is refused with 413.
    #[arg(long, env = "ERRAND_MAX_RESULT_BYTES", default_value_t = crate::serve::blobs::DEFAULT_MAX_PUT_BYTES)]
    pub max_result_bytes: u64,
    /// Whether a data API download that asks (`?link=true`, as `errand results download`
    /// does) gets a link (a 5-minute presigned URL of the object) instead of the bytes, when the
    /// store presigns URLs clients can reach (s3://, gs://, az://); `false`: every download
    /// streams through errand.
    #[arg(long, env = "ERRAND_DATA_API_LINKS", default_value_t = true, action = clap::ArgAction::Set)]
    pub data_api_links: bool,
    /// Directory holding `tls.crt` and `tls.key` kept current by cert-manager, for the webhook
    /// and the data API; without it the controller generates a self-signed certificate and puts
    /// its CA into the webhook configuration and the APIService itself.
    #[arg(long, alias = "webhook-cert-dir", env = "ERRAND_SERVING_CERT_DIR")]
    pub serving_cert_dir: Option<PathBuf>,
    /// The Service the API server calls the webhook and the data API through (its DNS names go
    /// into the self-signed certificate).
    #[arg(long, alias = "webhook-service", env = "ERRAND_SERVING_SERVICE")]
    pub serving_service: Option<String>,
    /// The Secret in the controller's namespace that shares the self-signed certificate
    /// between replicas.
    #[arg(
        long,
        alias = "webhook-secret",
        env = "ERRAND_SERVING_SECRET",
        default_value = "errand-serving-tls"
    )]
    pub serving_secret: String,
    /// The ValidatingWebhookConfiguration whose CA bundle the controller keeps (self-signed
    /// certificate, with --webhook-listen).
    #[arg(long, env = "ERRAND_WEBHOOK_CONFIGURATION")]
    pub webhook_configuration: Option<String>,
    /// The APIService whose CA bundle the controller keeps (self-signed certificate, with
    /// --data-api-listen).
    #[arg(long, env = "ERRAND_API_SERVICE", default_value = DATA_API_SERVICE)]
    pub api_service: String,
    /// The OpenTelemetry collector executions with `autoTelemetry: true` send their traces to
    /// (the runner's spans and the agent's own); without it such executions are refused.
    #[command(flatten)]
    pub telemetry: crate::cli::telemetry::TelemetryArgs,
    /// Also export a `reconcile` span (service `errand-controller`) for each reconcile of an
    /// execution with `autoTelemetry: true` into that execution's trace, to --otlp-endpoint.
    #[arg(
        long,
        env = "ERRAND_EXPORT_RECONCILE_SPANS",
        requires = "otlp_endpoint"
    )]
    pub export_reconcile_spans: bool,
    /// What requests made on a tenant's behalf (notify webhooks) may reach.
    #[command(flatten)]
    pub outbound: OutboundArgs,
    /// What every server tolerates from its clients.
    #[command(flatten)]
    pub server_limits: ServerLimitArgs,
    /// Create a NetworkPolicy per AgentDeployment that admits only the gateway (this
    /// controller's pods, `--gateway-pod-labels` in its own namespace) and
    /// `--agent-ingress-cidr` to the agent's pods.
    #[arg(long, env = "ERRAND_DEPLOYMENT_NETWORK_POLICIES", default_value_t = true, action = clap::ArgAction::Set)]
    pub deployment_network_policies: bool,
    /// Labels of this controller's pods (`key=value,...`), which serve the gateway.
    #[arg(
        long,
        env = "ERRAND_GATEWAY_POD_LABELS",
        value_parser = parse_labels,
        default_value = "app.kubernetes.io/name=errand,app.kubernetes.io/instance=errand,app.kubernetes.io/component=controller"
    )]
    pub gateway_pod_labels: BTreeMap<String, String>,
    /// Turns a gateway chat session may hold; the next is refused (409) and a new session
    /// must start.
    #[arg(long, env = "ERRAND_GATEWAY_SESSION_MAX_TURNS", default_value_t = DEFAULT_MAX_TURNS as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub gateway_session_max_turns: u32,
    /// How long a gateway chat session lasts after its last turn (seconds, or a number with s,
    /// m, h, d or w; 0 = until its deployment goes).
    #[arg(long, env = "ERRAND_GATEWAY_SESSION_RETENTION", default_value = "30d", value_parser = parse_age)]
    pub gateway_session_retention: u64,
    /// A CIDR every AgentDeployment's NetworkPolicy also admits (repeatable), for example the
    /// nodes' addresses on a CNI that filters traffic from the node.
    #[arg(long = "agent-ingress-cidr")]
    pub agent_ingress_cidrs: Vec<String>,
    /// `deny`: a NetworkPolicy per execution lets its pod reach only DNS (the cluster's
    /// kube-dns pods), this controller's URL when its host is an address,
    /// `--execution-egress-allow` and its environment's `egress.allow` ranges. `open`: no
    /// policy (the chart's default is `deny`).
    #[arg(long, env = "ERRAND_EXECUTION_EGRESS", value_enum, default_value_t = EgressDefault::Open)]
    pub execution_egress: EgressDefault,
    /// A NetworkPolicy egress rule (JSON, as in a NetworkPolicy's `spec.egress`) every
    /// execution's pod gets with `--execution-egress deny`: errand's own endpoints, such as the
    /// controller's pods or the store (repeatable).
    #[arg(long = "execution-egress-allow", value_name = "JSON", value_parser = egress_rule)]
    pub execution_egress_allow: Vec<NetworkPolicyEgressRule>,
    /// Serve errand's egress proxy at this address (for example `0.0.0.0:3128`): with
    /// `--execution-egress deny`, the one way agent pods reach the host names their
    /// environment's `egress.hosts` lists. Only running errand pods are served.
    #[arg(long, env = "ERRAND_EGRESS_PROXY_LISTEN")]
    pub egress_proxy_listen: Option<SocketAddr>,
    /// The URL agent pods reach the egress proxy at (`http://host:port`; the chart's Service),
    /// which they get as `HTTPS_PROXY` and `HTTP_PROXY`. Without it, `egress.hosts` is refused.
    #[arg(long, env = "ERRAND_EGRESS_PROXY_URL", value_parser = proxy_url)]
    pub egress_proxy_url: Option<url::Url>,
    /// The DNS server (`IP:port`) the egress proxy resolves host names at, instead of the
    /// system's: for a controller running off-cluster, the cluster DNS Service's address.
    #[arg(
        long,
        env = "ERRAND_EGRESS_PROXY_NAMESERVER",
        requires = "egress_proxy_listen"
    )]
    pub egress_proxy_nameserver: Option<SocketAddr>,
    /// PEM certificates the egress proxy's model route trusts beside the system's roots, for
    /// model endpoints under the operator's own CA (the route speaks only TLS).
    #[arg(
        long,
        env = "ERRAND_EGRESS_PROXY_MODEL_CA",
        value_name = "FILE",
        requires = "egress_proxy_listen"
    )]
    pub egress_proxy_model_ca: Option<PathBuf>,
    /// How runs whose environment sets no `modelCredentials` hold their models' keys:
    /// `proxied` (recommended with the egress proxy and a signing key) gives OpenAI-compatible
    /// models bound to a Secret a placeholder token and a `base_url` on the proxy, and refuses
    /// other providers' until their environment says `Direct`; `direct` puts the Secret's
    /// value in the variable.
    #[arg(long, env = "ERRAND_MODEL_CREDENTIALS", value_enum, default_value_t = ModelCredentialsDefault::Direct)]
    pub model_credentials: ModelCredentialsDefault,
}

/// How runs hold their models' keys when their environment does not say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelCredentialsDefault {
    /// The variable holds the Secret's value.
    Direct,
    /// The egress proxy adds the key; the agent holds a placeholder.
    Proxied,
}

/// A refused `--egress-proxy-url`.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not an egress proxy URL: give http://host:port (the proxy's Service and port), \
     without a path or credentials"
)]
pub struct NotAProxyUrl(String);

/// An egress proxy URL: `http://host:port`, nothing else.
fn proxy_url(value: &str) -> Result<url::Url, NotAProxyUrl> {
    let refused = || NotAProxyUrl(value.to_owned());
    let url = url::Url::parse(value).map_err(|_| refused())?;
    if url.scheme() != "http"
        || url.host().is_none()
        || url.port().is_none()
        || !matches!(url.path(), "" | "/")
        || url.query().is_some()
        || !url.username().is_empty()
    {
        return Err(refused());
    }
    Ok(url)
}

/// What an execution's pod may reach when its environment names nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EgressDefault {
    /// Whatever the cluster's own policies allow.
    Open,
    /// Only DNS and errand's own endpoints.
    Deny,
}

/// A NetworkPolicy egress rule from its JSON form.
fn egress_rule(value: &str) -> Result<NetworkPolicyEgressRule, serde_json::Error> {
    serde_json::from_str(value)
}

/// The limits of the controller's servers (`/metrics` and grants, the webhook, the data API,
/// the gateway).
#[derive(Debug, clap::Args)]
pub struct ServerLimitArgs {
    /// Seconds a client may take to send a request's head, or to start its next request on a
    /// kept-alive connection; slower connections are closed.
    #[arg(long, env = "ERRAND_HEADER_READ_TIMEOUT_SECONDS", default_value_t = ServerLimits::DEFAULT.header_read_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_read_timeout_seconds: u64,
    /// Seconds a TLS handshake may take.
    #[arg(long, env = "ERRAND_TLS_HANDSHAKE_TIMEOUT_SECONDS", default_value_t = ServerLimits::DEFAULT.handshake_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub tls_handshake_timeout_seconds: u64,
    /// Seconds a request body may go without a byte arriving; a body that stops is cut off
    /// (the request fails and the connection is closed).
    #[arg(long, env = "ERRAND_BODY_IDLE_TIMEOUT_SECONDS", default_value_t = ServerLimits::DEFAULT.body_idle_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_idle_timeout_seconds: u64,
    /// Connections each server serves at once; more get 503 with Retry-After.
    #[arg(long, env = "ERRAND_MAX_CONNECTIONS", default_value_t = ServerLimits::DEFAULT.max_connections as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
}

impl ServerLimitArgs {
    fn limits(&self) -> ServerLimits {
        ServerLimits {
            header_read_timeout: std::time::Duration::from_secs(self.header_read_timeout_seconds),
            handshake_timeout: std::time::Duration::from_secs(self.tls_handshake_timeout_seconds),
            body_idle_timeout: std::time::Duration::from_secs(self.body_idle_timeout_seconds),
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
        }
    }
}

/// The outbound policy's flags: the cluster's ranges, and the operator's deny and allow lists
/// over the default (loopback, link-local, private, CGNAT, ULA, multicast denied).
#[derive(Debug, clap::Args)]
pub struct OutboundArgs {
    /// The cluster's Service CIDR, denied to tenant-directed requests (repeat for dual stack).
    #[arg(
        long = "service-cidr",
        value_name = "CIDR",
        env = "ERRAND_SERVICE_CIDR",
        value_delimiter = ','
    )]
    pub service_cidrs: Vec<Cidr>,
    /// The cluster's pod CIDR, denied to tenant-directed requests (repeat for dual stack).
    #[arg(
        long = "pod-cidr",
        value_name = "CIDR",
        env = "ERRAND_POD_CIDR",
        value_delimiter = ','
    )]
    pub pod_cidrs: Vec<Cidr>,
    /// Another range (or address) tenant-directed requests may not reach; repeat for several.
    #[arg(
        long = "outbound-deny",
        value_name = "CIDR",
        env = "ERRAND_OUTBOUND_DENY",
        value_delimiter = ','
    )]
    pub deny: Vec<Cidr>,
    /// A range (or address) tenant-directed requests may reach whatever denies it, as an
    /// in-cluster webhook receiver's Service IP; repeat for several.
    #[arg(
        long = "outbound-allow",
        value_name = "CIDR",
        env = "ERRAND_OUTBOUND_ALLOW",
        value_delimiter = ','
    )]
    pub allow: Vec<Cidr>,
}

impl OutboundArgs {
    /// The policy, with `api_servers` (the addresses the controller reaches its API server
    /// at) denied too.
    pub fn policy(&self, api_servers: Vec<std::net::IpAddr>) -> OutboundPolicy {
        OutboundSettings {
            service_cidrs: self.service_cidrs.clone(),
            pod_cidrs: self.pod_cidrs.clone(),
            api_servers,
            deny: self.deny.clone(),
            allow: self.allow.clone(),
        }
        .policy()
    }
}

/// The addresses the controller reaches the API server at: the in-cluster Service address
/// and the kubeconfig's or in-cluster config's server, when it is an IP address.
fn api_server_addresses(cluster_url: &http::Uri) -> Vec<std::net::IpAddr> {
    let mut addresses: Vec<std::net::IpAddr> = std::env::var("KUBERNETES_SERVICE_HOST")
        .ok()
        .and_then(|host| host.parse().ok())
        .into_iter()
        .collect();
    let host = cluster_url.host().unwrap_or_default();
    if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse() {
        addresses.push(ip);
    }
    addresses
}

impl ControllerArgs {
    /// The periodic store sweep, if an interval is set.
    fn store_sweep_schedule(&self) -> Option<StoreSweepSchedule> {
        let interval = self.store_sweep_interval.filter(|s| *s > 0)?;
        Some(StoreSweepSchedule {
            interval: std::time::Duration::from_secs(interval),
            grace: jiff::SignedDuration::from_secs(
                i64::try_from(self.store_sweep_grace).unwrap_or(i64::MAX),
            ),
        })
    }

    /// Where the certificate of the HTTPS endpoints comes from, if any is served; a
    /// self-signed one also puts `webhook_path_token` into the webhook configuration's paths.
    fn certificates(
        &self,
        webhook_path_token: Option<String>,
    ) -> Result<Option<Certificates>, Error> {
        if self.webhook_listen.is_none() && self.data_api_listen.is_none() {
            return Ok(None);
        }
        if let Some(dir) = &self.serving_cert_dir {
            return Ok(Some(Certificates::Files(dir.clone())));
        }
        let missing = |what: &str| {
            Error::new(
                ErrorCode::InvalidConfig,
                format!(
                    "--webhook-listen and --data-api-listen need either --serving-cert-dir \
                     (cert-manager) or a self-signed certificate, for which {what}"
                ),
            )
        };
        let service = self
            .serving_service
            .clone()
            .ok_or_else(|| missing("--serving-service names the Service"))?;
        let mut trusted_by = Vec::new();
        if self.webhook_listen.is_some() {
            let configuration = self.webhook_configuration.clone().ok_or_else(|| {
                missing("--webhook-configuration names the ValidatingWebhookConfiguration")
            })?;
            trusted_by.push(CaBundleHolder::WebhookConfiguration(configuration));
        }
        if self.data_api_listen.is_some() {
            trusted_by.push(CaBundleHolder::ApiService(self.api_service.clone()));
        }
        Ok(Some(Certificates::SelfSigned(SelfSigned {
            namespace: self.lease_namespace.clone(),
            secret: self.serving_secret.clone(),
            service,
            trusted_by,
            webhook_path_token,
        })))
    }
}

/// Runs the controller until SIGTERM or Ctrl-C.
pub async fn controller(args: ControllerArgs) -> Result<(), Error> {
    init_json_logs();
    let signing_key = std::env::var("ERRAND_SIGNING_KEY").ok();
    // Only the API server, which calls the path the controller writes into the webhook
    // configuration, learns the token: other callers get no review.
    let webhook_path_token = signing_key
        .as_deref()
        .filter(|key| key.len() >= 32)
        .map(|key| caller::path_token(key.as_bytes()));
    let certificates = args.certificates(webhook_path_token.clone())?;
    let results = Store::open(&args.store)
        .map_err(|e| Error::new(ErrorCode::InvalidConfig, format!("opening the store: {e}")))?;
    let signing = url_signing(&results, &args.blob_url, signing_key.as_deref())?;
    let kube_config = kube::Config::infer().await.map_err(|e| {
        Error::new(
            ErrorCode::ClusterUnreachable,
            format!("reading the cluster's configuration: {e}"),
        )
    })?;
    let outbound = args
        .outbound
        .policy(api_server_addresses(&kube_config.cluster_url));
    let client = kube::Client::try_from(kube_config)
        .map_err(|e| Error::new(ErrorCode::ClusterUnreachable, format!("connecting: {e}")))?;
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "errand-controller".to_owned());
    let store_sweep = args.store_sweep_schedule();
    let mut config = ControllerConfig::new(args.errand_image);
    config.errand_binary = args.errand_binary;
    config.errand_image_pull_policy = args.errand_image_pull_policy;
    config.staging_budget_seconds = args.staging_budget_seconds;
    let extract_limits = args.extract.limits();
    config.extract_limits = extract_limits;
    config.termination_grace_seconds = args.termination_grace_seconds;
    config.default_queue_name = args.default_queue_name;
    config.controller_url = args.blob_url;
    config.max_grant_lifetime_seconds = args.max_grant_lifetime_seconds;
    config.default_ttl_seconds_after_finished = args.default_ttl_seconds_after_finished;
    config.image_pull_secrets = args.agent_image_pull_secrets;
    config.service_account_name = args.agent_service_account;
    config.required_runtime_class = args.execution_runtime_class;
    config.workspace_size_limit = args.workspace_size_limit;
    config.scratch_size_limit = args.scratch_size_limit;
    config.store_sweep = store_sweep;
    config.otlp_endpoint = args.telemetry.otlp_endpoint;
    config.export_reconcile_spans = args.export_reconcile_spans;
    config.execution_egress =
        (args.execution_egress == EgressDefault::Deny).then_some(ExecutionEgress {
            errand: args.execution_egress_allow,
        });
    config.egress_proxy_url = args.egress_proxy_url;
    // Every replica shares the signing key, so each proxy takes the tokens any one minted.
    let shared_key = signing_key.as_deref().filter(|key| key.len() >= 32);
    config.model_tokens = shared_key.map(|key| RunTokens::models(key.as_bytes()));
    config.run_end_tokens = shared_key.map(|key| RunTokens::run_ended(key.as_bytes()));
    config.default_model_credentials = match args.model_credentials {
        ModelCredentialsDefault::Direct => ModelCredentials::Direct,
        ModelCredentialsDefault::Proxied => ModelCredentials::Proxied,
    };
    let model_roots = match &args.egress_proxy_model_ca {
        Some(path) => model_roots(path)?,
        None => Vec::new(),
    };
    config.agent_ingress = args.deployment_network_policies.then(|| AgentIngress {
        gateway_namespace: args.lease_namespace.clone(),
        gateway_pod_labels: args.gateway_pod_labels,
        cidrs: args.agent_ingress_cidrs,
    });
    tracing::info!(
        allowed = ?outbound.allowed().iter().map(ToString::to_string).collect::<Vec<_>>(),
        denied = ?outbound.denied().map(|(range, _)| range.to_string()).collect::<Vec<_>>(),
        "the outbound policy of tenant-directed requests"
    );
    config.outbound = Arc::new(outbound);
    tracing::info!(
        store = results.url(),
        presigned = signing.serve_blobs.is_none(),
        "signing the pods' store URLs"
    );
    let options = ServeOptions {
        config,
        namespaces: Namespaces::only(args.watch_namespace),
        results,
        signer: signing.signer,
        serve_blobs: signing.serve_blobs,
        listen: Some(args.listen),
        certificates,
        webhook: args.webhook_listen.map(|listen| WebhookOptions {
            listen,
            // The token is in the configuration's paths only when the controller keeps them
            // (a self-signed certificate); cert-manager's configuration keeps the chart's paths.
            path_token: webhook_path_token.filter(|_| args.serving_cert_dir.is_none()),
        }),
        data_api: args.data_api_listen.map(|listen| DataApiOptions {
            listen,
            // An upload is refused when staging it would pass the pods' extraction limits.
            limits: UploadLimits {
                max_bytes: args.max_upload_bytes,
                archive: extract_limits,
            },
            links: args.data_api_links,
        }),
        gateway: args.gateway_listen.map(|listen| GatewayOptions {
            listen,
            sessions: SessionLimits {
                max_turns: args.gateway_session_max_turns as usize,
                retention: (args.gateway_session_retention > 0)
                    .then(|| std::time::Duration::from_secs(args.gateway_session_retention)),
            },
        }),
        egress_proxy: args.egress_proxy_listen.map(|listen| EgressProxyOptions {
            listen,
            nameserver: args.egress_proxy_nameserver,
            model_roots,
        }),
        leader_election: args.leader_elect.then(|| {
            (
                args.lease_namespace,
                LeaseSettings {
                    create_lease: args.create_lease,
                    ..LeaseSettings::new("errand-controller", identity.clone())
                },
            )
        }),
        instance: identity,
        server_limits: args.server_limits.limits(),
        max_result_bytes: args.max_result_bytes,
    };
    run(client, options, stop_signal())
        .await
        .map_err(|e| Error::new(ErrorCode::ControllerStopped, e.to_string()))
}

/// A Secret or ServiceAccount name, checked as the API server would.
fn agent_object_name(value: &str) -> Result<String, crate::resolve::InvalidValue> {
    crate::resolve::object_name(value)?;
    Ok(value.to_owned())
}

/// A namespace name, checked as the API server would.
fn namespace_name(value: &str) -> Result<String, crate::resolve::InvalidValue> {
    crate::resolve::namespace_name(value)?;
    Ok(value.to_owned())
}

/// How the pods' store URLs are signed, and whether the controller serves them itself.
struct UrlSigning {
    signer: Arc<dyn UrlSigner>,
    serve_blobs: Option<Arc<HmacSigner>>,
}

/// Cloud stores sign their own URLs; a `file://` store's URLs are HMAC-signed with
/// `signing_key` and served by this controller at `blob_url`, so only it needs the key.
fn url_signing(
    store: &Store,
    blob_url: &str,
    signing_key: Option<&str>,
) -> Result<UrlSigning, Error> {
    if let Some(presigned) = store.presigned_signer() {
        return Ok(UrlSigning {
            signer: Arc::new(presigned),
            serve_blobs: None,
        });
    }
    let invalid = |message: &str| {
        Error::new(
            ErrorCode::InvalidConfig,
            format!("the file:// store {} needs {message}", store.url()),
        )
    };
    let signing_key = signing_key.filter(|k| k.len() >= 32).ok_or_else(|| {
        invalid("ERRAND_SIGNING_KEY of at least 32 characters (mount it from a Secret)")
    })?;
    let hmac = Arc::new(HmacSigner::new(blob_url, signing_key.as_bytes()));
    Ok(UrlSigning {
        signer: hmac.clone(),
        serve_blobs: Some(hmac),
    })
}

/// The certificates of the PEM bundle at `path`, for the model route to trust.
fn model_roots(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, Error> {
    let invalid = |why: String| {
        Error::new(
            ErrorCode::InvalidConfig,
            format!(
                "--egress-proxy-model-ca {}: {why}; give a file of PEM certificates",
                path.display()
            ),
        )
    };
    let pem = std::fs::read(path).map_err(|e| invalid(e.to_string()))?;
    let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| invalid(e.to_string()))?;
    if roots.is_empty() {
        return Err(invalid("it holds no certificate".to_owned()));
    }
    Ok(roots)
}

fn init_json_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second initialization (tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    fn parse(args: &[&str]) -> Result<ControllerArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Command {
            #[command(flatten)]
            args: ControllerArgs,
        }
        let base = [
            "controller",
            "--errand-image=e:1",
            "--store=file:///s",
            "--blob-url=http://errand:8080",
        ];
        let all = base.iter().chain(args);
        <Command as clap::Parser>::try_parse_from(all).map(|c| c.args)
    }

    #[test]
    fn the_default_lifetime_is_whole_seconds_within_bounds_and_named_when_bad() {
        assert_eq!(parse(&[]).unwrap().default_ttl_seconds_after_finished, None);
        let set = parse(&["--default-ttl-seconds-after-finished=86400"]).unwrap();
        assert_eq!(set.default_ttl_seconds_after_finished, Some(86400));
        for bad in ["-1", "1d", "99999999999"] {
            let error = parse(&[&format!("--default-ttl-seconds-after-finished={bad}")])
                .err()
                .unwrap()
                .to_string();
            assert!(
                error.contains("--default-ttl-seconds-after-finished"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn watched_namespaces_egress_rules_and_the_runtime_class_are_checked_and_named_when_bad() {
        let set = parse(&[
            "--watch-namespace=team-b,team-a",
            "--watch-namespace=team-c",
            "--execution-runtime-class=gvisor",
            "--execution-egress=deny",
            r#"--execution-egress-allow={"to":[{"ipBlock":{"cidr":"192.0.2.10/32"}}],"ports":[{"port":9000}]}"#,
        ])
        .unwrap();
        assert_eq!(set.watch_namespace, ["team-b", "team-a", "team-c"]);
        assert_eq!(set.execution_runtime_class.as_deref(), Some("gvisor"));
        assert_eq!(parse(&[]).unwrap().execution_runtime_class, None);
        assert_eq!(set.execution_egress, EgressDefault::Deny);
        assert_eq!(set.execution_egress_allow.len(), 1);
        assert_eq!(parse(&[]).unwrap().execution_egress, EgressDefault::Open);
        for (bad, flag, says) in [
            (
                "--watch-namespace=team-a,Team_B",
                "--watch-namespace",
                "Team_B",
            ),
            ("--execution-egress=closed", "--execution-egress", "closed"),
            (
                "--execution-runtime-class=G_Visor",
                "--execution-runtime-class",
                "G_Visor",
            ),
            (
                "--execution-egress-allow={not json",
                "--execution-egress-allow",
                "key must be a string",
            ),
            (
                r#"--execution-egress-allow={"ports":"all"}"#,
                "--execution-egress-allow",
                "invalid type",
            ),
            (
                "--egress-proxy-url=https://proxy:3128/x",
                "--egress-proxy-url",
                "give http://host:port",
            ),
            (
                "--egress-proxy-url=proxy:3128",
                "--egress-proxy-url",
                "is not an egress proxy URL",
            ),
        ] {
            let error = parse(&[bad]).err().unwrap().to_string();
            assert!(
                error.contains(flag) && error.contains(says),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn agent_pod_settings_are_checked_and_named_when_bad() {
        let set = parse(&[
            "--agent-image-pull-secret=platform-registry",
            "--agent-image-pull-secret=team-registry",
            "--agent-service-account=errand-agents",
            "--workspace-size-limit=20Gi",
            "--scratch-size-limit=2Gi",
        ])
        .unwrap();
        assert_eq!(
            set.agent_image_pull_secrets,
            ["platform-registry", "team-registry"]
        );
        assert_eq!(set.agent_service_account.as_deref(), Some("errand-agents"));
        assert_eq!(set.workspace_size_limit, Some(Quantity("20Gi".into())));
        for (bad, flag) in [
            (
                "--agent-image-pull-secret=Registry!",
                "--agent-image-pull-secret",
            ),
            ("--agent-service-account=a/b", "--agent-service-account"),
            ("--workspace-size-limit=20GB", "--workspace-size-limit"),
        ] {
            let error = parse(&[bad]).err().unwrap().to_string();
            assert!(error.contains(flag), "{bad}: {error}");
        }
    }

    #[test]
    fn the_periodic_store_sweep_is_off_unless_an_interval_is_set() {
        assert_eq!(parse(&[]).unwrap().store_sweep_schedule(), None);
        let set = parse(&["--store-sweep-interval=6h", "--store-sweep-grace=2d"]).unwrap();
        assert_eq!(
            set.store_sweep_schedule(),
            Some(StoreSweepSchedule {
                interval: std::time::Duration::from_secs(6 * 3600),
                grace: jiff::SignedDuration::from_hours(48),
            })
        );
        let error = parse(&["--store-sweep-interval=6y"])
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("--store-sweep-interval"), "{error}");
    }

    #[test]
    fn a_cloud_store_signs_its_own_urls_and_needs_no_blob_endpoint() {
        let store =
            Store::open_with_options("s3://bucket/prefix", &[("aws_region", "us-east-1")]).unwrap();
        let signing = url_signing(&store, "http://errand:8080", None).unwrap();
        assert!(signing.serve_blobs.is_none());
        assert_eq!(
            signing.signer.upload_mode(),
            crate::store::grants::UploadMode::Sized
        );
    }

    #[test]
    fn a_file_store_is_served_here_and_needs_the_signing_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("file://{}", dir.path().display())).unwrap();
        let signing = url_signing(&store, "http://errand:8080", Some(KEY)).unwrap();
        assert!(signing.serve_blobs.is_some());

        let short_key = url_signing(&store, "http://errand:8080", Some("short"))
            .err()
            .unwrap();
        assert!(
            short_key.message.contains("ERRAND_SIGNING_KEY"),
            "{}",
            short_key.message
        );
    }
}
