//! The store's key layout (DESIGN.md §3), as pure functions that validate every segment.
//!
//! `filesets/<ns>/<sha256>.tar.gz` and `results/<ns>/<execution>/<uid>/<result>`. A segment that
//! could change the shape of a key (a `/`, `..`, an empty string, characters outside the
//! Kubernetes name alphabet) is refused, so a key built here always addresses what it says.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A key segment that does not fit the layout.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// The segment is empty, too long, or has characters outside the allowed alphabet.
    #[error("invalid {what} {value:?} in a store key: {reason}")]
    InvalidSegment {
        /// Which part of the key (namespace, execution, uid, digest).
        what: &'static str,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },
}

/// Top-level prefix of all fileset blobs.
const FILESETS: &str = "filesets";
/// Top-level prefix of all execution results.
const RESULTS: &str = "results";
/// Top-level prefix of in-flight fileset uploads, kept apart so listings of `filesets/` only
/// ever show complete, content-addressed blobs.
const UPLOADS: &str = "uploads";
/// Top-level prefix of objects still being written to a `file://` store: each is streamed to
/// `partial/<key>.<token>` and linked to its key only once complete, so a listing of
/// `filesets/` or `results/` never shows a partial object.
const PARTIAL: &str = "partial";

/// The results an execution saves, one object each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultName {
    /// The working directory after staging, before the agent starts (tar.gz).
    InputWorkdir,
    /// The working directory as the agent left it (tar.gz).
    OutputWorkdir,
    /// The agent's artifacts directory plus `stdout.log` and `stderr.log` (tar.gz).
    OutputArtifacts,
    /// The JSON record of a completed run.
    RunResult,
    /// The JSON record of a run that could not start, timed out or was cancelled.
    RunError,
    /// Name, size and sha256 of every other result (JSON).
    Manifest,
}

impl ResultName {
    /// Every result name, in the order a run saves them.
    pub const ALL: [ResultName; 6] = [
        ResultName::InputWorkdir,
        ResultName::OutputWorkdir,
        ResultName::OutputArtifacts,
        ResultName::RunResult,
        ResultName::RunError,
        ResultName::Manifest,
    ];

    /// The last key segment, which is also the name users pass to `results download`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResultName::InputWorkdir => "input_workdir",
            ResultName::OutputWorkdir => "output_workdir",
            ResultName::OutputArtifacts => "output_artifacts",
            ResultName::RunResult => "run_result",
            ResultName::RunError => "run_error",
            ResultName::Manifest => "manifest.json",
        }
    }

    /// The result with this name, if there is one.
    pub fn parse(name: &str) -> Option<ResultName> {
        ResultName::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// Whether the result is a directory as a `tar.gz` (else it is a JSON document).
    pub fn is_archive(self) -> bool {
        matches!(
            self,
            ResultName::InputWorkdir | ResultName::OutputWorkdir | ResultName::OutputArtifacts
        )
    }

    /// The file name a download of the result gets by default.
    pub fn file_name(self) -> String {
        match self {
            _ if self.is_archive() => format!("{}.tar.gz", self.as_str()),
            ResultName::Manifest => self.as_str().to_owned(),
            _ => format!("{}.json", self.as_str()),
        }
    }
}

impl fmt::Display for ResultName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A result by the name users give it: one of errand's own, or one an extension declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyResult {
    /// One of errand's own results.
    Errand(ResultName),
    /// A result an execution's extension declared (`analysis-report`).
    Extension(String),
}

impl AnyResult {
    /// The result called `name`, if it can be one.
    pub fn parse(name: &str) -> Option<AnyResult> {
        ResultName::parse(name).map(AnyResult::Errand).or_else(|| {
            crate::resolve::extension_result_name(name)
                .ok()
                .map(|()| AnyResult::Extension(name.to_owned()))
        })
    }

    /// The name users pass to `results download`.
    pub fn as_str(&self) -> &str {
        match self {
            AnyResult::Errand(name) => name.as_str(),
            AnyResult::Extension(name) => name,
        }
    }

    /// Its store key among `execution`'s results.
    pub fn key(&self, execution: &ExecutionId) -> Result<String, KeyError> {
        match self {
            AnyResult::Errand(name) => result(execution, *name),
            AnyResult::Extension(name) => extension_result(execution, name),
        }
    }

    /// The file name a download gets by default (an extension's result keeps its name).
    pub fn file_name(&self) -> String {
        match self {
            AnyResult::Errand(name) => name.file_name(),
            AnyResult::Extension(name) => name.clone(),
        }
    }
}

/// Which execution a set of results belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionId {
    /// Namespace (workspace) of the execution.
    pub namespace: String,
    /// The execution's name.
    pub name: String,
    /// The execution's uid, which keeps a re-created execution of the same name apart.
    pub uid: String,
}

/// `filesets/<ns>/<digest>.tar.gz`
pub fn fileset(namespace: &str, digest: &str) -> Result<String, KeyError> {
    check_name("namespace", namespace)?;
    check_digest(digest)?;
    Ok(format!("{FILESETS}/{namespace}/{digest}.tar.gz"))
}

/// `filesets/<ns>/<digest>.paths.json.gz`: the path index of a fileset blob, written beside it
/// at push time.
pub fn fileset_paths(namespace: &str, digest: &str) -> Result<String, KeyError> {
    check_name("namespace", namespace)?;
    check_digest(digest)?;
    Ok(format!("{FILESETS}/{namespace}/{digest}.paths.json.gz"))
}

/// `filesets/<ns>/`: every fileset blob of a namespace.
pub fn filesets_prefix(namespace: &str) -> Result<String, KeyError> {
    check_name("namespace", namespace)?;
    Ok(format!("{FILESETS}/{namespace}/"))
}

/// `uploads/<ns>/<token>.tar.gz`: where a fileset is streamed before its digest is known.
pub fn fileset_upload(namespace: &str, token: &str) -> Result<String, KeyError> {
    check_name("namespace", namespace)?;
    check_name("upload token", token)?;
    Ok(format!("{UPLOADS}/{namespace}/{token}.tar.gz"))
}

/// `partial/<key>.<token>`: where `key` is written until it is complete.
pub fn partial(key: &str, token: &str) -> Result<String, KeyError> {
    check_name("upload token", token)?;
    Ok(format!("{PARTIAL}/{key}.{token}"))
}

/// `partial/<prefix>`: the partial writes of every object under `prefix`.
pub fn partials_prefix(prefix: &str) -> String {
    format!("{PARTIAL}/{prefix}")
}

/// `results/<ns>/<execution>/<uid>/`: every result of one execution.
pub fn results_prefix(execution: &ExecutionId) -> Result<String, KeyError> {
    check_name("namespace", &execution.namespace)?;
    check_name("execution name", &execution.name)?;
    check_uid(&execution.uid)?;
    Ok(format!(
        "{RESULTS}/{}/{}/{}/",
        execution.namespace, execution.name, execution.uid
    ))
}

/// `results/<ns>/<execution>/<uid>/<result>`
pub fn result(execution: &ExecutionId, result: ResultName) -> Result<String, KeyError> {
    Ok(format!("{}{}", results_prefix(execution)?, result.as_str()))
}

/// `results/<ns>/<execution>/<uid>/<name>`: a result an extension declared (`analysis-report`),
/// never one of errand's own names.
pub fn extension_result(execution: &ExecutionId, name: &str) -> Result<String, KeyError> {
    if let Err(reason) = crate::resolve::extension_result_name(name) {
        tracing::debug!(%reason, "refused an extension result name");
        return Err(KeyError::InvalidSegment {
            what: "extension result",
            value: name.to_owned(),
            reason: "must be a declared extension result name, not one of errand's own",
        });
    }
    Ok(format!("{}{name}", results_prefix(execution)?))
}

/// A Kubernetes object name or namespace, checked by the one object-name rule (a namespace is
/// a stricter DNS label, checked where it is given).
fn check_name(what: &'static str, value: &str) -> Result<(), KeyError> {
    crate::resolve::object_name(value).map_err(|reason| {
        tracing::debug!(%reason, "refused a store key segment");
        KeyError::InvalidSegment {
            what,
            value: value.to_owned(),
            reason: "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', each \
                     dot-separated part starting and ending with a letter or digit, at most 253 \
                     characters",
        }
    })
}

/// A Kubernetes uid (a UUID); locally generated ids use the same alphabet.
fn check_uid(value: &str) -> Result<(), KeyError> {
    let invalid = |reason| KeyError::InvalidSegment {
        what: "uid",
        value: value.to_owned(),
        reason,
    };
    if value.is_empty() || value.len() > 64 {
        return Err(invalid("must be 1 to 64 characters"));
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(invalid("only letters, digits and '-' are allowed"));
    }
    Ok(())
}

/// A lowercase hex sha256.
fn check_digest(value: &str) -> Result<(), KeyError> {
    if value.len() != 64
        || !value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(KeyError::InvalidSegment {
            what: "digest",
            value: value.to_owned(),
            reason: "must be 64 lowercase hex characters (sha256)",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_design() {
        let digest = "a".repeat(64);
        assert_eq!(
            fileset("team-a", &digest).unwrap(),
            format!("filesets/team-a/{digest}.tar.gz")
        );
        assert_eq!(
            result(&ExecutionId::test(), ResultName::OutputWorkdir).unwrap(),
            "results/team-a/calc/0d9f6a52-1111-2222-3333-444455556666/output_workdir"
        );
        assert_eq!(
            result(&ExecutionId::test(), ResultName::Manifest).unwrap(),
            "results/team-a/calc/0d9f6a52-1111-2222-3333-444455556666/manifest.json"
        );
        assert_eq!(filesets_prefix("team-a").unwrap(), "filesets/team-a/");
        let key = result(&ExecutionId::test(), ResultName::OutputWorkdir).unwrap();
        assert_eq!(
            partial(&key, "1-2-3").unwrap(),
            format!("partial/{key}.1-2-3")
        );
        assert!(
            partial(&key, "1-2-3")
                .unwrap()
                .starts_with(&partials_prefix(
                    &results_prefix(&ExecutionId::test()).unwrap()
                )),
            "a result's partial writes are under its execution's partials prefix"
        );
        assert!(err_names(partial(&key, "../x"), "upload token"));
    }

    #[test]
    fn segments_that_change_the_key_shape_are_refused() {
        for ns in ["", "..", "a/b", "A", "-a", "a-", "a b"] {
            let err = filesets_prefix(ns).unwrap_err();
            assert!(
                matches!(&err, KeyError::InvalidSegment { what: "namespace", value, .. } if value == ns),
                "{ns:?}: {err}"
            );
        }
        let mut bad = ExecutionId::test();
        bad.uid = "../x".into();
        assert!(err_names(results_prefix(&bad), "uid"));
        bad = ExecutionId::test();
        bad.name = "x/y".into();
        assert!(err_names(results_prefix(&bad), "execution name"));
        assert!(err_names(fileset("ns", &"A".repeat(64)), "digest"));
        assert!(err_names(fileset("ns", "abc"), "digest"));
    }

    fn err_names(r: Result<String, KeyError>, expected: &str) -> bool {
        matches!(r, Err(KeyError::InvalidSegment { what, .. }) if what == expected)
    }

    #[test]
    fn result_names_round_trip() {
        for name in ResultName::ALL {
            assert_eq!(ResultName::parse(name.as_str()), Some(name));
        }
        assert_eq!(ResultName::parse("nope"), None);
    }

    #[test]
    fn an_extension_result_is_keyed_beside_errands_own_and_never_as_one_of_them() {
        let execution = ExecutionId {
            namespace: "team-a".into(),
            name: "calc".into(),
            uid: "00000000-0000-0000-0000-000000000001".into(),
        };
        assert_eq!(
            AnyResult::parse("analysis-report")
                .unwrap()
                .key(&execution)
                .unwrap(),
            "results/team-a/calc/00000000-0000-0000-0000-000000000001/analysis-report"
        );
        assert_eq!(
            AnyResult::parse("run_result"),
            Some(AnyResult::Errand(ResultName::RunResult))
        );
        assert_eq!(AnyResult::parse("../x"), None);
        assert!(extension_result(&execution, "manifest.json").is_err());
        assert!(extension_result(&execution, "a/b").is_err());
        assert_eq!(
            crate::api::contract::RESULT_NAMES.to_vec(),
            ResultName::ALL.map(ResultName::as_str).to_vec(),
            "the contract lists errand's own results"
        );
    }
}
