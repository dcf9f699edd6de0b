//! The deployment commands (`deploy`, `undeploy`, `redeploy`, `deployments list|get|wait`, `logs`, `invoke`, `chat`, `sessions list`), written once over [`Deployments`](crate::ops::backend::Deployments).
//!
//! A backend without deployments refuses each of them naming the command
//! ([`Backend::deployments`]); the gateway's requests go over HTTP with a bearer token
//! (`ops/gateway_client.rs`).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;

use super::objects::agent_from_config;
use crate::api::{AgentDeployment, DeploymentPhase};
use crate::cli::output::{Format, print_ok};
use crate::local::{manifest_documents, read_manifest_file};
use crate::ops::GatewayEndpoint;
use crate::ops::backend::{Backend, Document};
use crate::ops::deploy::{remove_replaced, roll_out, serving, settled};
use crate::ops::{Error, ErrorCode, lookup};

/// Where the gateway is and who calls it.
#[derive(Clone, Debug, clap::Args)]
pub struct GatewayArgs {
    /// The gateway's base URL (its Service through a port-forward or an ingress, e.g.
    /// `https://localhost:9443`).
    #[arg(long, env = "ERRAND_GATEWAY", value_name = "URL")]
    pub gateway: Option<String>,
    /// The bearer token to call it with (else the kubeconfig user's token). On the command
    /// line it is visible to every user of the machine (`ps`): prefer ERRAND_GATEWAY_TOKEN
    /// or --gateway-token-file.
    #[arg(long, env = "ERRAND_GATEWAY_TOKEN", hide_env_values = true)]
    pub gateway_token: Option<String>,
    /// A file holding the bearer token to call the gateway with (surrounding whitespace is
    /// ignored), as `kubectl create token` writes it.
    #[arg(
        long,
        env = "ERRAND_GATEWAY_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with = "gateway_token"
    )]
    pub gateway_token_file: Option<PathBuf>,
    /// A PEM file with the CA that signed the gateway's serving certificate (else the
    /// system's roots).
    #[arg(long, env = "ERRAND_GATEWAY_CA", value_name = "FILE")]
    pub gateway_ca: Option<PathBuf>,
}

impl GatewayArgs {
    /// The gateway these flags name.
    pub fn endpoint(&self) -> GatewayEndpoint {
        GatewayEndpoint {
            url: self.gateway.clone(),
            token: self.gateway_token.clone(),
            token_file: self.gateway_token_file.clone(),
            ca: self.gateway_ca.clone(),
        }
    }
}

/// `errand deploy NAME --agent AGENT`.
#[derive(Debug, clap::Args)]
pub struct DeployArgs {
    /// The deployment's name (a DNS label of at most 56 characters).
    pub name: String,
    /// The Agent to serve, by name.
    #[arg(long)]
    pub agent: String,
    /// The AgentEnvironment to merge in, by name.
    #[arg(long)]
    pub environment: Option<String>,
    /// How many pods serve it.
    #[arg(long, default_value_t = 1)]
    pub replicas: i32,
    /// The port the agent server listens on.
    #[arg(long, default_value_t = crate::api::DEFAULT_AGENT_PORT)]
    pub port: i32,
    /// The agent server's readiness path.
    #[arg(long, default_value = crate::api::DEFAULT_HEALTH_PATH)]
    pub health_path: String,
    /// Seconds a readiness probe may take.
    #[arg(long, default_value_t = crate::api::DEFAULT_PROBE_TIMEOUT_SECONDS)]
    pub probe_timeout_seconds: i32,
    /// Failed probes in a row after which a ready server is not ready any more.
    #[arg(long, default_value_t = crate::api::DEFAULT_FAILURE_THRESHOLD)]
    pub failure_threshold: i32,
    /// Seconds it may stay Starting before it is marked Failed (0: no limit).
    #[arg(long, default_value_t = crate::api::DEFAULT_STARTING_TIMEOUT_SECONDS)]
    pub starting_timeout_seconds: i64,
    /// Return once it is created instead of waiting until it is Ready or Failed.
    #[arg(long)]
    pub no_wait: bool,
}

/// `errand deployments ...`
#[derive(Debug, clap::Subcommand)]
pub enum DeploymentsAction {
    /// List the deployments of the namespace.
    List,
    /// Print one deployment.
    Get {
        /// The deployment.
        name: String,
    },
    /// Wait until a deployment is Ready (exit 0) or Failed (non-zero).
    Wait {
        /// The deployment.
        name: String,
    },
}

/// Flags of `errand undeploy`.
#[derive(Debug, clap::Args)]
pub struct UndeployArgs {
    /// The deployment.
    #[arg(required_unless_present = "agent", conflicts_with = "agent")]
    pub name: Option<String>,
    /// Remove every deployment that serves this Agent.
    #[arg(long)]
    pub agent: Option<String>,
}

impl UndeployArgs {
    /// `errand undeploy NAME` or `errand undeploy --agent AGENT`.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        undeploy(backend, self.name.as_deref(), self.agent.as_deref(), format).await
    }
}

/// Flags of `errand logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The deployment.
    pub name: String,
    /// How many of the last lines to print first.
    #[arg(long = "tail", default_value_t = 100)]
    pub lines: usize,
    /// Keep printing what the servers write until the deployment is removed (on a
    /// cluster: until its pods stop).
    #[arg(short = 'f', long)]
    pub follow: bool,
}

impl LogsArgs {
    /// `errand logs NAME [--tail N] [-f]`.
    pub async fn exec(&self, backend: &dyn Backend) -> Result<(), Error> {
        let deployments = backend.deployments();
        match deployments.logs(&self.name, self.lines, self.follow).await {
            Err(error) => {
                let namespace = backend.namespace();
                Err(lookup::missing_deployment(deployments, namespace, &self.name, error).await)
            }
            done => done,
        }
    }
}

/// Flags of `errand invoke`.
#[derive(Debug, clap::Args)]
pub struct InvokeArgs {
    #[command(flatten)]
    pub target: GatewayTarget,
    /// The input.
    #[arg(long)]
    pub input: String,
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

impl InvokeArgs {
    /// `errand invoke`.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let done = invoke(backend, &self.target, &self.input, &self.gateway, format).await;
        self.target.listing_deployments(backend, done).await
    }
}

/// Flags of `errand chat`.
#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub target: GatewayTarget,
    /// The session's name.
    #[arg(long)]
    pub session_name: String,
    /// The message.
    #[arg(long)]
    pub message: String,
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

impl ChatArgs {
    /// `errand chat`.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let done = chat(
            backend,
            &self.target,
            &self.session_name,
            &self.message,
            &self.gateway,
            format,
        )
        .await;
        self.target.listing_deployments(backend, done).await
    }
}

/// `errand sessions ...`
#[derive(Debug, clap::Subcommand)]
pub enum SessionsAction {
    /// List a deployment's sessions (name, turns, last update).
    List {
        #[command(flatten)]
        target: GatewayTarget,
        #[command(flatten)]
        gateway: GatewayArgs,
    },
}

impl SessionsAction {
    /// Runs the subcommand.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        match self {
            SessionsAction::List { target, gateway } => {
                let done = sessions(backend, target, gateway, format).await;
                target.listing_deployments(backend, done).await
            }
        }
    }
}

/// Which deployment a gateway command talks to.
#[derive(Debug, clap::Args)]
pub struct GatewayTarget {
    /// The deployment, by name.
    #[arg(required_unless_present = "agent", conflicts_with = "agent")]
    pub deployment: Option<String>,
    /// The agent, through its active (Ready) deployment.
    #[arg(long)]
    pub agent: Option<String>,
}

impl GatewayTarget {
    /// `done`, but a deployment named and not found lists the deployments there are.
    async fn listing_deployments(
        &self,
        backend: &dyn Backend,
        done: Result<(), Error>,
    ) -> Result<(), Error> {
        match (done, &self.deployment) {
            (Err(error), Some(name)) => {
                let (deployments, namespace) = (backend.deployments(), backend.namespace());
                Err(lookup::missing_deployment(deployments, namespace, name, error).await)
            }
            (done, _) => done,
        }
    }

    /// The gateway path prefix of the target in `namespace`.
    fn path(&self, namespace: &str) -> String {
        match (&self.deployment, &self.agent) {
            (Some(deployment), _) => format!("/v1/namespaces/{namespace}/deployments/{deployment}"),
            (None, Some(agent)) => format!("/v1/namespaces/{namespace}/agents/{agent}"),
            (None, None) => unreachable!("clap requires one"),
        }
    }
}

/// A deployment as the commands show it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DeploymentView {
    /// Its name.
    pub name: String,
    /// The Agent it serves.
    pub agent: Option<String>,
    /// `Starting`, `Ready`, `Failed` or `Terminating`; none before the controller saw it.
    pub phase: Option<DeploymentPhase>,
    /// Pods that pass their readiness probe.
    pub ready_replicas: i32,
    /// Pods asked for.
    pub replicas: i32,
    /// The Service's in-cluster address.
    pub address: Option<String>,
    /// The snapshot's digest.
    pub snapshot_digest: Option<String>,
    /// A short human message.
    pub message: Option<String>,
}

impl DeploymentView {
    fn of(deployment: &AgentDeployment) -> Self {
        let status = deployment.status.clone().unwrap_or_default();
        Self {
            name: deployment.metadata.name.clone().unwrap_or_default(),
            agent: status
                .agent
                .or_else(|| deployment.spec.agent_ref.as_ref().map(|r| r.name.clone())),
            phase: status.phase,
            ready_replicas: status.ready_replicas,
            replicas: deployment.spec.replicas,
            address: status.address,
            snapshot_digest: status.snapshot.map(|s| s.digest),
            message: status.message,
        }
    }

    fn human(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}/{}\t{}",
            self.name,
            self.agent.as_deref().unwrap_or("-"),
            self.phase.map_or("-", DeploymentPhase::as_str),
            self.ready_replicas,
            self.replicas,
            self.message.as_deref().unwrap_or(""),
        )
    }
}

/// `undeploy`: the deployments removed.
#[derive(Serialize, JsonSchema)]
pub struct Undeployed {
    /// Their names.
    pub deployments: Vec<String>,
}

/// `redeploy`: what the deployment serves now.
#[derive(Serialize, JsonSchema)]
pub struct Redeployed {
    /// The deployment, Ready on the new Agent.
    pub deployment: DeploymentView,
    /// The Agent it serves now.
    pub agent: String,
    /// The Agent it served before, removed once nothing referenced it.
    pub replaced: Option<String>,
    /// Whether the replaced Agent was removed (false while another deployment uses it).
    pub replaced_removed: bool,
}

impl DeployArgs {
    /// `errand deploy`: creates the deployment and, unless `--no-wait`, waits until it is Ready
    /// (exit 0) or Failed (non-zero, with its message).
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let args = self;
        let deployments = backend.deployments();
        let mut spec = json!({
            "agentRef": {"name": args.agent},
            "replicas": args.replicas,
            "port": args.port,
            "startingTimeoutSeconds": args.starting_timeout_seconds,
            "readiness": {
                "path": args.health_path,
                "timeoutSeconds": args.probe_timeout_seconds,
                "failureThreshold": args.failure_threshold,
            },
        });
        if let Some(environment) = &args.environment {
            spec["environmentRef"] = json!({"name": environment});
        }
        let deployment: AgentDeployment = serde_json::from_value(json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "AgentDeployment",
            "metadata": {"name": args.name, "namespace": backend.namespace()},
            "spec": spec,
        }))
        .map_err(|e| Error::argument(format!("the deployment: {e}")))?;
        let created = deployments.create_deployment(&deployment).await?;
        let shown = if args.no_wait {
            created
        } else {
            settled(deployments, &args.name).await?
        };
        print_deployment(format, &shown)
    }
}

impl DeploymentsAction {
    /// `errand deployments list|get|wait`.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let action = self;
        let deployments = backend.deployments();
        match action {
            DeploymentsAction::List => {
                let views: Vec<DeploymentView> = deployments
                    .deployments()
                    .await?
                    .iter()
                    .map(DeploymentView::of)
                    .collect();
                print_ok(format, "deployments", &views, || {
                    views
                        .iter()
                        .map(DeploymentView::human)
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                Ok(())
            }
            DeploymentsAction::Get { name } => {
                let found = lookup::deployment(deployments, backend.namespace(), name).await?;
                let view = DeploymentView::of(&found);
                print_ok(format, "deployment", &view, || view.human());
                Ok(())
            }
            DeploymentsAction::Wait { name } => {
                lookup::deployment(deployments, backend.namespace(), name).await?;
                print_deployment(format, &settled(deployments, name).await?)
            }
        }
    }
}

/// Prints a deployment that settled; a Failed one is an error carrying it.
fn print_deployment(format: Format, deployment: &AgentDeployment) -> Result<(), Error> {
    let view = DeploymentView::of(deployment);
    if view.phase == Some(DeploymentPhase::Failed) {
        return Err(failed(&view));
    }
    print_ok(format, "deployment", &view, || view.human());
    Ok(())
}

fn failed(view: &DeploymentView) -> Error {
    Error {
        code: ErrorCode::DeploymentFailed,
        message: format!(
            "AgentDeployment {:?} is Failed: {}",
            view.name,
            view.message.as_deref().unwrap_or("no message")
        ),
        details: serde_json::to_value(view).ok().map(|v| ("deployment", v)),
    }
}

/// `errand undeploy NAME` or `errand undeploy --agent AGENT` (every deployment serving it):
/// removes each with its children and waits until they are gone.
async fn undeploy(
    backend: &dyn Backend,
    name: Option<&str>,
    agent: Option<&str>,
    format: Format,
) -> Result<(), Error> {
    let deployments = backend.deployments();
    let names = match (name, agent) {
        (Some(name), _) => vec![name.to_owned()],
        (None, Some(agent)) => {
            let all = deployments.deployments().await?;
            let names = serving(&all, agent);
            if names.is_empty() {
                let served: Vec<String> = all
                    .iter()
                    .map(|d| {
                        let view = DeploymentView::of(d);
                        format!(
                            "{} (Agent {})",
                            view.name,
                            view.agent.as_deref().unwrap_or("-")
                        )
                    })
                    .collect();
                let wanted = lookup::Wanted::new(
                    "Agent",
                    "AgentDeployments",
                    format!("namespace {:?}", backend.namespace()),
                    "serve an Agent with `errand deploy NAME --agent AGENT`",
                );
                return Err(Error::new(
                    ErrorCode::NotFound,
                    format!(
                        "no AgentDeployment serves Agent {agent:?} in namespace {:?}; {}",
                        backend.namespace(),
                        wanted.what_exists(&served)
                    ),
                ));
            }
            names
        }
        (None, None) => return Err(Error::argument("name a deployment, or --agent")),
    };
    for name in &names {
        if let Err(error) = deployments.delete_deployment(name).await {
            let namespace = backend.namespace();
            return Err(lookup::missing_deployment(deployments, namespace, name, error).await);
        }
    }
    let answer = Undeployed { deployments: names };
    print_ok(format, "undeployed", &answer, || {
        answer
            .deployments
            .iter()
            .map(|n| format!("agentdeployment/{n} deleted"))
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

/// `errand redeploy NAME --agent-config FILE`.
#[derive(Debug, clap::Args)]
pub struct RedeployArgs {
    /// The deployment.
    pub name: String,
    /// The new agent as a bare agent config file (as `agents create` takes it).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "filename",
        conflicts_with = "filename"
    )]
    pub agent_config: Option<PathBuf>,
    /// The new agent as an Agent manifest file (one document; its runtime and config are
    /// used, its name is not). Either way the new Agent is `<deployment>-<digest prefix>`.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filename: Option<PathBuf>,
}

impl RedeployArgs {
    /// `errand redeploy`: the new Agent is created and checked against the deployment first (an
    /// admission dry run), so an invalid one changes nothing and is removed again; then the
    /// deployment is pointed at it, rolls, and once Ready the Agent it replaced is removed when no
    /// deployment references it any more. Run again after an interruption, it finishes the job.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let args = self;
        let deployments = backend.deployments();
        let deployment = lookup::deployment(deployments, backend.namespace(), &args.name).await?;
        let (agent, replaced) =
            roll_out(backend, &args.name, &deployment, new_agent(args)?).await?;
        let rolled = settled(deployments, &args.name).await?;
        let view = DeploymentView::of(&rolled);
        if view.phase == Some(DeploymentPhase::Failed) {
            return Err(failed(&view));
        }
        let replaced_removed =
            remove_replaced(backend, &args.name, &agent, replaced.as_deref()).await?;
        let answer = Redeployed {
            deployment: view,
            agent,
            replaced,
            replaced_removed,
        };
        print_ok(format, "redeployed", &answer, || {
            let mut text = format!(
                "agentdeployment/{} serves agent/{}",
                args.name, answer.agent
            );
            if let Some(old) = &answer.replaced {
                let what = if answer.replaced_removed {
                    "removed"
                } else {
                    "kept: another deployment uses it"
                };
                text.push_str(&format!("\nagent/{old} {what}"));
            }
            text
        });
        Ok(())
    }
}

/// The new Agent's document as `--agent-config` or `-f` give it (named later).
fn new_agent(args: &RedeployArgs) -> Result<Document, Error> {
    let Some(file) = &args.filename else {
        let config = args.agent_config.as_deref().expect("clap requires one");
        return agent_from_config("new", config);
    };
    let text = read_manifest_file(file).map_err(|e| Error::manifest_file("-f", e))?;
    let source = format!("-f {}", file.display());
    let documents = manifest_documents(&text, &source)?;
    match documents.as_slice() {
        [agent] if agent["kind"] == "Agent" => Ok(Document {
            source,
            object: json!({
                "apiVersion": agent["apiVersion"], "kind": "Agent",
                "metadata": {"name": "new"}, "spec": agent["spec"],
            }),
        }),
        _ => Err(Error::new(
            ErrorCode::InvalidManifest,
            format!("{source}: redeploy takes exactly one document, an Agent"),
        )),
    }
}

/// `errand invoke DEPLOYMENT|--agent AGENT --input TEXT`.
async fn invoke(
    backend: &dyn Backend,
    target: &GatewayTarget,
    input: &str,
    gateway: &GatewayArgs,
    format: Format,
) -> Result<(), Error> {
    let client = backend.deployments().gateway(&gateway.endpoint()).await?;
    let path = format!("{}/invoke", target.path(backend.namespace()));
    let answer = client.post(&path, &json!({"input": input})).await?;
    print_ok(format, "invoke", &answer, || {
        answer["output"]
            .as_str()
            .map_or_else(|| answer.to_string(), str::to_owned)
    });
    Ok(())
}

/// `errand chat DEPLOYMENT|--agent AGENT --session-name S --message TEXT`: one turn.
async fn chat(
    backend: &dyn Backend,
    target: &GatewayTarget,
    session: &str,
    message: &str,
    gateway: &GatewayArgs,
    format: Format,
) -> Result<(), Error> {
    let client = backend.deployments().gateway(&gateway.endpoint()).await?;
    let path = format!("{}/chat", target.path(backend.namespace()));
    let body = json!({"session": session, "message": message});
    let answer = client.post(&path, &body).await?;
    print_ok(format, "chat", &answer, || {
        answer["message"]["content"]
            .as_str()
            .map_or_else(|| answer.to_string(), str::to_owned)
    });
    Ok(())
}

/// `errand sessions list DEPLOYMENT|--agent AGENT`.
async fn sessions(
    backend: &dyn Backend,
    target: &GatewayTarget,
    gateway: &GatewayArgs,
    format: Format,
) -> Result<(), Error> {
    let client = backend.deployments().gateway(&gateway.endpoint()).await?;
    let path = format!("{}/sessions", target.path(backend.namespace()));
    let answer = client.get(&path).await?;
    print_ok(format, "sessions", &answer, || {
        answer["sessions"].as_array().map_or_else(
            || answer.to_string(),
            |sessions| {
                sessions
                    .iter()
                    .map(|s| format!("{}\t{}", s["name"].as_str().unwrap_or("-"), s["turns"]))
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        )
    });
    Ok(())
}
