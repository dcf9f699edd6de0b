//! `errand filesets push|list|delete`: directories stored as Filesets.

use std::path::{Path, PathBuf};

use super::objects::delete_object;
use crate::cli::answers::PushedFilesetAnswer;
use crate::cli::output::{Format, human_size, print_ok};
use crate::local::ObjectKind;
use crate::ops::Error;
use crate::ops::backend::Backend;

/// `errand filesets ...`
#[derive(Debug, clap::Subcommand)]
pub enum FilesetsAction {
    /// Pack a directory and store it as the Fileset's new content.
    Push {
        /// Fileset name.
        name: String,
        /// Directory to pack.
        dir: PathBuf,
    },
    /// List Filesets.
    List,
    /// Delete a Fileset (executions keep the content they pinned).
    Delete {
        /// Fileset name.
        name: String,
    },
}

impl FilesetsAction {
    /// Runs the subcommand.
    pub async fn exec(self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        match self {
            FilesetsAction::Push { name, dir } => push(backend, &name, &dir, format).await,
            FilesetsAction::List => list(backend, format).await,
            FilesetsAction::Delete { name } => {
                delete_object(backend, ObjectKind::Fileset, &name, format).await
            }
        }
    }
}

/// `errand filesets push NAME DIR`.
async fn push(backend: &dyn Backend, name: &str, dir: &Path, format: Format) -> Result<(), Error> {
    crate::resolve::object_name(name).map_err(|e| Error::argument(format!("fileset name: {e}")))?;
    if !dir.is_dir() {
        return Err(Error::argument(format!(
            "{}: not a directory",
            dir.display()
        )));
    }
    let status = backend.push_fileset(Some(name), dir).await?.status;
    let answer = PushedFilesetAnswer {
        name: name.to_owned(),
        status,
    };
    let status = &answer.status;
    print_ok(format, "fileset", &answer, || {
        format!(
            "fileset {name} pushed: {} files, {}, {}",
            status.file_count.unwrap_or(0),
            human_size(status.size.unwrap_or(0)),
            status.digest.as_deref().unwrap_or_default()
        )
    });
    Ok(())
}

/// `errand filesets list`.
async fn list(backend: &dyn Backend, format: Format) -> Result<(), Error> {
    let filesets = backend.filesets().await?;
    print_ok(format, "filesets", &filesets, || {
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
