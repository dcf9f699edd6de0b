//! The local backend's own files: owner-only directories (0700) and owner-only files (0600) replaced atomically, as kubectl keeps a kubeconfig.
//!
//! Secrets, snapshots (which may hold an inline config's API keys) and records all go through
//! here, so none of them is ever readable by another user.

use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Creates `dir` and its missing parents, each readable by the owner only.
pub(super) fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Creates the directory `dir` (its parent must exist), readable by the owner only; fails with
/// `AlreadyExists` when it does.
pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// Creates (or truncates) `path` for writing, readable by the owner only.
pub(super) fn create_private_file(path: &Path) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so readers never see half a
/// file. The temporary name is short whatever the final name is, so every name that fits the
/// file system (a 253-character Kubernetes name does) can be written. There is no fsync:
/// records are rewritten several times per run and a lost update after a power cut costs
/// nothing that the stored results do not also hold.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("path has no parent"))?;
    create_private_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    ));
    let written = create_private_file(&tmp)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The names of the directories in `dir` that hold a file named `file`, sorted (none when
/// `dir` does not exist).
pub fn names_holding(dir: &Path, file: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().join(file).exists())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Removes `dir` with everything in it; a directory that is gone already is removed.
pub fn remove_all(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Why the files of one named local object (a deployment, a schedule) could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ObjectFilesError {
    /// No object of this kind has this name.
    #[error("no {kind} named {name:?} in namespace {namespace:?}")]
    NotFound {
        /// The kind (`AgentDeployment`).
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// The namespace.
        namespace: String,
    },
    /// An object of this kind with this name exists already.
    #[error("{kind} {name:?} already exists in namespace {namespace:?}")]
    AlreadyExists {
        /// The kind.
        kind: &'static str,
        /// The name.
        name: String,
        /// The namespace.
        namespace: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// [`write_private`] for a record.
pub fn write_record(path: &Path, bytes: &[u8]) -> Result<(), ObjectFilesError> {
    write_private(path, bytes).map_err(|e| ObjectFilesError::Io {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// [`read_json`] for a record.
pub fn read_record<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ObjectFilesError> {
    read_json(path).map_err(|error| ObjectFilesError::Io {
        path: path.to_owned(),
        message: error.to_string(),
    })
}

/// [`remove_all`] for a record's directory.
pub fn remove_record(dir: &Path) -> Result<(), ObjectFilesError> {
    remove_all(dir).map_err(|e| ObjectFilesError::Io {
        path: dir.to_owned(),
        message: e.to_string(),
    })
}

/// The JSON document in `path`, or why it could not be read.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, JsonFileError> {
    let bytes = std::fs::read(path)?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// Why a JSON file could not be read: the system's or the parser's own words.
#[derive(Debug, thiserror::Error)]
pub enum JsonFileError {
    /// The file could not be read.
    #[error(transparent)]
    Read(#[from] std::io::Error),
    /// It is not the JSON document expected.
    #[error(transparent)]
    Parse(#[from] serde_json::Error),
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_and_directories_are_owner_only_and_long_names_fit() {
        let root = tempfile::tempdir().unwrap();
        let name = "n".repeat(253);
        let path = root.path().join("a/b").join(&name);
        write_private(&path, b"{}").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&root.path().join("a")), 0o700);
        assert_eq!(mode(&root.path().join("a/b")), 0o700);
        let left: Vec<_> = std::fs::read_dir(root.path().join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            [std::ffi::OsString::from(name)],
            "no temporary file left"
        );
    }
}
