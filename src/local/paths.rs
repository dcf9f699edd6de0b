//! Where the local backend keeps its files.

use std::path::{Path, PathBuf};

/// The local data directory: `$ERRAND_HOME`, else `$XDG_DATA_HOME/errand`, else `~/.local/share/errand`, else (no `$HOME`) `/tmp/errand-<uid>`, which must be this user's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
    /// Whether the directory is in a place every user can write (`/tmp`), where another user
    /// could have made it first.
    in_shared_place: bool,
}

impl DataDir {
    /// The data directory at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            in_shared_place: false,
        }
    }

    /// The data directory chosen by the environment.
    pub fn from_env() -> Self {
        if let Some(home) = std::env::var_os("ERRAND_HOME") {
            return Self::new(home);
        }
        let data = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")));
        match data {
            Some(data) => Self::new(data.join("errand")),
            None => Self {
                root: PathBuf::from(format!("/tmp/errand-{}", nix::unistd::getuid())),
                in_shared_place: true,
            },
        }
    }

    /// Creates the directory, readable by its owner only, when it does not exist yet (one that
    /// exists is left as it is). In `/tmp` it must then be this user's and closed to others:
    /// another user could have made it first, to read or plant what errand keeps there.
    pub fn create(&self) -> std::io::Result<()> {
        super::files::create_private_dir_all(&self.root)?;
        if self.in_shared_place {
            use std::os::unix::fs::MetadataExt;
            let metadata = std::fs::symlink_metadata(&self.root)?;
            let problem = shared_dir_problem(
                metadata.is_dir(),
                metadata.uid(),
                metadata.mode(),
                nix::unistd::getuid().as_raw(),
            );
            if let Some(problem) = problem {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{}: {problem}; another user may have made it: set ERRAND_HOME (or HOME) \
                         to a directory of your own",
                        self.root.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The default store: `file://<root>/store`.
    pub fn default_store_url(&self) -> String {
        format!("file://{}", self.root.join("store").display())
    }

    /// The namespaces' applied objects.
    pub fn all_catalogs(&self) -> PathBuf {
        self.root.join("catalog")
    }

    /// Applied objects of `kind` in `namespace`.
    pub fn catalog(&self, namespace: &str, kind: &str) -> PathBuf {
        self.all_catalogs().join(namespace).join(kind)
    }

    /// The namespaces' execution directories.
    pub fn all_executions(&self) -> PathBuf {
        self.root.join("executions")
    }

    /// All execution directories of `namespace`.
    pub fn executions(&self, namespace: &str) -> PathBuf {
        self.all_executions().join(namespace)
    }

    /// The automatic gc's limits, when they are set (`errand gc --automatic`).
    pub fn automatic_gc(&self) -> PathBuf {
        self.root.join("gc.json")
    }

    /// The directory of one execution: record, snapshot, workspace and scratch files.
    pub fn execution(&self, namespace: &str, name: &str) -> PathBuf {
        self.executions(namespace).join(name)
    }
}

/// What is wrong with a data directory in a shared place that is (`is_dir`) owned by `owner`
/// with `mode`, for user `me`; `None` when it is a directory of `me`'s, closed to others.
fn shared_dir_problem(is_dir: bool, owner: u32, mode: u32, me: u32) -> Option<String> {
    if !is_dir {
        return Some("it is not a directory (a symbolic link, say)".to_owned());
    }
    if owner != me {
        return Some(format!("it is owned by uid {owner}, not by you (uid {me})"));
    }
    if mode & 0o077 != 0 {
        return Some(format!(
            "its mode is {:o}, open to other users (it must be 700)",
            mode & 0o777
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_data_directory_must_be_ones_own_and_closed() {
        assert_eq!(shared_dir_problem(true, 1000, 0o40700, 1000), None);
        let other = shared_dir_problem(true, 0, 0o40700, 1000).unwrap();
        assert!(other.contains("owned by uid 0"), "{other}");
        let open = shared_dir_problem(true, 1000, 0o40755, 1000).unwrap();
        assert!(open.contains("755"), "{open}");
        assert!(shared_dir_problem(false, 1000, 0o120777, 1000).is_some());
    }

    #[test]
    fn a_data_directory_made_open_by_someone_else_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("errand-1");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let data = DataDir {
            root: root.clone(),
            in_shared_place: true,
        };
        let error = data.create().unwrap_err().to_string();
        assert!(error.contains("ERRAND_HOME"), "{error}");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        data.create().unwrap();
    }
}
