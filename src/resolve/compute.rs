//! The rules of an environment's compute section, as the API server will apply them to the pod: resource names and quantities, requests within limits, node-selector labels, tolerations, class names, image pull Secrets and the ServiceAccount.
//!
//! Each is checked here so that an execution whose Job the API server would refuse is refused
//! at submission, naming the environment's field, instead of failing at every child create.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::problems::Problem;
use super::quantity::parse_quantity;
use super::rules::{alphanumeric_ends, object_name, one_of};
use crate::api::{
    ALLOWED_COMPUTE_KEYS, Compute, ComputeResources, GPU, OVERCOMMITTABLE_COMPUTE_KEYS,
    TAINT_EFFECTS, TOLERATION_OPERATORS,
};

/// Longest label value, and longest name part of a label key.
const LABEL_NAME_MAX: usize = 63;

/// Checks the compute section at `field` (for example `spec.environment.compute`).
pub fn compute(compute: &Compute, field: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(resources) = &compute.resources {
        check_resources(resources, &format!("{field}.resources"), &mut problems);
    }
    for (key, value) in &compute.node_selector {
        let path = format!("{field}.nodeSelector[{key}]");
        if let Err(message) = label_key(key) {
            problems.push(Problem::new(&path, message));
        }
        if let Err(message) = label_value(value) {
            problems.push(Problem::new(path, message));
        }
    }
    for (index, toleration) in compute.tolerations.iter().enumerate() {
        problems.extend(check_toleration(
            toleration,
            &format!("{field}.tolerations[{index}]"),
        ));
    }
    for (name, class) in [
        ("priorityClassName", &compute.priority_class_name),
        ("runtimeClassName", &compute.runtime_class_name),
    ] {
        if let Some(class) = class
            && let Err(message) = object_name(class)
        {
            problems.push(Problem::new(format!("{field}.{name}"), message));
        }
    }
    for (index, secret) in compute.image_pull_secrets.iter().enumerate() {
        if let Err(message) = object_name(secret) {
            problems.push(Problem::new(
                format!("{field}.imagePullSecrets[{index}]"),
                message,
            ));
        }
    }
    if let Some(Err(message)) = compute.service_account_name.as_deref().map(object_name) {
        problems.push(Problem::new(format!("{field}.serviceAccountName"), message));
    }
    problems
}

/// Allowed names, quantity syntax, whole GPUs, requests within limits and GPU requests equal
/// to their limits (Kubernetes cannot overcommit extended resources).
fn check_resources(resources: &ComputeResources, field: &str, problems: &mut Vec<Problem>) {
    // The quantities of `kind` that are allowed and readable; the others become problems.
    let mut readable = |kind: &str, map: &BTreeMap<String, Quantity>| {
        let mut values = BTreeMap::new();
        for (name, Quantity(text)) in map {
            let path = format!("{field}.{kind}[{name}]");
            if !ALLOWED_COMPUTE_KEYS.contains(&name.as_str()) {
                problems.push(Problem::new(
                    path,
                    format!(
                        "{name:?} is not allowed; only {} may be set",
                        one_of(&ALLOWED_COMPUTE_KEYS)
                    ),
                ));
                continue;
            }
            match parse_quantity(text) {
                Err(error) => problems.push(Problem::new(
                    path,
                    format!("{text:?} is not a valid quantity: {error}"),
                )),
                Ok(quantity) if quantity.negative => problems.push(Problem::new(
                    path,
                    format!("{text:?} must be greater than or equal to 0"),
                )),
                Ok(quantity) if name == GPU && !quantity.is_whole() => problems.push(Problem::new(
                    path,
                    format!("{text:?} must be a whole number of GPUs"),
                )),
                Ok(quantity) => {
                    values.insert(name.clone(), (text.clone(), quantity));
                }
            }
        }
        values
    };
    let limits = readable("limits", &resources.limits);
    let requests = readable("requests", &resources.requests);
    for name in OVERCOMMITTABLE_COMPUTE_KEYS {
        if let (Some((request, r)), Some((limit, l))) = (requests.get(name), limits.get(name))
            && r > l
        {
            problems.push(Problem::new(
                format!("{field}.requests[{name}]"),
                format!("{request:?} must not exceed limits[{name}] ({limit:?})"),
            ));
        }
    }
    if let Some((request, r)) = requests.get(GPU)
        && limits.get(GPU).is_none_or(|(_, l)| l != r)
    {
        problems.push(Problem::new(
            format!("{field}.requests[{GPU}]"),
            format!(
                "{request:?} needs an equal limits[{GPU}] (GPUs cannot be overcommitted; set the limit alone)"
            ),
        ));
    }
}

/// A toleration as Kubernetes validates it in a pod.
fn check_toleration(toleration: &Toleration, field: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or_default();
    let value = toleration.value.as_deref().unwrap_or_default();
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !key.is_empty()
        && let Err(message) = label_key(key)
    {
        problems.push(Problem::new(format!("{field}.key"), message));
    }
    match operator {
        "" | "Equal" => {
            if key.is_empty() {
                problems.push(Problem::new(
                    format!("{field}.operator"),
                    "must be Exists when key is empty (which tolerates every taint)",
                ));
            }
            if let Err(message) = label_value(value) {
                problems.push(Problem::new(format!("{field}.value"), message));
            }
        }
        "Exists" => {
            if !value.is_empty() {
                problems.push(Problem::new(
                    format!("{field}.value"),
                    format!("{value:?} must be empty when operator is Exists"),
                ));
            }
        }
        other => problems.push(Problem::new(
            format!("{field}.operator"),
            format!(
                "{other:?} is not a toleration operator; accepted: {}",
                one_of(&TOLERATION_OPERATORS)
            ),
        )),
    }
    if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
        problems.push(Problem::new(
            format!("{field}.effect"),
            format!(
                "{effect:?} is not a taint effect; accepted: {} (or empty for all)",
                one_of(&TAINT_EFFECTS)
            ),
        ));
    }
    if toleration.toleration_seconds.is_some() && effect != "NoExecute" {
        problems.push(Problem::new(
            format!("{field}.tolerationSeconds"),
            "applies only to effect NoExecute",
        ));
    }
    problems
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit.
pub fn label_key(key: &str) -> Result<(), InvalidLabel> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if name.is_empty() || !label_name(name) || prefix.is_some_and(|p| object_name(p).is_err()) {
        return Err(InvalidLabel::Key {
            key: key.to_owned(),
        });
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters as a label key's name part.
pub fn label_value(value: &str) -> Result<(), InvalidLabel> {
    if value.is_empty() || label_name(value) {
        Ok(())
    } else {
        Err(InvalidLabel::Value {
            value: value.to_owned(),
        })
    }
}

/// Why a label key or value is refused, as the API server would refuse it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidLabel {
    /// Not an optional DNS-subdomain prefix and a label name.
    #[error(
        "{key:?} is not a valid label key (an optional DNS subdomain and '/', then at most \
         {LABEL_NAME_MAX} letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
    )]
    Key {
        /// The key given.
        key: String,
    },
    /// Not empty nor a label name.
    #[error(
        "{value:?} is not a valid label value (at most {LABEL_NAME_MAX} letters, digits, '-', '_' \
         or '.', starting and ending with a letter or digit)"
    )]
    Value {
        /// The value given.
        value: String,
    },
}

fn label_name(name: &str) -> bool {
    name.len() <= LABEL_NAME_MAX
        && alphanumeric_ends(name)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(compute: &Compute) -> Vec<String> {
        super::compute(compute, "spec.environment.compute")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn resources(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Compute {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                .collect()
        };
        Compute {
            resources: Some(ComputeResources {
                requests: map(requests),
                limits: map(limits),
            }),
            ..Compute::default()
        }
    }

    #[test]
    fn requests_may_not_exceed_limits() {
        assert_eq!(
            messages(&resources(
                &[("cpu", "2"), ("memory", "1025Mi")],
                &[("cpu", "1"), ("memory", "1Gi")]
            )),
            [
                "spec.environment.compute.resources.requests[cpu]: \"2\" must not exceed limits[cpu] (\"1\")",
                "spec.environment.compute.resources.requests[memory]: \"1025Mi\" must not exceed limits[memory] (\"1Gi\")",
            ]
        );
        assert!(
            messages(&resources(
                &[("cpu", "500m"), ("memory", "1Gi")],
                &[("cpu", "1"), ("memory", "1024Mi")]
            ))
            .is_empty()
        );
        assert!(messages(&resources(&[("cpu", "8")], &[("memory", "1Gi")])).is_empty());
    }

    #[test]
    fn a_gpu_request_needs_an_equal_limit() {
        let needs = "spec.environment.compute.resources.requests[nvidia.com/gpu]: \"1\" needs an equal \
                     limits[nvidia.com/gpu] (GPUs cannot be overcommitted; set the limit alone)";
        assert_eq!(messages(&resources(&[(GPU, "1")], &[])), [needs]);
        assert_eq!(messages(&resources(&[(GPU, "1")], &[(GPU, "2")])), [needs]);
        assert!(messages(&resources(&[(GPU, "2")], &[(GPU, "2")])).is_empty());
        assert!(messages(&resources(&[], &[(GPU, "2")])).is_empty());
        assert_eq!(
            messages(&resources(
                &[],
                &[
                    (GPU, "0.5"),
                    ("memory", "lots"),
                    ("ephemeral-storage", "1Gi")
                ]
            )),
            [
                "spec.environment.compute.resources.limits[ephemeral-storage]: \"ephemeral-storage\" is not allowed; only cpu, memory, nvidia.com/gpu may be set",
                "spec.environment.compute.resources.limits[memory]: \"lots\" is not a valid quantity: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                "spec.environment.compute.resources.limits[nvidia.com/gpu]: \"0.5\" must be a whole number of GPUs",
            ]
        );
    }

    #[test]
    fn node_selector_labels_are_checked_as_kubernetes_does() {
        let compute = Compute {
            node_selector: [
                ("gpu type".to_owned(), "a100".to_owned()),
                ("example.com/zone".to_owned(), "eu-1".to_owned()),
                ("Example.com/zone".to_owned(), "x".to_owned()),
                ("disk".to_owned(), "-ssd".to_owned()),
            ]
            .into(),
            ..Compute::default()
        };
        let found = messages(&compute);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with("spec.environment.compute.nodeSelector[Example.com/zone]: \"Example.com/zone\" is not a valid label key"));
        assert!(found[1].starts_with(
            "spec.environment.compute.nodeSelector[disk]: \"-ssd\" is not a valid label value"
        ));
        assert!(found[2].starts_with(
            "spec.environment.compute.nodeSelector[gpu type]: \"gpu type\" is not a valid label key"
        ));
        assert!(label_key(&format!("{}/x", "a".repeat(254))).is_err());
        assert!(label_key(&"a".repeat(64)).is_err());
        assert!(label_key("kubernetes.io/hostname").is_ok());
    }

    #[test]
    fn tolerations_are_checked_as_kubernetes_does() {
        let toleration =
            |key: &str, operator: &str, value: &str, effect: &str, seconds: Option<i64>| {
                let text = |s: &str| (!s.is_empty()).then(|| s.to_owned());
                Toleration {
                    key: text(key),
                    operator: text(operator),
                    value: text(value),
                    effect: text(effect),
                    toleration_seconds: seconds,
                }
            };
        let compute = Compute {
            tolerations: vec![
                toleration("gpu", "Bogus", "", "NoSchedule", None),
                toleration("", "Equal", "x", "", None),
                toleration("gpu", "Exists", "a100", "NoRun", None),
                toleration("gpu", "", "a100", "NoSchedule", Some(30)),
                toleration("bad key!", "Exists", "", "", None),
                toleration("", "Exists", "", "", None),
                toleration(
                    "node.kubernetes.io/not-ready",
                    "Exists",
                    "",
                    "NoExecute",
                    Some(30),
                ),
            ],
            ..Compute::default()
        };
        assert_eq!(
            messages(&compute)
                .iter()
                .map(|m| m.split_once(':').unwrap().0)
                .collect::<Vec<_>>(),
            [
                "spec.environment.compute.tolerations[0].operator",
                "spec.environment.compute.tolerations[1].operator",
                "spec.environment.compute.tolerations[2].value",
                "spec.environment.compute.tolerations[2].effect",
                "spec.environment.compute.tolerations[3].tolerationSeconds",
                "spec.environment.compute.tolerations[4].key",
            ]
        );
        assert_eq!(
            messages(&compute)[0],
            "spec.environment.compute.tolerations[0].operator: \"Bogus\" is not a toleration operator; accepted: Equal, Exists"
        );
    }

    #[test]
    fn class_names_are_dns_subdomains() {
        let compute = Compute {
            priority_class_name: Some("Batch_High".into()),
            runtime_class_name: Some("nvidia".into()),
            ..Compute::default()
        };
        let found = messages(&compute);
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("spec.environment.compute.priorityClassName: \"Batch_High\" is not a valid name (a DNS-1123 subdomain"));
        assert!(object_name("a..b").is_err());
        assert!(object_name("system-cluster-critical").is_ok());
    }

    #[test]
    fn compute_quantities_are_parsed_as_kubernetes_does() {
        let compute = |limits: &[(&str, &str)]| {
            super::compute(&resources(&[], limits), "c")
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        for ok in ["1e3", "100m", "1Gi", "1.5", "0.5"] {
            assert_eq!(compute(&[("cpu", ok)]), Vec::<String>::new(), "{ok}");
        }
        assert_eq!(compute(&[("nvidia.com/gpu", "1e0")]), Vec::<String>::new());
        assert_eq!(
            compute(&[("cpu", "abc")]),
            [
                "c.resources.limits[cpu]: \"abc\" is not a valid quantity: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            ]
        );
        assert_eq!(
            compute(&[("memory", "-1Gi")]),
            ["c.resources.limits[memory]: \"-1Gi\" must be greater than or equal to 0"]
        );
        assert_eq!(
            compute(&[("nvidia.com/gpu", "500m")]),
            ["c.resources.limits[nvidia.com/gpu]: \"500m\" must be a whole number of GPUs"]
        );
        assert_eq!(
            compute(&[("nvidia.com/gpu", "-1")]),
            ["c.resources.limits[nvidia.com/gpu]: \"-1\" must be greater than or equal to 0"]
        );
    }

    #[test]
    fn requests_compare_with_limits_in_any_notation() {
        assert!(messages(&resources(&[("cpu", "1e0")], &[("cpu", "1000m")])).is_empty());
        assert!(messages(&resources(&[(GPU, "1e0")], &[(GPU, "1")])).is_empty());
        assert_eq!(
            messages(&resources(&[("memory", "1.1e9")], &[("memory", "1Gi")])),
            [
                "spec.environment.compute.resources.requests[memory]: \"1.1e9\" must not exceed limits[memory] (\"1Gi\")"
            ]
        );
    }
}
