//! The catalog commands: `apply -f`, `agents`, `environments`, `runtimes`, `filesets push|list|delete`.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::context::{Local, Target};
use super::output::{CliError, OutputArgs, human_size, print_ok};
use crate::local::ManifestObject;
use crate::local::{
    CheckedObject, ObjectKind, parse_document, parse_manifests, read_manifest_file,
};

/// What to do with Agents, AgentEnvironments or AgentRuntimes.
#[derive(Debug, clap::Subcommand)]
pub enum CatalogAction {
    /// List them (the default).
    List,
    /// Create an Agent from a bare agent config (as `nemo agents create` takes it); it names
    /// no runtime, so it runs with the AgentRuntime of its config's harness kind.
    Create {
        /// The Agent's name.
        #[arg(long)]
        name: String,
        /// The agent config file (`config_format`, `name`, `default_harness`, `harnesses`,
        /// `models`, ...), YAML or JSON.
        #[arg(long, value_name = "FILE")]
        agent_config: PathBuf,
    },
    /// Delete one by name.
    Delete {
        /// Its name.
        name: String,
    },
}

/// `errand apply -f FILE...`: stores Agents, AgentEnvironments, Filesets and Secrets, all or
/// nothing: every document is read and checked (its schema and CEL rules, its name, an Agent's
/// immutability) before the first is written.
pub fn apply(target: &Target, files: &[PathBuf], output: OutputArgs) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let catalog = local.catalog();
    let mut manifests = Vec::new();
    for file in files {
        let text = read_manifest_file(file).map_err(|e| CliError::manifest_file("-f", e))?;
        let source = file.display().to_string();
        let parsed =
            parse_manifests(&text, &source).map_err(|e| CliError::new("invalid_manifest", e))?;
        manifests.extend(
            parsed
                .into_iter()
                .enumerate()
                .map(|(index, m)| (format!("{source}: document {}", index + 1), m)),
        );
    }
    let mut checked: Vec<CheckedObject> = Vec::new();
    for (source, manifest) in &manifests {
        let object = catalog
            .check_apply(manifest, &local.namespace, &checked)
            .map_err(|e| CliError::new("invalid_manifest", format!("{source}: {e}")))?;
        checked.push(object);
    }
    for object in &checked {
        catalog
            .store(object)
            .map_err(|e| CliError::new("io_error", e))?;
    }
    let applied: Vec<serde_json::Value> = checked
        .iter()
        .map(|o| json!({"kind": o.kind.kind(), "namespace": o.namespace, "name": o.name}))
        .collect();
    print_ok(output.format, "applied", &applied, || {
        applied
            .iter()
            .map(|a| {
                format!(
                    "{}/{} applied",
                    a["kind"].as_str().unwrap_or_default().to_lowercase(),
                    a["name"].as_str().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

/// `errand agents` / `errand environments` / `errand runtimes`.
pub fn objects(
    target: &Target,
    kind: ObjectKind,
    action: Option<&CatalogAction>,
    output: OutputArgs,
) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let catalog = local.catalog();
    match action.unwrap_or(&CatalogAction::List) {
        CatalogAction::List => {
            let objects: Vec<serde_json::Value> = match kind {
                ObjectKind::Runtime => catalog
                    .runtime_objects()
                    .iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .collect(),
                _ => catalog
                    .list(&local.namespace, kind)
                    .iter()
                    .filter_map(|name| match kind {
                        ObjectKind::Agent => catalog
                            .agent_object(&local.namespace, name)
                            .map(|o| serde_json::to_value(o).ok()),
                        _ => catalog
                            .environment_object(&local.namespace, name)
                            .map(|o| serde_json::to_value(o).ok()),
                    })
                    .flatten()
                    .collect(),
            };
            print_ok(output.format, kind.plural(), &objects, || {
                objects
                    .iter()
                    .filter_map(|o| o["metadata"]["name"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        CatalogAction::Create { name, agent_config } if kind == ObjectKind::Agent => {
            let manifest = agent_from_config(name, agent_config)?;
            let object = catalog
                .check_apply(&manifest, &local.namespace, &[])
                .map_err(|e| CliError::new("invalid_manifest", e))?;
            catalog
                .store(&object)
                .map_err(|e| CliError::new("io_error", e))?;
            print_ok(
                output.format,
                "created",
                &json!({"kind": "Agent", "namespace": object.namespace, "name": name}),
                || format!("agent/{name} created"),
            );
        }
        CatalogAction::Create { .. } => {
            return Err(CliError::argument(format!(
                "create makes Agents only; apply {} manifests with `errand apply -f`",
                kind.plural()
            )));
        }
        CatalogAction::Delete { name } => {
            if !catalog.delete(&local.namespace, kind, name) {
                return Err(CliError::new(
                    "not_found",
                    format!(
                        "{} {name:?} not found in namespace {:?}",
                        kind.kind(),
                        local.namespace
                    ),
                ));
            }
            print_ok(
                output.format,
                "deleted",
                &json!({"kind": kind.kind(), "name": name}),
                || format!("{} {name} deleted", kind.kind()),
            );
        }
    }
    Ok(())
}

/// The Agent `name` wrapping the bare agent config in `file`, checked as `apply` checks one.
fn agent_from_config(name: &str, file: &Path) -> Result<ManifestObject, CliError> {
    let text =
        read_manifest_file(file).map_err(|e| CliError::manifest_file("--agent-config", e))?;
    let source = file.display();
    let config: serde_json::Value = serde_saphyr::from_str(&text).map_err(|e| {
        CliError::new(
            "invalid_manifest",
            format!("{source}: not valid YAML or JSON: {e}"),
        )
    })?;
    if config.get("kind").is_some() || config.get("apiVersion").is_some() {
        return Err(CliError::new(
            "invalid_manifest",
            format!(
                "{source}: --agent-config takes a bare agent config (config_format, name, ...), not a manifest; apply manifests with `errand apply -f`"
            ),
        ));
    }
    let manifest = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": name}, "spec": {"config": config},
    });
    parse_document(manifest)
        .map_err(|e| CliError::new("invalid_manifest", format!("--agent-config {source}: {e}")))
}

/// `errand filesets push NAME DIR`.
pub async fn push(
    target: &Target,
    name: &str,
    dir: &Path,
    output: OutputArgs,
) -> Result<(), CliError> {
    let local = Local::new(target)?;
    crate::resolve::object_name(name)
        .map_err(|e| CliError::argument(format!("fileset name: {e}")))?;
    if !dir.is_dir() {
        return Err(CliError::argument(format!(
            "{}: not a directory",
            dir.display()
        )));
    }
    let status = local.push_fileset(Some(name), dir).await?.status;
    print_ok(
        output.format,
        "fileset",
        &json!({"name": name, "status": status}),
        || {
            format!(
                "fileset {name} pushed: {} files, {}, {}",
                status.file_count.unwrap_or(0),
                human_size(status.size.unwrap_or(0)),
                status.digest.as_deref().unwrap_or_default()
            )
        },
    );
    Ok(())
}

/// `errand filesets list`.
pub fn list_filesets(target: &Target, output: OutputArgs) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let catalog = local.catalog();
    let filesets: Vec<_> = catalog
        .list(&local.namespace, ObjectKind::Fileset)
        .iter()
        .filter_map(|n| catalog.fileset_object(&local.namespace, n))
        .collect();
    print_ok(output.format, "filesets", &filesets, || {
        let mut out = format!("{:<32} {:>7} {:>10}  DIGEST", "NAME", "FILES", "SIZE");
        for f in &filesets {
            let status = f.status.clone().unwrap_or_default();
            out.push_str(&format!(
                "\n{:<32} {:>7} {:>10}  {}",
                f.metadata.name.as_deref().unwrap_or_default(),
                status.file_count.unwrap_or(0),
                human_size(status.size.unwrap_or(0)),
                status.digest.as_deref().unwrap_or("(not pushed)")
            ));
        }
        out
    });
    Ok(())
}

/// `errand filesets delete NAME`: the catalog entry only; stored blobs stay for executions that pinned them.
pub fn delete_fileset(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    objects(
        target,
        ObjectKind::Fileset,
        Some(&CatalogAction::Delete {
            name: name.to_owned(),
        }),
        output,
    )
}
