//! Deterministic names and label values of every kind's children (an execution's Job and snapshot, a deployment's Deployment, Service and snapshots), so a restarted controller finds what it created.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::api::contract::{
    AGENT_LABEL, DEPLOYMENT_LABEL, DEPLOYMENT_UID_LABEL, EXECUTION_LABEL, EXECUTION_UID_LABEL,
    MANAGED_BY, MANAGED_BY_LABEL,
};

/// Longest name of a Job: its name becomes a label value on its pods.
const MAX_CHILD_NAME: usize = 63;
/// Longest label value.
const MAX_LABEL_VALUE: usize = 63;
/// Hex digits of the hash that makes a shortened name unique.
const HASH_DIGITS: usize = 10;

/// Name of the execution's Job.
pub fn job_name(execution: &str) -> String {
    child_name(execution, "")
}

/// Name of the execution's immutable snapshot ConfigMap.
pub fn snapshot_config_map_name(execution: &str) -> String {
    child_name(execution, "-snapshot")
}

/// Name of an AgentDeployment's Deployment and Service: `errand-<deployment>` (the CRD keeps
/// deployment names DNS labels short enough for it).
pub fn deployment_workload_name(deployment: &str) -> String {
    crate::api::contract::deployment_service_name(deployment)
}

/// Name of an AgentDeployment's snapshot ConfigMap for the snapshot with `digest`
/// (`sha256:<hex>`): each redeploy gets its own immutable ConfigMap, so pods of the previous
/// snapshot keep theirs while the Deployment rolls.
pub fn deployment_snapshot_name(deployment: &str, digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let short: String = hex.chars().take(HASH_DIGITS).collect();
    child_name(deployment, &format!("-agent-{short}"))
}

/// Labels of an AgentDeployment's children and pods. Its pods are selected by the uid label
/// alone: a Deployment's selector never changes, the agent's name may (a redeploy).
pub fn deployment_labels(deployment: &str, uid: &str, agent: &str) -> BTreeMap<String, String> {
    let mut labels = deployment_selector(uid);
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    labels.insert(DEPLOYMENT_LABEL.to_owned(), label_value(deployment));
    labels.insert(AGENT_LABEL.to_owned(), label_value(agent));
    labels
}

/// The labels that select exactly one AgentDeployment's pods.
pub fn deployment_selector(uid: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(DEPLOYMENT_UID_LABEL.to_owned(), uid.to_owned())])
}

/// `errand-<execution><suffix>`, shortened to 63 characters with a hash of the execution name
/// when too long, so two long names with a common prefix never share children.
fn child_name(execution: &str, suffix: &str) -> String {
    let full = format!("errand-{execution}{suffix}");
    if full.len() <= MAX_CHILD_NAME {
        return full;
    }
    let hash = short_hash(execution);
    let keep = MAX_CHILD_NAME - "errand-".len() - suffix.len() - 1 - HASH_DIGITS;
    let stem = execution[..keep].trim_end_matches(['-', '.']);
    format!("errand-{stem}-{hash}{suffix}")
}

/// `value` as a label value: kept when valid, otherwise reduced to the allowed characters and
/// shortened with a hash of the original so different values stay different.
pub fn label_value(value: &str) -> String {
    if is_label_value(value) {
        return value.to_owned();
    }
    let cleaned: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let keep = MAX_LABEL_VALUE - 1 - HASH_DIGITS;
    let stem: String = cleaned.chars().take(keep).collect();
    let stem = stem.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let hash = short_hash(value);
    if stem.is_empty() {
        hash
    } else {
        format!("{stem}-{hash}")
    }
}

fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    value.len() <= MAX_LABEL_VALUE
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes.first().is_none_or(u8::is_ascii_alphanumeric)
        && bytes.last().is_none_or(u8::is_ascii_alphanumeric)
}

fn short_hash(value: &str) -> String {
    hex::encode(Sha256::digest(value.as_bytes()))[..HASH_DIGITS].to_owned()
}

/// The labels every child of an execution carries (the pods too).
pub fn child_labels(execution: &str, uid: &str, agent: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (EXECUTION_LABEL.to_owned(), label_value(execution)),
        (EXECUTION_UID_LABEL.to_owned(), uid.to_owned()),
        (AGENT_LABEL.to_owned(), label_value(agent)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_kept_readable() {
        assert_eq!(job_name("calc"), "errand-calc");
        assert_eq!(snapshot_config_map_name("calc"), "errand-calc-snapshot");
    }

    #[test]
    fn long_names_fit_and_stay_distinct() {
        let a = format!("{}-a", "x".repeat(200));
        let b = format!("{}-b", "x".repeat(200));
        for name in [job_name(&a), snapshot_config_map_name(&a)] {
            assert!(name.len() <= 63, "{name} is {} long", name.len());
            assert!(name.starts_with("errand-xxx"));
        }
        assert_ne!(job_name(&a), job_name(&b));
        assert_eq!(job_name(&a), job_name(&a), "names are deterministic");
        assert!(snapshot_config_map_name(&a).ends_with("-snapshot"));
    }

    #[test]
    fn a_long_name_never_ends_in_a_dash_before_the_hash() {
        let name = format!("{}-{}", "y".repeat(44), "z".repeat(30));
        let job = job_name(&name);
        assert!(!job.contains("--"), "{job}");
        assert!(job.len() <= 63);
    }

    #[test]
    fn label_values_are_valid() {
        assert_eq!(label_value("calculator"), "calculator");
        let odd = label_value("My Agent (v2)!");
        assert!(is_label_value(&odd), "{odd}");
        assert!(odd.starts_with("My-Agent--v2"));
        let long = label_value(&"a".repeat(100));
        assert!(is_label_value(&long) && long.len() <= 63, "{long}");
        assert_ne!(label_value(&"a".repeat(100)), label_value(&"a".repeat(101)));
        assert!(is_label_value(&label_value("!!!")));
    }
}
