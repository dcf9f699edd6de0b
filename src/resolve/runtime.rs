//! Picking the AgentRuntime that runs an Agent without `runtime`: the one serving the harness kind its config names (`default_harness` → `harnesses.<h>.kind`).

use serde_json::{Map, Value};

use super::problems::Problem;
use super::rules;
use crate::api::{AgentRuntimeSpec, Compute};

/// The AgentRuntime an agent runs with: its object name and spec.
#[derive(Clone, Debug, PartialEq)]
pub struct PickedRuntime {
    /// The AgentRuntime's name.
    pub name: String,
    /// Its spec, as it was when the execution was resolved.
    pub spec: AgentRuntimeSpec,
}

/// The harness kind a config runs under: `harnesses.<default_harness>.kind`, or the harness's
/// own name when its entry names no kind. The problem names the config field at fault, under
/// `prefix` (where the agent is in the spec).
pub fn harness_kind(config: &Map<String, Value>, prefix: &str) -> Result<String, Problem> {
    let harness = match config.get("default_harness") {
        None => {
            return Err(Problem::new(
                format!("{prefix}.runtime"),
                "is required when the config names no default_harness: errand runs an agent \
                 without a runtime with the AgentRuntime serving the harness kind of \
                 config.default_harness (harnesses.<h>.kind)",
            ));
        }
        Some(Value::String(harness)) if !harness.is_empty() => harness,
        Some(other) => {
            return Err(Problem::new(
                format!("{prefix}.config.default_harness"),
                format!("{other} must be the name of one of config.harnesses"),
            ));
        }
    };
    let entry = match config.get("harnesses") {
        Some(Value::Object(harnesses)) => harnesses.get(harness),
        _ => None,
    };
    let Some(entry) = entry else {
        return Err(Problem::new(
            format!("{prefix}.config.default_harness"),
            format!("{harness:?} names no entry of config.harnesses"),
        ));
    };
    match entry.get("kind") {
        None => Ok(harness.clone()),
        Some(Value::String(kind)) if !kind.is_empty() => Ok(kind.clone()),
        Some(other) => Err(Problem::new(
            format!("{prefix}.config.harnesses.{harness}.kind"),
            format!("{other} must be a harness kind (a non-empty string)"),
        )),
    }
}

/// The AgentRuntime serving the harness kind of `config`, from `installed` (every AgentRuntime
/// of the cluster, by name). When several serve the kind, the first by name wins. The problem
/// names the field and lists the installed kinds.
pub fn pick_runtime(
    config: &Map<String, Value>,
    installed: &[(String, AgentRuntimeSpec)],
    prefix: &str,
) -> Result<PickedRuntime, Problem> {
    let kind = harness_kind(config, prefix)?;
    let serving = rules::first_serving(
        installed,
        &kind,
        |spec: &AgentRuntimeSpec| spec.harness_kind.as_str(),
        "AgentRuntime",
    );
    let (name, spec) = match serving {
        Ok(found) => found,
        Err(installed) => {
            return Err(Problem::new(
                format!("{prefix}.runtime"),
                format!(
                    "is not set and no AgentRuntime serves harness kind {kind:?} (the kind of \
                     config.default_harness); {installed}. Set runtime, or install an AgentRuntime \
                     with harnessKind {kind:?}"
                ),
            ));
        }
    };
    if let Some(format) = config.get("config_format").and_then(Value::as_str)
        && !spec.config_formats.is_empty()
        && !spec.config_formats.iter().any(|f| f == format)
    {
        let accepted: Vec<&str> = spec.config_formats.iter().map(String::as_str).collect();
        return Err(Problem::new(
            format!("{prefix}.config.config_format"),
            format!(
                "{format:?} is not accepted by AgentRuntime {name:?} (harness kind {kind:?}); it \
                 accepts: {}",
                rules::one_of(&accepted)
            ),
        ));
    }
    Ok(PickedRuntime {
        name: name.clone(),
        spec: spec.clone(),
    })
}

/// The compute of an execution: its environment's, with the runtime's defaults for every
/// field the environment leaves unset.
pub fn with_runtime_defaults(environment: Compute, defaults: Option<&Compute>) -> Compute {
    let Some(defaults) = defaults else {
        return environment;
    };
    Compute {
        resources: environment.resources.or_else(|| defaults.resources.clone()),
        node_selector: if environment.node_selector.is_empty() {
            defaults.node_selector.clone()
        } else {
            environment.node_selector
        },
        tolerations: if environment.tolerations.is_empty() {
            defaults.tolerations.clone()
        } else {
            environment.tolerations
        },
        priority_class_name: environment
            .priority_class_name
            .or_else(|| defaults.priority_class_name.clone()),
        runtime_class_name: environment
            .runtime_class_name
            .or_else(|| defaults.runtime_class_name.clone()),
        image_pull_secrets: if environment.image_pull_secrets.is_empty() {
            defaults.image_pull_secrets.clone()
        } else {
            environment.image_pull_secrets
        },
        service_account_name: environment
            .service_account_name
            .or_else(|| defaults.service_account_name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::RuntimeContainer;

    fn runtime(kind: &str, formats: &[&str]) -> AgentRuntimeSpec {
        AgentRuntimeSpec {
            harness_kind: kind.to_owned(),
            container: RuntimeContainer {
                image: format!("errand.local/{kind}:test"),
                command: vec!["harness".to_owned()],
                ..RuntimeContainer::default()
            },
            config_formats: formats.iter().map(|f| (*f).to_owned()).collect(),
            compute: None,
        }
    }

    fn config(value: Value) -> Map<String, Value> {
        value.as_object().expect("an object").clone()
    }

    fn calculator() -> Map<String, Value> {
        config(json!({
            "config_format": "nemo-agents-spec-v1",
            "name": "calculator-agent",
            "default_harness": "deepagents",
            "harnesses": {"deepagents": {"kind": "deepagents", "settings": {"deepagents": {}}}},
        }))
    }

    #[test]
    fn the_default_harness_kind_picks_the_runtime_first_by_name() {
        let installed = vec![
            ("zz-deep".to_owned(), runtime("deepagents", &[])),
            ("claude".to_owned(), runtime("claude", &[])),
            (
                "deep".to_owned(),
                runtime("deepagents", &["nemo-agents-spec-v1"]),
            ),
        ];
        let picked = pick_runtime(&calculator(), &installed, "spec.agent").unwrap();
        assert_eq!(picked.name, "deep");
        assert_eq!(picked.spec.harness_kind, "deepagents");
    }

    #[test]
    fn a_harness_without_kind_is_its_own_kind() {
        let config = config(json!({"default_harness": "claude", "harnesses": {"claude": {}}}));
        assert_eq!(harness_kind(&config, "spec.agent").unwrap(), "claude");
    }

    #[test]
    fn no_runtime_for_the_kind_names_the_field_and_the_installed_kinds() {
        let installed = vec![
            ("a".to_owned(), runtime("codex", &[])),
            ("b".to_owned(), runtime("claude", &[])),
            ("c".to_owned(), runtime("claude", &[])),
        ];
        let problem = pick_runtime(&calculator(), &installed, "Agent \"calc\" spec").unwrap_err();
        assert_eq!(problem.field, "Agent \"calc\" spec.runtime");
        assert!(
            problem.message.contains(
                "no AgentRuntime serves harness kind \"deepagents\" (the kind of config.default_harness); installed kinds: claude, codex"
            ),
            "{}",
            problem.message
        );
        let none = pick_runtime(&calculator(), &[], "spec.agent").unwrap_err();
        assert!(
            none.message.contains("no AgentRuntime is installed"),
            "{}",
            none.message
        );
    }

    #[test]
    fn a_config_without_a_usable_harness_names_its_field() {
        let cases = [
            (json!({"name": "x"}), "spec.agent.runtime"),
            (
                json!({"default_harness": 3}),
                "spec.agent.config.default_harness",
            ),
            (
                json!({"default_harness": "deepagents", "harnesses": {}}),
                "spec.agent.config.default_harness",
            ),
            (
                json!({"default_harness": "d", "harnesses": {"d": {"kind": 1}}}),
                "spec.agent.config.harnesses.d.kind",
            ),
        ];
        for (value, field) in cases {
            let problem = pick_runtime(&config(value.clone()), &[], "spec.agent").unwrap_err();
            assert_eq!(problem.field, field, "{value}");
        }
    }

    #[test]
    fn a_runtime_refuses_a_format_it_does_not_accept() {
        let installed = vec![(
            "deep".to_owned(),
            runtime("deepagents", &["agents-spec-v1"]),
        )];
        let problem = pick_runtime(&calculator(), &installed, "spec.agent").unwrap_err();
        assert_eq!(problem.field, "spec.agent.config.config_format");
        assert!(
            problem.message.contains("accepts: agents-spec-v1"),
            "{}",
            problem.message
        );
    }

    #[test]
    fn the_environment_wins_field_by_field_over_the_runtime_defaults() {
        let defaults: Compute = serde_json::from_value(json!({
            "resources": {"limits": {"cpu": "2"}},
            "nodeSelector": {"pool": "agents"},
            "runtimeClassName": "gvisor",
        }))
        .unwrap();
        let environment: Compute =
            serde_json::from_value(json!({"nodeSelector": {"pool": "gpu"}})).unwrap();
        let merged = with_runtime_defaults(environment, Some(&defaults));
        assert_eq!(merged.node_selector["pool"], "gpu");
        assert_eq!(merged.runtime_class_name.as_deref(), Some("gvisor"));
        assert_eq!(merged.resources, defaults.resources);
    }
}
