//! The catalog: `errand apply -f`, and `agents`, `environments`, `runtimes` and `extensions` (list, create an Agent, delete one).

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::cli::answers::DeletedObject;
use crate::cli::output::{Format, print_ok};
use crate::local::{ObjectKind, manifest_documents, read_manifest_file};
use crate::ops::backend::{Backend, Document};
use crate::ops::lookup::{Wanted, object_names};
use crate::ops::{Error, ErrorCode};

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

/// Flags of `errand apply`.
#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// Manifest files (YAML or JSON, several documents each).
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
}

impl ApplyArgs {
    /// `errand apply -f FILE...`: every document of every file, all or nothing.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let files = &self.files;
        let mut documents = Vec::new();
        for file in files {
            let text = read_manifest_file(file).map_err(|e| Error::manifest_file("-f", e))?;
            let source = file.display().to_string();
            let objects = manifest_documents(&text, &source)?;
            documents.extend(
                objects
                    .into_iter()
                    .enumerate()
                    .map(|(index, object)| Document {
                        source: format!("{source}: document {}", index + 1),
                        object,
                    }),
            );
        }
        let applied = backend.apply(&documents).await?;
        print_ok(format, "applied", &applied, || {
            applied
                .iter()
                .map(|a| format!("{}/{} applied", a.kind.to_lowercase(), a.name))
                .collect::<Vec<_>>()
                .join("\n")
        });
        Ok(())
    }
}

/// Flags of `errand agents`, `environments`, `runtimes` and `extensions`.
#[derive(Debug, clap::Args)]
pub struct CatalogArgs {
    #[command(subcommand)]
    pub action: Option<CatalogAction>,
}

impl CatalogArgs {
    /// `errand agents` / `errand environments` / `errand runtimes`: list, create (Agents), or
    /// delete one.
    pub async fn exec(
        &self,
        backend: &dyn Backend,
        kind: ObjectKind,
        format: Format,
    ) -> Result<(), Error> {
        let action = self.action.as_ref();
        match action.unwrap_or(&CatalogAction::List) {
            CatalogAction::List => {
                let objects = backend.objects(kind).await?;
                print_ok(format, kind.plural(), &objects, || {
                    objects
                        .iter()
                        .filter_map(|o| o["metadata"]["name"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n")
                });
            }
            CatalogAction::Create { name, agent_config } if kind == ObjectKind::Agent => {
                let document = agent_from_config(name, agent_config)?;
                let applied = backend.apply(&[document]).await?;
                print_ok(format, "created", &applied.first(), || {
                    format!("agent/{name} created")
                });
            }
            CatalogAction::Create { .. } => {
                return Err(Error::argument(format!(
                    "create makes Agents only; apply {} manifests with `errand apply -f`",
                    kind.plural()
                )));
            }
            CatalogAction::Delete { name } => delete_object(backend, kind, name, format).await?,
        }
        Ok(())
    }
}

/// The Agent `name` wrapping the bare agent config in `file`, to apply as `apply` applies one.
pub(super) fn agent_from_config(name: &str, file: &Path) -> Result<Document, Error> {
    let text = read_manifest_file(file).map_err(|e| Error::manifest_file("--agent-config", e))?;
    let source = format!("--agent-config {}", file.display());
    let config = crate::local::yaml_document(&text, "--agent-config")
        .map_err(|reason| Error::new(ErrorCode::InvalidManifest, format!("{source}: {reason}")))?;
    if config.get("kind").is_some() || config.get("apiVersion").is_some() {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            format!(
                "{source}: --agent-config takes a bare agent config (config_format, name, ...), not a manifest; apply manifests with `errand apply -f`"
            ),
        ));
    }
    Ok(Document {
        source,
        object: json!({
            "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
            "metadata": {"name": name}, "spec": {"config": config},
        }),
    })
}

/// Deletes one Agent, AgentEnvironment, AgentRuntime or Fileset.
pub(super) async fn delete_object(
    backend: &dyn Backend,
    kind: ObjectKind,
    name: &str,
    format: Format,
) -> Result<(), Error> {
    if let Err(error) = backend.delete_object(kind, name).await {
        let existing = object_names(backend, kind).await;
        return Err(Wanted::object(kind, backend.namespace()).listing(error, name, existing));
    }
    let answer = DeletedObject {
        kind: kind.kind(),
        name: name.to_owned(),
    };
    print_ok(format, "deleted", &answer, || {
        format!("{} {name} deleted", kind.kind())
    });
    Ok(())
}
