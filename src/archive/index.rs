//! The path index of an archive: every path it holds, so that a subpath can be checked at admission without reading the archive itself.

use serde::{Deserialize, Serialize};

/// Every path of an archive, directories with a trailing `/`, sorted by bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathIndex {
    paths: Vec<String>,
}

impl PathIndex {
    /// The index of `paths` as packing names them.
    pub fn new(mut paths: Vec<String>) -> PathIndex {
        paths.sort_unstable();
        paths.dedup();
        PathIndex { paths }
    }

    /// Whether extracting `subpath` (`docs/`, `config/app.json`, `./a//b`) finds anything: the
    /// path itself as a file or directory, or anything under it.
    pub fn contains(&self, subpath: &str) -> bool {
        let parts: Vec<&str> = subpath
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .collect();
        if parts.is_empty() {
            return true;
        }
        let path = parts.join("/");
        let dir = format!("{path}/");
        if self.paths.binary_search(&path).is_ok() {
            return true;
        }
        let from = self.paths.partition_point(|p| p.as_str() < dir.as_str());
        self.paths.get(from).is_some_and(|p| p.starts_with(&dir))
    }

    /// How many paths the index holds.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_files_directories_and_what_is_under_them() {
        let index = PathIndex::new(
            [
                "src/",
                "src/main.py",
                "README.md",
                "data/sets/a.csv",
                "src-old/x",
            ]
            .map(str::to_owned)
            .to_vec(),
        );
        for present in [
            "src",
            "src/",
            "./src//main.py",
            "README.md",
            "data",
            "data/sets/",
            "",
        ] {
            assert!(index.contains(present), "{present}");
        }
        for missing in ["no-such-dir/", "sr", "src/main", "README.md/x", "data/set"] {
            assert!(!index.contains(missing), "{missing}");
        }
    }
}
