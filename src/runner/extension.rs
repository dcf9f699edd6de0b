//! An execution's extension: the trusted step after a successful agent run, which reads the run's results and saves the results its AgentExtension declares, then the manifest of everything.
//!
//! The step's contract, wherever it runs: it starts in an empty working directory of its own
//! with `ERRAND_EXTENSION_RESULTS_DIR` holding the run's saved results as files
//! (`output_workdir.tar.gz`, `output_artifacts.tar.gz`, `input_workdir.tar.gz`,
//! `run_result.json`), its settings in `ERRAND_EXTENSION_CONFIG` (JSON; also in the file
//! `ERRAND_EXTENSION_CONFIG_FILE` names), and
//! `ERRAND_EXTENSION_OUTPUT_DIR`, where it writes one file or directory per declared result
//! name. It exits 0 having written every declared result; errand saves each (a directory as a
//! `tar.gz`) and ignores anything else it wrote. It runs under its AgentExtension's deadline,
//! stopped as an agent is (SIGTERM to its process group, grace, SIGKILL). Locally the results
//! come from the store and go to it directly.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::collect::ResultsManifest;
use super::{Invocation, Provenance, RunState, RunSummary, ScratchDir, run};
use crate::api::ResultEntry;
use crate::api::contract::{
    ENV_EXECUTION_NAME, ENV_EXECUTION_NAMESPACE, ENV_EXTENSION_CONFIG, ENV_EXTENSION_CONFIG_FILE,
    ENV_EXTENSION_KIND, ENV_EXTENSION_OUTPUT_DIR, ENV_EXTENSION_RESULTS_DIR,
};
use crate::archive::{self, PackOptions};
use crate::resolve::ResolvedExtension;
use crate::store::keys::ResultName;
use crate::store::{ResultBody, ResultSink, StoreResults};

/// How an extension's step ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionSummary {
    /// The extension kind.
    pub kind: String,
    /// The AgentExtension it came from.
    pub name: String,
    /// How its process ended.
    pub state: RunState,
    /// Its exit code, if it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why the step failed, when it did: its process, a declared result it did not write, or a
    /// result that could not be saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The end of its stderr.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
    /// What it saved: its declared results, then the manifest of the whole run.
    pub results: Vec<ResultEntry>,
}

impl ExtensionSummary {
    /// Whether the step ran to its end and everything it declared was saved.
    pub fn succeeded(&self) -> bool {
        self.state == RunState::Succeeded && self.failure.is_none()
    }
}

/// Runs `extension` after the agent's run `agent` succeeded as `run` tells, saving its results
/// beside the run's in `results`, then the manifest of all of them with what the run's archives
/// left out. `env` is the machine's environment for the step; `dir` its own directory.
pub async fn run_extension(
    extension: &ResolvedExtension,
    agent: &Invocation,
    run: &RunSummary,
    results: &StoreResults,
    env: Vec<(String, String)>,
    dir: &Path,
    cancel: CancellationToken,
) -> ExtensionSummary {
    let mut summary = ExtensionSummary {
        kind: extension.kind.clone(),
        name: extension.name.clone(),
        state: RunState::StartFailed,
        exit_code: None,
        failure: None,
        stderr_tail: String::new(),
        results: Vec::new(),
    };
    let layout = StepLayout::new(dir);
    match prepare(extension, &layout, &run.results, results).await {
        Ok(()) => {
            let step = step_invocation(extension, agent, &layout, env);
            let run = run::supervise(&step, &cancel).await;
            summary.state = run.state;
            summary.exit_code = run.exit_code;
            summary.stderr_tail = run.stderr_tail;
            summary.failure = match run.state {
                RunState::Succeeded => None,
                RunState::Failed => {
                    Some(format!("exited with code {}", run.exit_code.unwrap_or(-1)))
                }
                _ => Some(run.error.unwrap_or_else(|| format!("{:?}", run.state))),
            };
        }
        Err(e) => summary.failure = Some(e),
    }
    if summary.failure.is_none() {
        let stop = if cancel.is_cancelled() {
            CancellationToken::new()
        } else {
            cancel
        };
        save_declared(extension, &layout.output, results, &stop, &mut summary).await;
    }
    let mut listed = run.results.clone();
    listed.extend(summary.results.iter().cloned());
    let manifest = ResultsManifest {
        execution: &agent.execution,
        results: &listed,
        skipped: &run.skipped,
    };
    let body = serde_json::to_vec_pretty(&manifest).expect("a manifest always serializes");
    match results
        .put(ResultName::Manifest, ResultBody::bytes(body))
        .await
    {
        Ok(stored) => summary
            .results
            .push(super::result_entry(ResultName::Manifest, stored)),
        Err(e) => {
            let error = format!("saving {}: {e}", ResultName::Manifest);
            summary.failure = Some(match summary.failure.take() {
                Some(failure) => format!("{failure}; {error}"),
                None => error,
            });
        }
    }
    summary
}

/// The step's directories under its own `dir`.
struct StepLayout {
    results: PathBuf,
    output: PathBuf,
    work: PathBuf,
    scratch: ScratchDir,
    config: PathBuf,
}

impl StepLayout {
    fn new(dir: &Path) -> Self {
        StepLayout {
            results: dir.join("results"),
            output: dir.join("output"),
            work: dir.join("work"),
            scratch: ScratchDir::new(dir.join("scratch")),
            config: dir.join("config.json"),
        }
    }
}

/// Creates the step's directories, writes its settings, and copies the run's saved results
/// (all but the manifest) into its results directory.
async fn prepare(
    extension: &ResolvedExtension,
    layout: &StepLayout,
    saved: &[ResultEntry],
    results: &StoreResults,
) -> Result<(), String> {
    for dir in [&layout.results, &layout.output, &layout.work] {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| format!("preparing {}: {e}", dir.display()))?;
    }
    let config = serde_json::to_vec(&extension.config).expect("a config always serializes");
    tokio::fs::write(&layout.config, config)
        .await
        .map_err(|e| format!("writing {}: {e}", layout.config.display()))?;
    for entry in saved {
        let Some(name) = ResultName::parse(&entry.name).filter(|n| *n != ResultName::Manifest)
        else {
            continue;
        };
        let path = layout.results.join(name.file_name());
        let reading =
            |e: &dyn std::fmt::Display| format!("reading result {name} for the extension: {e}");
        let mut body = results
            .get(name)
            .await
            .map_err(|e| reading(&e))?
            .into_stream();
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| reading(&e))?;
        while let Some(chunk) = body.next().await {
            file.write_all(&chunk.map_err(|e| reading(&e))?)
                .await
                .map_err(|e| reading(&e))?;
        }
        file.flush().await.map_err(|e| reading(&e))?;
    }
    Ok(())
}

/// The step as the runner runs it: the extension's command in its own working directory, with
/// the contract's variables on top of `env`.
fn step_invocation(
    extension: &ResolvedExtension,
    agent: &Invocation,
    layout: &StepLayout,
    mut env: Vec<(String, String)>,
) -> Invocation {
    let config = serde_json::to_string(&extension.config).expect("a config always serializes");
    let path = |p: &Path| p.display().to_string();
    env.extend([
        (ENV_EXTENSION_KIND.to_owned(), extension.kind.clone()),
        (ENV_EXTENSION_CONFIG.to_owned(), config),
        (ENV_EXTENSION_CONFIG_FILE.to_owned(), path(&layout.config)),
        (ENV_EXTENSION_RESULTS_DIR.to_owned(), path(&layout.results)),
        (ENV_EXTENSION_OUTPUT_DIR.to_owned(), path(&layout.output)),
        (ENV_EXECUTION_NAME.to_owned(), agent.execution.name.clone()),
        (
            ENV_EXECUTION_NAMESPACE.to_owned(),
            agent.execution.namespace.clone(),
        ),
    ]);
    Invocation {
        execution: agent.execution.clone(),
        command: extension.command(),
        input: agent.input.clone(),
        agent_config_path: agent.agent_config_path.clone(),
        env,
        timeout: Duration::from_secs(u64::try_from(extension.timeout_seconds).unwrap_or(1).max(1)),
        grace: agent.grace,
        workdir: layout.work.clone(),
        scratch: layout.scratch.clone(),
        passthrough: agent.passthrough,
        stop: agent.stop,
        inherit_env: false,
        gpu_devices: Vec::new(),
        provenance: Provenance::default(),
        extension_follows: false,
        // The extension's step is errand's own: the agent's telemetry settings stay with it.
        telemetry: crate::telemetry::ExecutionTelemetry::off(),
    }
}

/// Saves each declared result from `output`: a directory as a `tar.gz`, a file as it is. A
/// declared result the step did not write fails it.
async fn save_declared(
    extension: &ResolvedExtension,
    output: &Path,
    results: &StoreResults,
    stop: &CancellationToken,
    summary: &mut ExtensionSummary,
) {
    let mut errors = Vec::new();
    for name in &extension.results {
        let path = output.join(name);
        let body = match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => match archive::list_dir(&path) {
                Ok(items) => {
                    let options = PackOptions {
                        cancel: stop.clone(),
                        ..PackOptions::default()
                    };
                    ResultBody::packed(items, options).0
                }
                Err(e) => {
                    errors.push(format!("{name}: {e}"));
                    continue;
                }
            },
            Ok(meta) if meta.is_file() => match std::fs::read(&path) {
                Ok(bytes) => ResultBody::bytes(bytes),
                Err(e) => {
                    errors.push(format!("{name}: {e}"));
                    continue;
                }
            },
            Ok(_) => {
                errors.push(format!("{name}: is neither a file nor a directory"));
                continue;
            }
            Err(_) => {
                errors.push(format!(
                    "{name}: not written (the extension declares it; write it to \
                     {ENV_EXTENSION_OUTPUT_DIR}/{name})"
                ));
                continue;
            }
        };
        match results.put_extension_result(name, body).await {
            Ok(stored) => summary.results.push(ResultEntry {
                name: name.clone(),
                size: stored.size,
                sha256: stored.sha256,
            }),
            Err(e) => errors.push(format!("saving {name}: {e}")),
        }
    }
    if !errors.is_empty() {
        summary.failure = Some(format!("results: {}", errors.join("; ")));
    }
}
