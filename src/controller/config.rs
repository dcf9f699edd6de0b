//! Settings of the controller that shape every execution's pod and lifetime: the errand image, budgets and defaults.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::ModelCredentials;
use crate::archive::ExtractLimits;
use crate::outbound::OutboundPolicy;
use crate::resolve::run_tokens::RunTokens;
use crate::resolve::{RunAllowance, RunLimits, Snapshot};
use crate::runner::DEFAULT_STAGING_BUDGET;
use crate::store::grants::UrlSigner;
use crate::telemetry::TelemetryTarget;

/// The field manager of every server-side apply the controller makes.
pub const FIELD_MANAGER: &str = "errand-controller";

/// The finalizer on an execution's snapshot ConfigMap that keeps it until the execution's
/// results are deleted from the store.
pub const RESULTS_FINALIZER: &str = "errand.dev/results";

/// User id the pod runs as when the Agent does not choose one: non-root, as the `restricted`
/// Pod Security Standard requires, and the conventional "nonroot" user of distroless images.
pub const DEFAULT_RUN_AS_USER: i64 = 65532;

/// The controller's URL as pods reach it when the chart is installed as release `errand` in
/// `errand-system` (its Service); `errand controller --blob-url` sets the real one.
pub const DEFAULT_CONTROLLER_URL: &str = "http://errand.errand-system.svc:8080";

/// Settings that every Job the controller builds depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerConfig {
    /// The errand image: its static binary is copied into each pod by the `errand-stage` init
    /// container.
    pub errand_image: String,
    /// Path of the errand binary inside [`ControllerConfig::errand_image`].
    pub errand_binary: String,
    /// Pull policy of the errand image (`None` leaves the cluster default).
    pub errand_image_pull_policy: Option<String>,
    /// Seconds added to an execution's start and run timeouts for staging and uploading
    /// results; the Job's `activeDeadlineSeconds` is only a backstop behind the runner's own
    /// deadline.
    pub staging_budget_seconds: i64,
    /// What staging may extract in each pod (`errand stage --max-extract-*`).
    pub extract_limits: ExtractLimits,
    /// Seconds a pod gets between SIGTERM and SIGKILL, long enough for the runner to stop the
    /// agent and upload partial results when an execution is cancelled.
    pub termination_grace_seconds: i64,
    /// Kueue LocalQueue for executions that name none (`None`: such executions bypass Kueue).
    pub default_queue_name: Option<String>,
    /// Base URL of the controller's HTTP endpoint as pods reach it: `errand stage` asks it for
    /// the execution's grants (`/grants`).
    pub controller_url: String,
    /// The longest grants may last, in seconds (`None`: as long as the run's budget needs,
    /// within what the store's signatures allow). A run whose budget needs longer is refused.
    pub max_grant_lifetime_seconds: Option<i64>,
    /// Seconds a finished execution is kept when neither it nor its namespace sets a lifetime
    /// (`None`: kept until deleted).
    pub default_ttl_seconds_after_finished: Option<i64>,
    /// Image pull Secrets every execution's pod gets, before its environment's own.
    pub image_pull_secrets: Vec<String>,
    /// ServiceAccount of the pods whose environment names none (`None`: the namespace's
    /// `default`). No pod ever mounts its token.
    pub service_account_name: Option<String>,
    /// The RuntimeClass every agent pod runs under; resolution refuses a run that names another
    /// (`None`: each run's own).
    pub required_runtime_class: Option<String>,
    /// `sizeLimit` of the workspace `emptyDir` (the staged and working directory).
    pub workspace_size_limit: Option<Quantity>,
    /// `sizeLimit` of the scratch `emptyDir` (input, response, logs, artifacts, spooled uploads).
    pub scratch_size_limit: Option<Quantity>,
    /// The leader's periodic store sweep (`None`: no periodic sweep).
    pub store_sweep: Option<StoreSweepSchedule>,
    /// The operator's OpenTelemetry collector: executions with `autoTelemetry: true` send
    /// their traces there (`None`: such executions are refused).
    pub otlp_endpoint: Option<TelemetryTarget>,
    /// Export a span of each reconcile into the execution's trace, to
    /// [`ControllerConfig::otlp_endpoint`] (off by default).
    pub export_reconcile_spans: bool,
    /// Which addresses requests made on a tenant's behalf (notify webhooks) may reach.
    pub outbound: Arc<OutboundPolicy>,
    /// Who may reach an AgentDeployment's pods (`None`: no NetworkPolicy is created, the pods
    /// take traffic from anywhere the cluster's own policies allow).
    pub agent_ingress: Option<AgentIngress>,
    /// Deny every execution's pod all egress but DNS, errand's own endpoints and its
    /// environment's ranges, with a NetworkPolicy per execution (`None`: no policy, the pods
    /// reach whatever the cluster's own policies allow).
    pub execution_egress: Option<ExecutionEgress>,
    /// Where agent pods reach errand's egress proxy (`http://host:port`), which serves the
    /// host names of their environment's `egress.hosts` when egress is denied by default
    /// (`None`: no proxy; host rules are refused).
    pub egress_proxy_url: Option<url::Url>,
    /// The placeholder tokens of runs whose model credentials are proxied, made with the
    /// signing key every replica shares (`None`: no signing key; `Proxied` is refused).
    pub model_tokens: Option<RunTokens>,
    /// The run-ended reports' tokens and seals, made with the same key (`None`: no signing
    /// key; runs end when their pods are seen finished).
    pub run_end_tokens: Option<RunTokens>,
    /// How runs hold their models' keys when their environment does not say.
    pub default_model_credentials: ModelCredentials,
}

/// What every execution's pod may reach when egress is denied by default, besides DNS (the
/// cluster's `kube-dns` pods) and its environment's ranges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecutionEgress {
    /// errand's own endpoints as the operator names them (the chart: the controller's pods,
    /// the store's endpoint), as NetworkPolicy egress rules. The controller's URL, when its
    /// host is an address, is added on its own.
    pub errand: Vec<k8s_openapi::api::networking::v1::NetworkPolicyEgressRule>,
}

/// The sources an AgentDeployment's NetworkPolicy admits to its agent server's port: the
/// gateway (the controller's own pods) and optional address ranges. Traffic from a pod's own
/// node (the kubelet's probes) passes every NetworkPolicy implementation without a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentIngress {
    /// The namespace the controller's pods (the gateway) run in.
    pub gateway_namespace: String,
    /// Labels that select the controller's pods in that namespace.
    pub gateway_pod_labels: BTreeMap<String, String>,
    /// Extra CIDRs admitted (for example the nodes' addresses, on a CNI that polices
    /// traffic from the node, or a mesh's ingress).
    pub cidrs: Vec<String>,
}

impl AgentIngress {
    /// The controller's pods as the chart labels them when installed as release `errand` in
    /// `errand-system`.
    pub fn chart_default() -> Self {
        Self {
            gateway_namespace: "errand-system".to_owned(),
            gateway_pod_labels: [
                ("app.kubernetes.io/name", "errand"),
                ("app.kubernetes.io/instance", "errand"),
                ("app.kubernetes.io/component", "controller"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            cidrs: Vec::new(),
        }
    }
}

/// Reads `key=value[,key=value...]` labels, as `--gateway-pod-labels` takes them.
pub fn parse_labels(value: &str) -> Result<BTreeMap<String, String>, InvalidSetting> {
    value
        .split(',')
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => {
                Ok((key.trim().to_owned(), value.trim().to_owned()))
            }
            _ => Err(InvalidSetting::Label {
                pair: pair.to_owned(),
            }),
        })
        .collect()
}

/// Why a controller setting given as text (a flag, its variable) is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSetting {
    /// A label that is not `key=value`.
    #[error("{pair:?} is not a label: write key=value, several separated by commas")]
    Label {
        /// The text between commas.
        pair: String,
    },
    /// A volume size that is not a whole number with a Kubernetes suffix.
    #[error(
        "{value:?} is not a size: a whole number with an optional suffix Ki, Mi, Gi, Ti, Pi, \
         Ei, k, M, G, T, P or E (as in 20Gi)"
    )]
    Size {
        /// The text given.
        value: String,
    },
}

/// How often the leader sweeps the store, and how old an unreferenced object must be to go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreSweepSchedule {
    /// Time between sweeps (the first comes one interval after the controller starts leading).
    pub interval: std::time::Duration,
    /// Anything written more recently than this stays, referenced or not.
    pub grace: jiff::SignedDuration,
}

impl ControllerConfig {
    /// Settings with the default budgets for the given errand image.
    pub fn new(errand_image: impl Into<String>) -> Self {
        Self {
            errand_image: errand_image.into(),
            errand_binary: "/usr/local/bin/errand".to_owned(),
            errand_image_pull_policy: None,
            staging_budget_seconds: DEFAULT_STAGING_BUDGET.as_secs() as i64,
            extract_limits: ExtractLimits::DEFAULT,
            termination_grace_seconds: 120,
            default_queue_name: None,
            controller_url: DEFAULT_CONTROLLER_URL.to_owned(),
            max_grant_lifetime_seconds: None,
            default_ttl_seconds_after_finished: None,
            image_pull_secrets: Vec::new(),
            service_account_name: None,
            required_runtime_class: None,
            workspace_size_limit: None,
            scratch_size_limit: None,
            store_sweep: None,
            otlp_endpoint: None,
            export_reconcile_spans: false,
            outbound: Arc::new(OutboundPolicy::default()),
            agent_ingress: Some(AgentIngress::chart_default()),
            execution_egress: None,
            egress_proxy_url: None,
            model_tokens: None,
            run_end_tokens: None,
            default_model_credentials: ModelCredentials::Direct,
        }
    }

    /// What the controller adds to every run's timeouts.
    pub fn allowance(&self) -> RunAllowance {
        RunAllowance {
            staging_seconds: self.staging_budget_seconds,
            grace_seconds: self.termination_grace_seconds,
        }
    }

    /// The limits every run is checked against, by the webhook and before anything is created:
    /// this allowance, and how long its grants may last: the shorter of what `signer`'s URLs
    /// can last and [`ControllerConfig::max_grant_lifetime_seconds`].
    pub fn run_limits(&self, signer: &dyn UrlSigner) -> RunLimits {
        let max = match (
            signer.max_lifetime_seconds(),
            self.max_grant_lifetime_seconds,
        ) {
            (Some(store), Some(configured)) => Some(store.min(configured)),
            (store, configured) => store.or(configured),
        };
        RunLimits {
            allowance: self.allowance(),
            max_url_lifetime_seconds: max,
            telemetry_configured: self.otlp_endpoint.is_some(),
            outbound: Arc::clone(&self.outbound),
            egress_proxy: self.execution_egress.is_some() && self.egress_proxy_url.is_some(),
            model_proxy: self.model_proxy().is_some(),
        }
    }

    /// The egress proxy that carries runs' model calls, and the tokens it checks: both are
    /// needed.
    pub fn model_proxy(&self) -> Option<(&url::Url, &RunTokens)> {
        Some((self.egress_proxy_url.as_ref()?, self.model_tokens.as_ref()?))
    }

    /// Puts an execution that names no queue into the default queue, in its snapshot, so the
    /// snapshot stays the single record of how the execution runs.
    pub fn apply_default_queue(&self, snapshot: &mut Snapshot) {
        if snapshot.queue_name.is_none() {
            snapshot.queue_name.clone_from(&self.default_queue_name);
        }
    }
}

/// Reads a volume size as Kubernetes writes it: a whole number with an optional binary
/// (`Ki` .. `Ei`) or decimal (`k`, `M` .. `E`) suffix, as in `20Gi`.
pub fn parse_size_limit(value: &str) -> Result<Quantity, InvalidSetting> {
    const SUFFIXES: [&str; 13] = [
        "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
    ];
    let digits = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, suffix) = value.split_at(digits);
    if number.is_empty() || number.len() > 18 || !SUFFIXES.contains(&suffix) {
        return Err(InvalidSetting::Size {
            value: value.to_owned(),
        });
    }
    Ok(Quantity(value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(queue: Option<&str>) -> Snapshot {
        Snapshot {
            queue_name: queue.map(str::to_owned),
            ..Snapshot::test()
        }
    }

    #[test]
    fn labels_are_key_value_pairs_separated_by_commas() {
        assert_eq!(
            parse_labels("a=1, b.io/c=two").unwrap(),
            BTreeMap::from([("a".into(), "1".into()), ("b.io/c".into(), "two".into())])
        );
        for bad in ["", "a", "=1", "a=1,,b=2"] {
            assert!(
                parse_labels(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("not a label"),
                "{bad}"
            );
        }
    }

    #[test]
    fn volume_sizes_are_kubernetes_quantities() {
        for good in ["20Gi", "500Mi", "1000000", "10G", "3k"] {
            assert_eq!(parse_size_limit(good), Ok(Quantity(good.to_owned())));
        }
        for bad in ["", "Gi", "20GB", "1.5Gi", "-1Gi", "20 Gi"] {
            assert!(
                parse_size_limit(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("not a size"),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_default_queue_applies_only_to_executions_that_name_none() {
        let mut config = ControllerConfig::new("errand.local/errand:dev");
        let mut unqueued = snapshot(None);
        config.apply_default_queue(&mut unqueued);
        assert_eq!(unqueued.queue_name, None, "no default configured");

        config.default_queue_name = Some("team-default".into());
        config.apply_default_queue(&mut unqueued);
        assert_eq!(unqueued.queue_name.as_deref(), Some("team-default"));

        let mut queued = snapshot(Some("gpu-queue"));
        config.apply_default_queue(&mut queued);
        assert_eq!(queued.queue_name.as_deref(), Some("gpu-queue"));
    }

    #[test]
    fn the_grant_lifetime_is_the_shorter_of_the_stores_and_the_configured_one() {
        use crate::store::grants::HmacSigner;
        let unlimited = HmacSigner::new("http://errand:8080", b"key");
        let mut config = ControllerConfig::new("errand.local/errand:dev");
        assert_eq!(config.run_limits(&unlimited).max_url_lifetime_seconds, None);
        config.max_grant_lifetime_seconds = Some(90);
        assert_eq!(
            config.run_limits(&unlimited).max_url_lifetime_seconds,
            Some(90)
        );
        let presigned =
            crate::store::Store::open_with_options("s3://bucket", &[("aws_region", "us-east-1")])
                .unwrap()
                .presigned_signer()
                .unwrap();
        assert_eq!(
            config.run_limits(&presigned).max_url_lifetime_seconds,
            Some(90)
        );
        config.max_grant_lifetime_seconds = None;
        assert_eq!(
            config.run_limits(&presigned).max_url_lifetime_seconds,
            Some(7 * 24 * 3600)
        );
    }
}
