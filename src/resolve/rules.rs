//! The single-value rules of admission: names, paths, mount sets, environment variable names, formats.

use crate::api::MAX_TTL_SECONDS_AFTER_FINISHED;
use crate::api::contract::{RESERVED_ENV_NAMES, RESERVED_ENV_PREFIX};

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
) -> Result<&'a (String, T), String> {
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
        format!("no {what} is installed")
    } else {
        format!("installed kinds: {}", one_of(&kinds))
    })
}

/// Renders a list of accepted values for a message.
pub fn one_of(values: &[&str]) -> String {
    values.join(", ")
}

/// Checks how long a finished execution is kept: 0 (delete at once) to 366 days.
pub fn lifetime_seconds(seconds: i64) -> Result<(), String> {
    if (0..=MAX_TTL_SECONDS_AFTER_FINISHED).contains(&seconds) {
        return Ok(());
    }
    Err(format!(
        "{seconds} is out of range: 0 to {MAX_TTL_SECONDS_AFTER_FINISHED} (366 days)"
    ))
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
pub fn object_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > DNS_SUBDOMAIN_MAX
        || !name
            .split('.')
            .all(|label| is_dns_label(label, DNS_SUBDOMAIN_MAX))
    {
        return Err(format!(
            "{name:?} is not a valid name (a DNS-1123 subdomain: lowercase letters, digits, '-' \
             and '.', each dot-separated part starting and ending with a letter or digit, at \
             most {DNS_SUBDOMAIN_MAX} characters)"
        ));
    }
    Ok(())
}

/// Checks a namespace (workspace) name as the API server does: a DNS-1123 label, at most 63
/// characters, no dots. The one check of this name kind.
pub fn namespace_name(name: &str) -> Result<(), String> {
    if !is_dns_label(name, DNS_LABEL_MAX) {
        return Err(format!(
            "{name:?} is not a valid namespace (a DNS-1123 label: lowercase letters, digits and \
             '-', starting and ending with a letter or digit, at most {DNS_LABEL_MAX} characters)"
        ));
    }
    Ok(())
}

/// Checks a path inside a directory tree: relative, no empty, `.` or `..` segments.
/// One trailing `/` is allowed (it marks a directory).
pub fn relative_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("path must not be empty".into());
    }
    if path.starts_with('/') {
        return Err(format!("{path:?} must be relative (no leading '/')"));
    }
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    if trimmed.split('/').any(|s| s == "..") {
        return Err(format!("{path:?} must not contain '..'"));
    }
    if trimmed.split('/').any(|s| s.is_empty() || s == ".") {
        return Err(format!("{path:?} must not contain empty or '.' segments"));
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
        } else if let Err(message) = relative_path(path) {
            bad.push((i, message));
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
pub fn env_name(name: &str) -> Result<(), String> {
    let identifier = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !identifier {
        return Err(format!("{name:?} is not a valid environment variable name"));
    }
    if is_reserved_env(name) {
        return Err(format!(
            "{name:?} is reserved for errand's runner (ERRAND_* and {})",
            one_of(&RESERVED_ENV_NAMES)
        ));
    }
    Ok(())
}

/// Checks a Secret key name.
pub fn secret_key(key: &str) -> Result<(), String> {
    let valid = !key.is_empty()
        && key.len() <= 253
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if valid {
        Ok(())
    } else {
        Err(format!("{key:?} is not a valid Secret key"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names() {
        assert!(object_name("calc-1.v2").is_ok());
        assert_eq!(
            object_name("Calc_1").unwrap_err(),
            "\"Calc_1\" is not a valid name (a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit, at most 253 characters)"
        );
        assert!(object_name("").is_err());
        assert!(object_name("-a").is_err());
    }

    #[test]
    fn relative_paths() {
        assert!(relative_path("src/lib/").is_ok());
        assert_eq!(
            relative_path("/etc").unwrap_err(),
            "\"/etc\" must be relative (no leading '/')"
        );
        assert_eq!(
            relative_path("a/../b").unwrap_err(),
            "\"a/../b\" must not contain '..'"
        );
        assert_eq!(
            relative_path("a//b").unwrap_err(),
            "\"a//b\" must not contain empty or '.' segments"
        );
        assert_eq!(
            relative_path("./a").unwrap_err(),
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
            env_name("AGENT_CONFIG_PATH").unwrap_err(),
            "\"AGENT_CONFIG_PATH\" is reserved for errand's runner (ERRAND_* and AGENT_CONFIG_PATH)"
        );
        assert!(env_name("ERRAND_INPUT").is_err());
        assert_eq!(
            env_name("1X").unwrap_err(),
            "\"1X\" is not a valid environment variable name"
        );
    }
}
