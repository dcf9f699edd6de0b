//! The single-value rules of admission: names, paths, mount sets, environment variable names, formats.

use crate::api::MAX_TTL_SECONDS_AFTER_FINISHED;
use crate::api::contract::{RESERVED_ENV_NAMES, RESERVED_ENV_PREFIX};

/// Why a single value is refused: a lifetime, a name, a path, an environment variable name or
/// a Secret key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidValue {
    /// A lifetime outside 0 to [`MAX_TTL_SECONDS_AFTER_FINISHED`].
    #[error("{seconds} is out of range: 0 to {MAX_TTL_SECONDS_AFTER_FINISHED} (366 days)")]
    LifetimeOutOfRange {
        /// The lifetime given.
        seconds: i64,
    },
    /// Not a DNS-1123 subdomain.
    #[error(
        "{name:?} is not a valid name (a DNS-1123 subdomain: lowercase letters, digits, '-' \
         and '.', each dot-separated part starting and ending with a letter or digit, at \
         most {DNS_SUBDOMAIN_MAX} characters)"
    )]
    ObjectName {
        /// The name given.
        name: String,
    },
    /// Not a DNS-1123 label.
    #[error(
        "{name:?} is not a valid namespace (a DNS-1123 label: lowercase letters, digits and \
         '-', starting and ending with a letter or digit, at most {DNS_LABEL_MAX} characters)"
    )]
    NamespaceName {
        /// The name given.
        name: String,
    },
    /// An empty path.
    #[error("path must not be empty")]
    EmptyPath,
    /// A path with a leading `/`.
    #[error("{path:?} must be relative (no leading '/')")]
    AbsolutePath {
        /// The path given.
        path: String,
    },
    /// A path with a `..` segment.
    #[error("{path:?} must not contain '..'")]
    ParentSegment {
        /// The path given.
        path: String,
    },
    /// A path with an empty or `.` segment.
    #[error("{path:?} must not contain empty or '.' segments")]
    EmptySegment {
        /// The path given.
        path: String,
    },
    /// Not a C identifier.
    #[error("{name:?} is not a valid environment variable name")]
    EnvName {
        /// The name given.
        name: String,
    },
    /// A name the runner owns.
    #[error("{name:?} is reserved for errand's runner (ERRAND_* and {reserved})", reserved = one_of(&RESERVED_ENV_NAMES))]
    ReservedEnvName {
        /// The name given.
        name: String,
    },
    /// Not a Secret key name.
    #[error("{key:?} is not a valid Secret key")]
    SecretKey {
        /// The key given.
        key: String,
    },
}

/// Why no installed cluster-scoped object serves a kind: what is installed instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotServing {
    /// Nothing of this sort is installed.
    #[error("no {what} is installed")]
    NoneInstalled {
        /// What is looked for (`runtime`).
        what: String,
    },
    /// Objects of other kinds are installed.
    #[error("installed kinds: {}", one_of(&kinds.iter().map(String::as_str).collect::<Vec<_>>()))]
    OtherKinds {
        /// The kinds installed, sorted, each once.
        kinds: Vec<String>,
    },
}

/// Model providers errand can wire up, checked on the config after the environment is merged.
pub const SUPPORTED_PROVIDERS: [&str; 9] = [
    "anthropic",
    "azure_openai",
    "bedrock",
    "google",
    "nvidia",
    "ollama",
    "openai",
    "openai_compatible",
    "vertex",
];

/// The first by name of the `installed` cluster-scoped objects (name, spec) whose kind
/// (`kind_of`) is `kind`; else, for the refusal, what is installed: `installed kinds: a, b`, or
/// `no {what} is installed`.
pub fn first_serving<'a, T>(
    installed: &'a [(String, T)],
    kind: &str,
    kind_of: impl Fn(&T) -> &str,
    what: &str,
) -> Result<&'a (String, T), NotServing> {
    let mut serving: Vec<&(String, T)> = installed
        .iter()
        .filter(|(_, spec)| kind_of(spec) == kind)
        .collect();
    serving.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(first) = serving.first() {
        return Ok(first);
    }
    let mut kinds: Vec<&str> = installed.iter().map(|(_, spec)| kind_of(spec)).collect();
    kinds.sort_unstable();
    kinds.dedup();
    Err(if kinds.is_empty() {
        NotServing::NoneInstalled {
            what: what.to_owned(),
        }
    } else {
        NotServing::OtherKinds {
            kinds: kinds.into_iter().map(str::to_owned).collect(),
        }
    })
}

/// Renders a list of accepted values for a message.
pub fn one_of(values: &[&str]) -> String {
    values.join(", ")
}

/// Checks how long a finished execution is kept: 0 (delete at once) to 366 days.
pub fn lifetime_seconds(seconds: i64) -> Result<(), InvalidValue> {
    if (0..=MAX_TTL_SECONDS_AFTER_FINISHED).contains(&seconds) {
        return Ok(());
    }
    Err(InvalidValue::LifetimeOutOfRange { seconds })
}

/// Whether `name` starts and ends with an ASCII letter or digit, as Kubernetes names do.
pub fn alphanumeric_ends(name: &str) -> bool {
    let alphanumeric = |b: &u8| b.is_ascii_alphanumeric();
    name.as_bytes().first().is_some_and(alphanumeric)
        && name.as_bytes().last().is_some_and(alphanumeric)
}

/// Longest DNS-1123 subdomain: an object name, a class or Secret name, a label key's prefix.
pub const DNS_SUBDOMAIN_MAX: usize = 253;
/// Longest DNS-1123 label: a namespace name, a label value.
pub const DNS_LABEL_MAX: usize = 63;

/// Whether `label` is a DNS-1123 label of at most `max` characters: lowercase letters, digits
/// and `-`, starting and ending with a letter or digit.
fn is_dns_label(label: &str, max: usize) -> bool {
    label.len() <= max
        && alphanumeric_ends(label)
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Checks a Kubernetes object name as the API server does for every errand kind, a Secret, a
/// class or a ServiceAccount: a DNS-1123 subdomain, dot-separated DNS labels, at most 253
/// characters (so `a..b`, `a.-b` and `a-.b` are refused). The one check of this name kind;
/// every entry point (apply, push, `--name`, references) calls it.
pub fn object_name(name: &str) -> Result<(), InvalidValue> {
    if name.is_empty()
        || name.len() > DNS_SUBDOMAIN_MAX
        || !name
            .split('.')
            .all(|label| is_dns_label(label, DNS_SUBDOMAIN_MAX))
    {
        return Err(InvalidValue::ObjectName {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Checks a namespace (workspace) name as the API server does: a DNS-1123 label, at most 63
/// characters, no dots. The one check of this name kind.
pub fn namespace_name(name: &str) -> Result<(), InvalidValue> {
    if !is_dns_label(name, DNS_LABEL_MAX) {
        return Err(InvalidValue::NamespaceName {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Checks a path inside a directory tree: relative, no empty, `.` or `..` segments.
/// One trailing `/` is allowed (it marks a directory).
pub fn relative_path(path: &str) -> Result<(), InvalidValue> {
    let path_of = || path.to_owned();
    if path.is_empty() {
        return Err(InvalidValue::EmptyPath);
    }
    if path.starts_with('/') {
        return Err(InvalidValue::AbsolutePath { path: path_of() });
    }
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    if trimmed.split('/').any(|s| s == "..") {
        return Err(InvalidValue::ParentSegment { path: path_of() });
    }
    if trimmed.split('/').any(|s| s.is_empty() || s == ".") {
        return Err(InvalidValue::EmptySegment { path: path_of() });
    }
    Ok(())
}

/// Checks a set of mount paths: each relative without a trailing `/`, and no two equal or
/// nested in each other. Returns (index, message) for each bad entry.
pub fn mount_paths(paths: &[&str]) -> Vec<(usize, String)> {
    let mut bad = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        if path.ends_with('/') && !path.is_empty() {
            bad.push((i, format!("{path:?} must not end in '/'")));
        } else if let Err(invalid) = relative_path(path) {
            bad.push((i, invalid.to_string()));
        }
    }
    for (i, a) in paths.iter().enumerate() {
        for (j, b) in paths.iter().enumerate().skip(i + 1) {
            if nested(a, b) || nested(b, a) {
                bad.push((
                    j,
                    format!("{b:?} overlaps mount path {a:?} (artifactMounts[{i}])"),
                ));
            }
        }
    }
    bad
}

/// Whether `inner` is `outer` or below it.
fn nested(outer: &str, inner: &str) -> bool {
    inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether the runner owns this environment variable name.
pub fn is_reserved_env(name: &str) -> bool {
    name.starts_with(RESERVED_ENV_PREFIX) || RESERVED_ENV_NAMES.contains(&name)
}

/// Checks an environment variable name: a C identifier the runner does not own.
pub fn env_name(name: &str) -> Result<(), InvalidValue> {
    let identifier = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !identifier {
        return Err(InvalidValue::EnvName {
            name: name.to_owned(),
        });
    }
    if is_reserved_env(name) {
        return Err(InvalidValue::ReservedEnvName {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Checks a Secret key name.
pub fn secret_key(key: &str) -> Result<(), InvalidValue> {
    let valid = !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(InvalidValue::SecretKey {
            key: key.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names() {
        assert!(object_name("calc-1.v2").is_ok());
        assert_eq!(
            object_name("Calc_1").unwrap_err().to_string(),
            "\"Calc_1\" is not a valid name (a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit, at most 253 characters)"
        );
        assert!(object_name("").is_err());
        assert!(object_name("-a").is_err());
    }

    #[test]
    fn relative_paths() {
        assert!(relative_path("src/lib/").is_ok());
        assert_eq!(
            relative_path("/etc").unwrap_err().to_string(),
            "\"/etc\" must be relative (no leading '/')"
        );
        assert_eq!(
            relative_path("a/../b").unwrap_err().to_string(),
            "\"a/../b\" must not contain '..'"
        );
        assert_eq!(
            relative_path("a//b").unwrap_err().to_string(),
            "\"a//b\" must not contain empty or '.' segments"
        );
        assert_eq!(
            relative_path("./a").unwrap_err().to_string(),
            "\"./a\" must not contain empty or '.' segments"
        );
    }

    #[test]
    fn overlapping_mounts_name_both() {
        assert_eq!(
            mount_paths(&["data", "data/raw", "other"]),
            vec![(
                1,
                "\"data/raw\" overlaps mount path \"data\" (artifactMounts[0])".to_string()
            )]
        );
        assert_eq!(mount_paths(&["data", "database"]), vec![]);
        assert_eq!(
            mount_paths(&["x/"]),
            vec![(0, "\"x/\" must not end in '/'".to_string())]
        );
    }

    #[test]
    fn env_names() {
        assert!(env_name("OPENAI_API_KEY").is_ok());
        assert_eq!(
            env_name("AGENT_CONFIG_PATH").unwrap_err().to_string(),
            "\"AGENT_CONFIG_PATH\" is reserved for errand's runner (ERRAND_* and AGENT_CONFIG_PATH)"
        );
        assert!(env_name("ERRAND_INPUT").is_err());
        assert_eq!(
            env_name("1X").unwrap_err().to_string(),
            "\"1X\" is not a valid environment variable name"
        );
    }
}
