//! The commands against a cluster: AgentExecutions through the API server, logs from the agent's pod, results from the operator's store.

use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::context::{Target, store_error};
use super::execute::{ExecuteArgs, spec_from_args};
use super::output::{CliError, Format, OutputArgs, print_ok};
use super::show::{
    download, parse_result_name, print_executions, print_record, print_results, record_outcome,
};
use crate::api::contract::{AGENT_CONTAINER, ConditionType, EXECUTION_UID_LABEL, Reason};
use crate::api::{AgentExecution, Phase, SnapshotRef};
use crate::local::{ExecutionRecord, generate_name};
use crate::retention::sweep::References;
use crate::store::Store;
use crate::store::keys::ExecutionId;

/// How often waiting commands look at an execution again.
const POLL: Duration = Duration::from_millis(500);

/// A connection to the cluster of the current kube context.
pub struct Cluster {
    client: Client,
    namespace: String,
    store_url: Option<String>,
}

impl Cluster {
    /// Connects with the current kube context (or the in-cluster config).
    pub async fn connect(target: &Target) -> Result<Self, CliError> {
        let config = kube::Config::infer().await.map_err(|e| {
            CliError::new(
                "cluster_unreachable",
                format!("no Kubernetes configuration: {e}; use --local to run on this machine"),
            )
        })?;
        let namespace = target
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config)
            .map_err(|e| CliError::new("cluster_unreachable", e.to_string()))?;
        Ok(Self {
            client,
            namespace,
            store_url: target.store.clone(),
        })
    }

    fn executions(&self) -> Api<AgentExecution> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The execution named `name`, or the only one whose name starts with it.
    async fn find(&self, name: &str) -> Result<AgentExecution, CliError> {
        let api = self.executions();
        if let Some(found) = api.get_opt(name).await.map_err(api_error)? {
            return Ok(found);
        }
        let mut matches: Vec<AgentExecution> = api
            .list(&ListParams::default())
            .await
            .map_err(api_error)?
            .items
            .into_iter()
            .filter(|e| {
                e.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(name))
            })
            .collect();
        match matches.len() {
            0 => Err(CliError::new(
                "not_found",
                format!(
                    "no execution named {name:?} (or starting with it) in namespace {:?}",
                    self.namespace
                ),
            )),
            1 => Ok(matches.remove(0)),
            _ => {
                let names: Vec<String> = matches
                    .iter()
                    .filter_map(|e| e.metadata.name.clone())
                    .collect();
                Err(CliError::new(
                    "ambiguous_name",
                    format!(
                        "{name:?} is ambiguous in namespace {:?}: it matches {}",
                        self.namespace,
                        names.join(", ")
                    ),
                ))
            }
        }
    }

    /// Waits until the execution reaches a terminal phase.
    async fn wait(&self, name: &str) -> Result<AgentExecution, CliError> {
        loop {
            let execution = self.executions().get(name).await.map_err(api_error)?;
            if phase(&execution).is_some_and(Phase::is_terminal) {
                return Ok(execution);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn store(&self) -> Result<Store, CliError> {
        let url = self.store_url.as_deref().ok_or_else(|| {
            CliError::argument("reading results of a cluster execution needs --store (or ERRAND_STORE): the store URL the operator configured")
        })?;
        Store::open(url).map_err(store_error)
    }

    /// The agent pod of the execution with this uid, if one exists.
    async fn pod(&self, uid: &str) -> Result<Option<Pod>, CliError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = format!("{EXECUTION_UID_LABEL}={uid}");
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_error)?;
        Ok(list.items.into_iter().next())
    }
}

/// The operator's store and what the cluster still references in it, for the store sweep.
pub async fn store_references(target: &Target) -> Result<(Store, References), CliError> {
    let cluster = Cluster::connect(target).await?;
    let store = cluster.store()?;
    let references =
        crate::cluster::references::references(&cluster.client, target.namespace.as_deref())
            .await
            .map_err(|e| CliError::new("cluster_error", e.to_string()))?;
    Ok((store, references))
}

/// An API error as a CLI error; a refused create names the field as the API server did.
fn api_error(error: kube::Error) -> CliError {
    match &error {
        kube::Error::Api(status) if status.code == 404 => {
            CliError::new("not_found", status.message.clone())
        }
        kube::Error::Api(status) if status.code == 409 => {
            CliError::new("already_exists", status.message.clone())
        }
        kube::Error::Api(status) if [400, 403, 422].contains(&status.code) => {
            CliError::new("invalid_spec", status.message.clone())
        }
        _ => CliError::new("cluster_error", error.to_string()),
    }
}

fn phase(execution: &AgentExecution) -> Option<Phase> {
    execution.status.as_ref().and_then(|s| s.phase)
}

/// The execution in the same shape as a local record, so both backends answer alike.
pub fn to_record(execution: &AgentExecution, store: Option<&str>) -> ExecutionRecord {
    let status = execution.status.clone().unwrap_or_default();
    let failed = status
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Failed.as_str() && c.status == "True");
    ExecutionRecord {
        schema_version: crate::local::RECORD_SCHEMA_VERSION,
        name: execution.metadata.name.clone().unwrap_or_default(),
        namespace: execution.metadata.namespace.clone().unwrap_or_default(),
        uid: execution.metadata.uid.clone().unwrap_or_default(),
        agent: status.agent.clone().unwrap_or_default(),
        phase: status.phase.unwrap_or(Phase::Pending),
        reason: failed.map(|c| c.reason.clone()).or_else(|| {
            (status.phase == Some(Phase::Cancelled)).then(|| Reason::Cancelled.as_str().into())
        }),
        message: status.message.clone(),
        response: None,
        exit_code: status.exit_code,
        timed_out: failed.is_some_and(|c| c.reason == Reason::DeadlineExceeded.as_str()),
        created_at: execution
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(jiff::Timestamp::now, |t| t.0),
        started_at: status.start_time.as_ref().map(|t| t.0),
        completed_at: status.completion_time.as_ref().map(|t| t.0),
        results: status.results.clone(),
        snapshot_digest: status
            .snapshot
            .map(|SnapshotRef { digest, .. }| digest)
            .unwrap_or_default(),
        image_id: status.image_id,
        rerun_of: execution.spec.rerun_of.as_ref().map(|r| r.name.clone()),
        store: store.unwrap_or_default().to_owned(),
        cancel_requested: execution.spec.cancel,
        inherit_env: false,
        supervisor: None,
        extension: None,
    }
}

/// `errand execute` against the cluster: creates the AgentExecution and (unless `--no-wait`)
/// waits for it to end.
pub async fn execute(target: &Target, args: &ExecuteArgs) -> Result<(), CliError> {
    if args.inherit_env {
        return Err(CliError::argument(
            "--inherit-env applies to local runs only; a pod gets its environment from the cluster",
        ));
    }
    let cluster = Cluster::connect(target).await?;
    let request = spec_from_args(args, None, &cluster.namespace).await?;
    let (spec, spec_name) = (request.spec, request.name);
    let agent = spec
        .agent_ref
        .as_ref()
        .map(|r| r.name.clone())
        .or_else(|| {
            spec.agent
                .as_ref()
                .and_then(|a| a.config.name().map(str::to_owned))
        })
        .or_else(|| spec.rerun_of.as_ref().map(|r| format!("{}-rerun", r.name)))
        .unwrap_or_else(|| "run".into());
    let name = args
        .name
        .clone()
        .or(spec_name)
        .unwrap_or_else(|| generate_name(&agent));
    let execution = AgentExecution::new(&name, spec);
    let created = cluster
        .executions()
        .create(&PostParams::default(), &execution)
        .await
        .map_err(api_error)?;
    let format = args.output.format;
    if args.no_wait {
        let record = to_record(&created, cluster.store_url.as_deref());
        print_ok(format, "execution", &record, || {
            format!(
                "execution {name} created in namespace {}; follow it with `errand watch {name}`",
                cluster.namespace
            )
        });
        return Ok(());
    }
    let done = cluster.wait(&name).await?;
    let record = to_record(&done, cluster.store_url.as_deref());
    record_outcome(format, &record, || print_record(&record))
}

/// `errand status NAME`.
pub async fn status(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let cluster = Cluster::connect(target).await?;
    let record = to_record(&cluster.find(name).await?, cluster.store_url.as_deref());
    print_ok(output.format, "execution", &record, || {
        print_record(&record)
    });
    Ok(())
}

/// `errand list`.
pub async fn list(target: &Target, output: OutputArgs) -> Result<(), CliError> {
    let cluster = Cluster::connect(target).await?;
    let items = cluster
        .executions()
        .list(&ListParams::default())
        .await
        .map_err(api_error)?
        .items;
    let records: Vec<ExecutionRecord> = items
        .iter()
        .map(|e| to_record(e, cluster.store_url.as_deref()))
        .collect();
    print_executions(output.format, &records);
    Ok(())
}

/// `errand tail -n N NAME`: the last lines of the agent container's log.
pub async fn tail(
    target: &Target,
    name: &str,
    lines: usize,
    output: OutputArgs,
) -> Result<(), CliError> {
    let cluster = Cluster::connect(target).await?;
    let execution = cluster.find(name).await?;
    let name = execution.metadata.name.unwrap_or_default();
    let pod = cluster
        .pod(&execution.metadata.uid.unwrap_or_default())
        .await?
        .ok_or_else(|| {
            CliError::new(
                "not_found",
                format!("execution {name} has no pod (yet, or any more)"),
            )
        })?;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let params = LogParams {
        container: Some(AGENT_CONTAINER.into()),
        tail_lines: Some(lines as i64),
        ..Default::default()
    };
    let text = pods
        .logs(&pod.metadata.name.unwrap_or_default(), &params)
        .await
        .map_err(api_error)?;
    let all: Vec<&str> = text.lines().collect();
    print_ok(
        output.format,
        "logs",
        &json!({"execution": name, "stream": "stdout", "lines": all}),
        || all.join("\n"),
    );
    Ok(())
}

/// `errand watch NAME`: follows the agent's log until the execution ends.
pub async fn watch(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let cluster = Cluster::connect(target).await?;
    let execution = cluster.find(name).await?;
    let name = execution.metadata.name.unwrap_or_default();
    if output.format == Format::Human {
        follow_log(&cluster, &name, &execution.metadata.uid.unwrap_or_default()).await;
    }
    let done = cluster.wait(&name).await?;
    let record = to_record(&done, cluster.store_url.as_deref());
    record_outcome(output.format, &record, || print_record(&record))
}

/// Prints the agent container's log as it grows, until the container ends or the execution
/// ends without one.
async fn follow_log(cluster: &Cluster, name: &str, uid: &str) {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    loop {
        let execution = cluster.executions().get(name).await.ok();
        if execution
            .as_ref()
            .and_then(phase)
            .is_none_or(Phase::is_terminal)
        {
            return;
        }
        if let Ok(Some(pod)) = cluster.pod(uid).await {
            let params = LogParams {
                container: Some(AGENT_CONTAINER.into()),
                follow: true,
                ..Default::default()
            };
            if let Ok(stream) = pods
                .log_stream(&pod.metadata.name.unwrap_or_default(), &params)
                .await
            {
                let mut lines = stream.lines();
                while let Some(Ok(line)) = lines.next().await {
                    println!("{line}");
                }
                return;
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `errand results list NAME`.
pub async fn results_list(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let cluster = Cluster::connect(target).await?;
    let record = to_record(&cluster.find(name).await?, cluster.store_url.as_deref());
    print_results(output.format, &record);
    Ok(())
}

/// `errand results download RESULT --execution NAME -o FILE`, read from the operator's store.
pub async fn results_download(
    target: &Target,
    result: &str,
    name: &str,
    file: Option<std::path::PathBuf>,
    format: Format,
) -> Result<(), CliError> {
    let cluster = Cluster::connect(target).await?;
    let result_name = parse_result_name(result)?;
    let execution = cluster.find(name).await?;
    let id = ExecutionId {
        namespace: cluster.namespace.clone(),
        name: execution.metadata.name.clone().unwrap_or_default(),
        uid: execution.metadata.uid.clone().unwrap_or_default(),
    };
    download(&cluster.store()?, &id, result_name, file, format).await
}

/// `errand cancel NAME`: sets `spec.cancel` and waits for the run to save its results.
pub async fn cancel(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let cluster = Cluster::connect(target).await?;
    let execution = cluster.find(name).await?;
    let name = execution.metadata.name.clone().unwrap_or_default();
    if let Some(done) = phase(&execution).filter(|p| p.is_terminal()) {
        return Err(CliError::new(
            "already_finished",
            format!("execution {name} already ended {done:?}; there is nothing to cancel"),
        ));
    }
    let patch = Patch::Merge(json!({"spec": {"cancel": true}}));
    cluster
        .executions()
        .patch(&name, &PatchParams::default(), &patch)
        .await
        .map_err(api_error)?;
    let done = cluster.wait(&name).await?;
    let record = to_record(&done, cluster.store_url.as_deref());
    print_ok(output.format, "execution", &record, || {
        print_record(&record)
    });
    Ok(())
}

/// `errand delete NAME`: deletes the AgentExecution and waits until its finalizer has removed
/// its results and it is gone.
pub async fn delete(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let cluster = Cluster::connect(target).await?;
    let name = cluster.find(name).await?.metadata.name.unwrap_or_default();
    cluster
        .executions()
        .delete(&name, &DeleteParams::foreground())
        .await
        .map_err(api_error)?;
    while cluster
        .executions()
        .get_opt(&name)
        .await
        .map_err(api_error)?
        .is_some()
    {
        tokio::time::sleep(POLL).await;
    }
    print_ok(
        output.format,
        "deleted",
        &json!({"execution": name}),
        || format!("deleted execution {name} and its results"),
    );
    Ok(())
}
