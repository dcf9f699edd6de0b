//! The single-value rules of admission: names, paths, mount sets, environment variable names, compute, formats.

use crate::api::contract::{RESERVED_ENV_NAMES, RESERVED_ENV_PREFIX};
use crate::api::{ALLOWED_COMPUTE_KEYS, Compute, MAX_TTL_SECONDS_AFTER_FINISHED};

use super::problems::Problem;

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

/// Extension kinds errand knows. The extension's settings reach the agent as `ERRAND_EXTENSION`.
pub const KNOWN_EXTENSION_KINDS: [&str; 2] = ["evaluation", "tracing"];

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

/// Checks a Kubernetes object name (DNS-1123 subdomain).
pub fn object_name(name: &str) -> Result<(), String> {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let alnum_ends = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if name.is_empty() || name.len() > 253 || !valid_chars || !alnum_ends {
        return Err(format!(
            "{name:?} is not a valid name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)"
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

/// Checks the syntax of a resource quantity such as `500m`, `2`, `4Gi`.
pub fn quantity(text: &str) -> bool {
    const SUFFIXES: [&str; 16] = [
        "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E", "",
    ];
    let Some(number) = SUFFIXES.iter().find_map(|s| text.strip_suffix(s)) else {
        return false;
    };
    let digits_and_dot =
        !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    digits_and_dot && number.bytes().filter(|b| *b == b'.').count() <= 1 && number != "."
}

/// Checks the compute section: allowed keys, quantity syntax, whole GPUs, GPU requests equal to limits.
pub fn compute(compute: &Compute, field: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    let Some(resources) = &compute.resources else {
        return problems;
    };
    for (kind, map) in [
        ("limits", &resources.limits),
        ("requests", &resources.requests),
    ] {
        for (name, value) in map {
            let path = format!("{field}.resources.{kind}[{name}]");
            if !ALLOWED_COMPUTE_KEYS.contains(&name.as_str()) {
                problems.push(Problem::new(
                    path,
                    format!(
                        "{name:?} is not allowed; only {} may be set",
                        one_of(&ALLOWED_COMPUTE_KEYS)
                    ),
                ));
            } else if !quantity(&value.0) {
                problems.push(Problem::new(
                    path,
                    format!("{:?} is not a valid quantity", value.0),
                ));
            } else if name == "nvidia.com/gpu" && !value.0.bytes().all(|b| b.is_ascii_digit()) {
                problems.push(Problem::new(
                    path,
                    format!("{:?} must be a whole number of GPUs", value.0),
                ));
            }
        }
    }
    if let Some(request) = resources.requests.get("nvidia.com/gpu")
        && resources.limits.get("nvidia.com/gpu") != Some(request)
    {
        problems.push(Problem::new(
            format!("{field}.resources.requests[nvidia.com/gpu]"),
            format!(
                "{:?} must equal limits[nvidia.com/gpu] (GPUs cannot be overcommitted)",
                request.0
            ),
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names() {
        assert!(object_name("calc-1.v2").is_ok());
        assert_eq!(
            object_name("Calc_1").unwrap_err(),
            "\"Calc_1\" is not a valid name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)"
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

    #[test]
    fn quantities() {
        for ok in ["1", "500m", "0.5", "4Gi", "128974848", "129M"] {
            assert!(quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "1.2.3", "-1", "1Xi", "."] {
            assert!(!quantity(bad), "{bad}");
        }
    }
}
