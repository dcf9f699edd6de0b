//! Pure resolution of an AgentExecution: find its agent and environment, merge, validate every admission rule, snapshot.
//!
//! Nothing here does I/O: lookups go through a [`Catalog`], so the controller, the webhook and
//! the local backend share exactly the same rules.

mod budget;
mod catalog;
mod classes;
mod compute;
pub mod conditions;
mod config_schema;
pub mod cron;
pub mod deployment;
pub mod egress;
mod extension;
mod merge;
pub mod model_credentials;
mod nemo_spec;
mod notify;
pub mod outbound_policy;
mod problems;
mod quantity;
mod refs;
mod rerun;
mod rules;
pub mod run_tokens;
mod runtime;
pub mod schedule;
mod schema;
mod secrets;
mod snapshot;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::api::contract::ACCEPTED_CONFIG_FORMATS;
use crate::api::{
    AgentConfig, AgentEnvironmentSpec, AgentExecutionSpec, MAX_INPUT_BYTES, MAX_TIMEOUT_SECONDS,
    ModelCredentials, Reference, RuntimeContainer, Workdir,
};

pub use budget::{RunAllowance, RunBudget, RunLimits};
pub use catalog::{Catalog, ClassKind, InMemoryCatalog, WithFilesetPaths};
pub use compute::{InvalidLabel, label_key, label_value};
pub use config_schema::{SCHEMA_KEYWORDS, SCHEMA_TYPES, check_schema, validate as validate_config};
pub use deployment::{as_execution_spec, resolve_deployment, source_digest};
pub use extension::{
    InvalidResultName, ResolvedExtension, check_extension, extension_result_name, pick_extension,
};
pub use merge::{merge_environment, merge_maps, merge_values};
pub use nemo_spec::{NEMO_JOB_FIELDS, SpecShape, parse_spec, shape_of, workspace_name};
pub use notify::{InvalidWebhookUrl, webhook_url};
pub use problems::{InvalidSpec, Problem};
pub use quantity::{ParsedQuantity, QuantityError, parse_quantity};
pub use refs::StringRef;
pub use rerun::{ImageRun, RerunSource, UnpinnableImage, pin_image, resolve_rerun};
pub use rules::{
    InvalidValue, SUPPORTED_PROVIDERS, env_name, is_reserved_env, lifetime_seconds, mount_paths,
    namespace_name, object_name, relative_path,
};
pub use runtime::{PickedRuntime, harness_kind, pick_runtime, with_runtime_defaults};
pub use schema::{
    Resource, check_deployment, check_execution_spec, check_execution_spec_structure, check_object,
    check_schedule, check_structure, decode,
};
pub use secrets::{McpSecretRef, mcp_secret_refs};
pub use snapshot::{
    FilesetContent, MAX_SNAPSHOT_BYTES, MountedContent, ResolvedAgent, SNAPSHOT_VERSION,
    SecretBinding, Snapshot, WorkdirPlan,
};

use problems::Problems;

/// Seconds a pod may take to start when the execution sets no `startTimeoutSeconds`.
pub const DEFAULT_START_TIMEOUT_SECONDS: i64 = 600;

/// Resolves, merges and validates `spec` submitted in `namespace`, reporting every problem at once.
pub fn resolve_execution(
    namespace: &str,
    spec: &AgentExecutionSpec,
    catalog: &dyn Catalog,
) -> Result<Snapshot, InvalidSpec> {
    let mut problems = Problems::default();
    notify::check_notify(namespace, spec, catalog, &mut problems);
    if let Some(rerun) = &spec.rerun_of {
        let source = catalog.rerun_source(namespace, &rerun.name);
        let rerun = resolve_rerun(namespace, spec, source.as_ref()).map(|mut snapshot| {
            // A rerun replays its snapshot, under the isolation the installation requires now.
            if let Some(class) = catalog.required_runtime_class() {
                snapshot.compute.runtime_class_name = Some(class);
            }
            snapshot
        });
        return problems.finish_with(rerun);
    }
    let agent = resolve_agent(namespace, spec, catalog, &mut problems);
    let environment = resolve_environment(namespace, spec, catalog, &mut problems);
    let workdir = resolve_workdir(namespace, spec.workdir.as_ref(), catalog, &mut problems);
    check_run_settings(spec, &mut problems);
    check_lifetime(spec, &mut problems);
    let extension = spec.extension.as_ref().and_then(|extension| {
        pick_extension(extension, &catalog.extensions())
            .map_err(|found| problems.extend(found))
            .ok()
    });

    // Secret bindings are checked even when the agent is unusable, so one rejection lists
    // every problem; only the merged config needs both halves.
    let secrets = match &environment {
        Some((environment_name, environment, _)) => secrets::environment_secrets(
            namespace,
            environment,
            environment_name.as_deref(),
            catalog,
            &mut problems,
        ),
        None => Vec::new(),
    };
    let (Some((agent_name, agent)), Some((environment_name, environment, environment_prefix))) =
        (agent, environment)
    else {
        // A missing agent or environment has always been reported as a problem.
        return Err(problems.into_error());
    };
    let (egress, narrowing) =
        egress::narrowed(&environment.egress, spec.egress.as_ref(), "spec.egress");
    problems.extend(narrowing);
    let config = merge_environment(&agent.config.0, &environment.overlay);
    check_merged_config(&config, &mut problems);
    let secrets = secrets::with_mcp_secrets(namespace, secrets, &config, catalog, &mut problems);
    let credentials = environment
        .model_credentials
        .unwrap_or_else(|| catalog.default_model_credentials());
    let proxied_models = match credentials {
        ModelCredentials::Proxied => {
            model_credentials::proxied_models(&config, &secrets, &mut problems)
        }
        ModelCredentials::Direct => Vec::new(),
    };
    let runtime = agent.picked.as_ref().and_then(|picked| {
        let compute = picked.spec.compute.as_ref()?;
        Some((picked.name.as_str(), compute))
    });
    let compute = classes::placed_compute(
        environment.compute,
        &environment_prefix,
        runtime,
        catalog,
        &mut problems,
    );

    let snapshot = Snapshot {
        version: SNAPSHOT_VERSION.to_owned(),
        namespace: namespace.to_owned(),
        agent: ResolvedAgent {
            name: agent_name,
            runtime: agent.container,
            runtime_name: agent.picked.as_ref().map(|p| p.name.clone()),
        },
        environment: environment_name,
        config,
        secrets,
        proxied_models,
        compute,
        egress,
        workdir,
        input: spec.input.clone(),
        timeout_seconds: spec.timeout_seconds,
        start_timeout_seconds: spec
            .start_timeout_seconds
            .unwrap_or(DEFAULT_START_TIMEOUT_SECONDS),
        auto_telemetry: spec.auto_telemetry,
        extension,
        queue_name: spec.queue_name.clone(),
    };
    if problems.is_empty() {
        problems.extend(snapshot.check_size(&agent_prefix(spec)));
    }
    problems.finish(snapshot)
}

/// Where the agent's config is in the spec, for problems about it.
fn agent_prefix(spec: &AgentExecutionSpec) -> String {
    match &spec.agent_ref {
        Some(reference) => format!("Agent {:?} spec", reference.name),
        None => "spec.agent".to_owned(),
    }
}

/// The message of the one rule that holds only when an execution is created.
pub const CANCELLED_AT_CREATION: &str = "must not be true when the execution is created: it would have nothing to stop; create it without cancel, then set cancel to true to stop it";

/// Adds the rules that hold only when an execution is created to its `resolution`, so that one
/// refusal lists every problem. An execution may not be created cancelled: both backends
/// refuse it here (the webhook and the local backend), instead of creating something that
/// never runs.
pub fn admit_creation(
    spec: &AgentExecutionSpec,
    resolution: Result<Snapshot, InvalidSpec>,
) -> Result<Snapshot, InvalidSpec> {
    let mut problems = Problems::default();
    if spec.cancel {
        problems.push("spec.cancel", CANCELLED_AT_CREATION);
    }
    problems.finish_with(resolution)
}

/// Checks a reference's name and that it stays in `namespace`.
fn check_reference(
    namespace: &str,
    reference: &Reference,
    field: &str,
    problems: &mut Problems,
) -> bool {
    let mut ok = true;
    if let Some(other) = reference.namespace.as_deref().filter(|ns| *ns != namespace) {
        problems.push(
            format!("{field}.namespace"),
            format!(
                "{other:?} is another namespace; references must stay in namespace {namespace:?}"
            ),
        );
        ok = false;
    }
    if let Err(message) = object_name(&reference.name) {
        problems.push(format!("{field}.name"), message);
        ok = false;
    }
    ok
}

/// An agent ready to run: its config and the container it runs in, its own `runtime` or the
/// AgentRuntime picked for its harness kind.
struct RunnableAgent {
    config: AgentConfig,
    container: RuntimeContainer,
    picked: Option<PickedRuntime>,
}

/// The agent's name and what runs it, from `agentRef` or the inline `agent`.
fn resolve_agent(
    namespace: &str,
    spec: &AgentExecutionSpec,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) -> Option<(String, RunnableAgent)> {
    let (name, agent, prefix) = match (&spec.agent_ref, &spec.agent) {
        (Some(reference), None) => {
            if !check_reference(namespace, reference, "spec.agentRef", problems) {
                return None;
            }
            let Some(agent) = catalog.agent(namespace, &reference.name) else {
                problems.push(
                    "spec.agentRef.name",
                    format!(
                        "Agent {:?} not found in namespace {namespace:?}",
                        reference.name
                    ),
                );
                return None;
            };
            (
                reference.name.clone(),
                agent,
                format!("Agent {:?} spec", reference.name),
            )
        }
        (None, Some(agent)) => {
            let name = agent.config.name().unwrap_or("inline").to_owned();
            (name, agent.clone(), "spec.agent".to_owned())
        }
        _ => {
            problems.push(
                "spec",
                "exactly one of agentRef, agent or rerunOf must be set",
            );
            return None;
        }
    };
    let before = problems.len();
    check_config(&agent.config, &prefix, problems);
    let (container, picked) = match agent.runtime {
        Some(container) => {
            check_container(&container, &format!("{prefix}.runtime"), problems);
            (container, None)
        }
        None => match pick_runtime(&agent.config.0, &catalog.runtimes(), &prefix) {
            Ok(picked) => (picked.spec.container.clone(), Some(picked)),
            Err(problem) => {
                problems.extend([problem]);
                return None;
            }
        },
    };
    (problems.len() == before).then_some((
        name,
        RunnableAgent {
            config: agent.config,
            container,
            picked,
        },
    ))
}

/// Checks an agent's config: its format and plain env names.
fn check_config(config: &AgentConfig, prefix: &str, problems: &mut Problems) {
    let format_field = format!("{prefix}.config.config_format");
    match config.0.get("config_format") {
        None => problems.push(
            format_field,
            format!(
                "is required; accepted: {}",
                rules::one_of(&ACCEPTED_CONFIG_FORMATS)
            ),
        ),
        Some(Value::String(format)) if ACCEPTED_CONFIG_FORMATS.contains(&format.as_str()) => {}
        Some(other) => problems.push(
            format_field,
            format!(
                "{other} is not an accepted format; accepted: {}",
                rules::one_of(&ACCEPTED_CONFIG_FORMATS)
            ),
        ),
    }
    if let Some(env) = config.0.get("env") {
        check_env_object(env, &format!("{prefix}.config.env"), problems);
    }
}

/// Checks an agent's container (found at `field`): image, entrypoint, pull policy.
fn check_container(container: &RuntimeContainer, field: &str, problems: &mut Problems) {
    if container.image.trim().is_empty() {
        problems.push(format!("{field}.image"), "must not be empty");
    }
    if container.command.is_empty() {
        problems.push(
            format!("{field}.command"),
            "must name the agent's entrypoint",
        );
    }
    if let Some(policy) = container.image_pull_policy.as_deref()
        && !["Always", "IfNotPresent", "Never"].contains(&policy)
    {
        problems.push(
            format!("{field}.imagePullPolicy"),
            format!("{policy:?} is not one of Always, IfNotPresent, Never"),
        );
    }
}

fn check_env_object(env: &Value, field: &str, problems: &mut Problems) {
    let Value::Object(env) = env else {
        problems.push(
            field,
            format!("{env} must be a map of names to string values"),
        );
        return;
    };
    for (name, value) in env {
        if let Err(message) = rules::env_name(name) {
            problems.push(format!("{field}.{name}"), message);
        } else if !value.is_string() {
            problems.push(
                format!("{field}.{name}"),
                format!("{value} must be a string"),
            );
        }
    }
}

/// The environment's name (when referenced), spec and the prefix of problems about its fields;
/// an execution without one gets an empty environment. An environment with problems of its own is still returned (its problems are
/// recorded), so its secret bindings are checked too.
fn resolve_environment(
    namespace: &str,
    spec: &AgentExecutionSpec,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) -> Option<(Option<String>, AgentEnvironmentSpec, String)> {
    let (name, environment, prefix) = match (&spec.environment_ref, &spec.environment) {
        (Some(_), Some(_)) => {
            problems.push(
                "spec",
                "at most one of environmentRef or environment may be set",
            );
            return None;
        }
        (Some(reference), None) => {
            if !check_reference(namespace, reference, "spec.environmentRef", problems) {
                return None;
            }
            let Some(environment) = catalog.environment(namespace, &reference.name) else {
                problems.push(
                    "spec.environmentRef.name",
                    format!(
                        "AgentEnvironment {:?} not found in namespace {namespace:?}",
                        reference.name
                    ),
                );
                return None;
            };
            (
                Some(reference.name.clone()),
                environment,
                format!("AgentEnvironment {:?} spec", reference.name),
            )
        }
        (None, Some(environment)) => (None, environment.clone(), "spec.environment".to_owned()),
        (None, None) => (
            None,
            AgentEnvironmentSpec::default(),
            "spec.environment".to_owned(),
        ),
    };
    problems.extend(egress::egress(
        &environment.egress,
        &format!("{prefix}.egress"),
    ));
    problems.extend(compute::compute(
        &environment.compute,
        &format!("{prefix}.compute"),
    ));
    for name in environment.overlay.env.keys() {
        if let Err(message) = rules::env_name(name) {
            problems.push(format!("{prefix}.overlay.env.{name}"), message);
        }
    }
    Some((name, environment, prefix))
}

/// The workdir plan with each Fileset pinned to its current digest.
fn resolve_workdir(
    namespace: &str,
    workdir: Option<&Workdir>,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) -> WorkdirPlan {
    let Some(workdir) = workdir else {
        return WorkdirPlan::default();
    };
    let base = workdir
        .base
        .as_deref()
        .and_then(|base| resolve_fileset(namespace, base, "spec.workdir.base", catalog, problems));
    let mount_path_list: Vec<&str> = workdir
        .artifact_mounts
        .iter()
        .map(|m| m.mount_path.as_str())
        .collect();
    for (index, message) in mount_paths(&mount_path_list) {
        problems.push(
            format!("spec.workdir.artifactMounts[{index}].mountPath"),
            message,
        );
    }
    let mounts = workdir
        .artifact_mounts
        .iter()
        .enumerate()
        .filter_map(|(index, mount)| {
            let field = format!("spec.workdir.artifactMounts[{index}].ref");
            let content =
                resolve_fileset(namespace, &mount.fileset_ref, &field, catalog, problems)?;
            Some(MountedContent {
                content,
                mount_path: mount.mount_path.clone(),
            })
        })
        .collect();
    WorkdirPlan { base, mounts }
}

/// Resolves `[namespace/]fileset[#path]` to the Fileset's current digest.
fn resolve_fileset(
    namespace: &str,
    text: &str,
    field: &str,
    catalog: &dyn Catalog,
    problems: &mut Problems,
) -> Option<FilesetContent> {
    let reference = StringRef::parse(text);
    if let Some(other) = reference.namespace.as_deref().filter(|ns| *ns != namespace) {
        problems.push(
            field,
            format!("{text:?} names Fileset namespace {other:?}; references must stay in namespace {namespace:?}"),
        );
        return None;
    }
    if let Err(message) = object_name(&reference.name) {
        problems.push(field, message);
        return None;
    }
    if let Some(path) = &reference.fragment
        && let Err(message) = relative_path(path)
    {
        problems.push(field, format!("path in {text:?}: {message}"));
        return None;
    }
    let Some(status) = catalog.fileset(namespace, &reference.name) else {
        problems.push(
            field,
            format!(
                "Fileset {:?} not found in namespace {namespace:?}",
                reference.name
            ),
        );
        return None;
    };
    let Some(digest) = status.digest else {
        problems.push(
            field,
            format!(
                "Fileset {:?} has no content yet; push it with `errand filesets push`",
                reference.name
            ),
        );
        return None;
    };
    if let Some(path) = &reference.fragment
        && let Some(index) = catalog.fileset_paths(namespace, &digest)
        && !index.contains(path)
    {
        problems.push(
            field,
            format!(
                "Fileset {:?} has no path {path:?} (its content {digest} holds {} paths)",
                reference.name,
                index.len()
            ),
        );
        return None;
    }
    Some(FilesetContent {
        fileset: reference.name,
        digest,
        path: reference.fragment,
    })
}

/// The digests (`sha256:<hex>`) of the Fileset contents `spec` selects a subpath of, as
/// `catalog` pins them: the path indexes a resolution of `spec` needs.
pub fn subpath_digests(
    namespace: &str,
    spec: &AgentExecutionSpec,
    catalog: &dyn Catalog,
) -> BTreeSet<String> {
    let refs = spec.workdir.iter().flat_map(|w| {
        w.base
            .iter()
            .chain(w.artifact_mounts.iter().map(|m| &m.fileset_ref))
    });
    refs.map(|text| StringRef::parse(text))
        .filter(|r| r.fragment.is_some())
        .filter_map(|r| catalog.fileset(namespace, &r.name)?.digest)
        .collect()
}

/// The input's size and the timeouts.
fn check_run_settings(spec: &AgentExecutionSpec, problems: &mut Problems) {
    if spec.input.len() > MAX_INPUT_BYTES {
        problems.push(
            "spec.input",
            format!(
                "is {} bytes; at most {MAX_INPUT_BYTES} (256 KiB) are accepted. Pass larger input \
                 as a file: push it in a Fileset and mount it into the working directory \
                 (spec.workdir), then name the file in the input",
                spec.input.len()
            ),
        );
    }
    let timeouts = [
        ("spec.timeoutSeconds", Some(spec.timeout_seconds)),
        ("spec.startTimeoutSeconds", spec.start_timeout_seconds),
    ];
    for (field, seconds) in timeouts {
        match seconds {
            Some(seconds) if seconds < 1 => {
                problems.push(field, format!("{seconds} must be at least 1"));
            }
            Some(seconds) if seconds > MAX_TIMEOUT_SECONDS => problems.push(
                field,
                format!("{seconds} must be at most {MAX_TIMEOUT_SECONDS} (7 days)"),
            ),
            _ => {}
        }
    }
}

/// How long the execution is kept after it finishes.
fn check_lifetime(spec: &AgentExecutionSpec, problems: &mut Problems) {
    if let Some(Err(message)) = spec.ttl_seconds_after_finished.map(lifetime_seconds) {
        problems.push("spec.ttlSecondsAfterFinished", message);
    }
}

/// Rules that hold only for the merged config: providers and the merged `env`.
fn check_merged_config(config: &Map<String, Value>, problems: &mut Problems) {
    let mut providers: BTreeMap<String, &Value> = BTreeMap::new();
    if let Some(provider) = config.get("provider") {
        providers.insert("config.provider".into(), provider);
    }
    match config.get("models") {
        Some(Value::Object(models)) => {
            for (alias, model) in models {
                if let Some(provider) = model.get("provider") {
                    providers.insert(format!("config.models.{alias}.provider"), provider);
                }
            }
        }
        Some(Value::Array(models)) => {
            for (index, model) in models.iter().enumerate() {
                if let Some(provider) = model.get("provider") {
                    providers.insert(format!("config.models[{index}].provider"), provider);
                }
            }
        }
        _ => {}
    }
    for (field, provider) in providers {
        let supported = provider
            .as_str()
            .is_some_and(|p| SUPPORTED_PROVIDERS.contains(&p));
        if !supported {
            problems.push(
                format!("{field} (after merging the environment)"),
                format!(
                    "{provider} is not a supported provider; supported: {}",
                    rules::one_of(&SUPPORTED_PROVIDERS)
                ),
            );
        }
    }
    if let Some(env) = config.get("env") {
        check_env_object(env, "config.env (after merging the environment)", problems);
    }
}

#[cfg(test)]
mod tests;
