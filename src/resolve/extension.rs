//! Extensions: the rules an AgentExtension itself must meet, and picking the one an execution's `extension.kind` names with its config checked against the extension's schema.

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::config_schema;
use super::problems::Problem;
use super::rules;
use crate::api::contract::{EXTENSION_RESULT_NAME_PATTERN, RESULT_NAMES};
use crate::api::{
    AgentExtensionSpec, Extension, MAX_EXTENSION_RESULTS, MAX_TIMEOUT_SECONDS, RuntimeContainer,
};

/// The extension an execution runs after its agent succeeded, as it was when the execution was
/// resolved: later edits of the AgentExtension do not change it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedExtension {
    /// The kind the execution named (`spec.extension.kind`).
    pub kind: String,
    /// The AgentExtension serving that kind.
    pub name: String,
    /// The execution's settings for it, checked against its config schema.
    #[serde(default)]
    pub config: Map<String, Value>,
    /// Image and entrypoint of the step.
    pub container: RuntimeContainer,
    /// The results it saves, by name.
    pub results: Vec<String>,
    /// Seconds it may run.
    pub timeout_seconds: i64,
}

impl ResolvedExtension {
    /// The step's full command line: `command` then `args`.
    pub fn command(&self) -> Vec<String> {
        self.container
            .command
            .iter()
            .chain(&self.container.args)
            .cloned()
            .collect()
    }
}

/// Checks one result name an extension declares.
pub fn extension_result_name(name: &str) -> Result<(), InvalidResultName> {
    if RESULT_NAMES.contains(&name) {
        return Err(InvalidResultName::Reserved {
            name: name.to_owned(),
        });
    }
    let pattern = Regex::new(EXTENSION_RESULT_NAME_PATTERN).expect("the pattern is valid");
    if name.len() > 63 || !pattern.is_match(name) {
        return Err(InvalidResultName::Pattern {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Why an extension may not declare a result name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidResultName {
    /// One of errand's own results.
    #[error(
        "{name:?} is one of errand's own results ({own}); an extension saves results of its own",
        own = rules::one_of(&RESULT_NAMES)
    )]
    Reserved {
        /// The name declared.
        name: String,
    },
    /// Not of the pattern result names follow.
    #[error(
        "{name:?} is not a valid result name (lowercase letters, digits, '-' and '_', \
         starting and ending with a letter or digit, at most 63 characters)"
    )]
    Pattern {
        /// The name declared.
        name: String,
    },
}

/// Every problem of an AgentExtension's spec: its result names (valid, not errand's own, each
/// once) and its config schema (of the subset errand checks, for an object).
pub fn check_extension(spec: &AgentExtensionSpec) -> Vec<Problem> {
    let mut problems = Vec::new();
    if spec.results.is_empty() {
        problems.push(Problem::new(
            "spec.results",
            "must name at least one result the extension saves",
        ));
    }
    if spec.results.len() > MAX_EXTENSION_RESULTS {
        problems.push(Problem::new(
            "spec.results",
            format!(
                "names {} results; at most {MAX_EXTENSION_RESULTS} are allowed",
                spec.results.len()
            ),
        ));
    }
    for (index, name) in spec.results.iter().enumerate() {
        let field = format!("spec.results[{index}]");
        if let Err(message) = extension_result_name(name) {
            problems.push(Problem::new(field, message));
        } else if spec.results[..index].contains(name) {
            problems.push(Problem::new(field, format!("{name:?} is named twice")));
        }
    }
    if let Some(schema) = &spec.config_schema {
        problems.extend(config_schema::check_schema(schema, "spec.configSchema"));
        if let Some(kind) = schema.get("type")
            && kind != "object"
        {
            problems.push(Problem::new(
                "spec.configSchema.type",
                format!("{kind} must be \"object\": an extension's config is an object"),
            ));
        }
    }
    if let Some(seconds) = spec.timeout_seconds
        && !(1..=MAX_TIMEOUT_SECONDS).contains(&seconds)
    {
        problems.push(Problem::new(
            "spec.timeoutSeconds",
            format!("{seconds} is out of range: 1 to {MAX_TIMEOUT_SECONDS} (7 days)"),
        ));
    }
    problems
}

/// The installed AgentExtension serving `extension.kind` (the first by name when several do),
/// with the execution's config checked against its schema. Each problem names its field under
/// `spec.extension`; an unknown kind lists the installed ones.
pub fn pick_extension(
    extension: &Extension,
    installed: &[(String, AgentExtensionSpec)],
) -> Result<ResolvedExtension, Vec<Problem>> {
    let serving = rules::first_serving(
        installed,
        &extension.kind,
        |spec: &AgentExtensionSpec| spec.extension_kind.as_str(),
        "AgentExtension",
    );
    let (name, spec) = match serving {
        Ok(found) => found,
        Err(installed) => {
            return Err(vec![Problem::new(
                "spec.extension.kind",
                format!(
                    "{:?} names no installed AgentExtension; {installed}",
                    extension.kind
                ),
            )]);
        }
    };
    if !check_extension(spec).is_empty() {
        return Err(vec![Problem::new(
            "spec.extension.kind",
            format!(
                "AgentExtension {name:?} serving {:?} is itself invalid; ask the platform \
                 operator to fix it",
                extension.kind
            ),
        )]);
    }
    let config = extension.config.clone().unwrap_or_default();
    if let Some(schema) = &spec.config_schema {
        let problems = config_schema::validate(
            schema,
            &Value::Object(config.clone()),
            "spec.extension.config",
        );
        if !problems.is_empty() {
            return Err(problems);
        }
    }
    Ok(ResolvedExtension {
        kind: extension.kind.clone(),
        name: name.clone(),
        config,
        container: spec.container.clone(),
        results: spec.results.clone(),
        timeout_seconds: spec.timeout_seconds(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testing::{assert_says, fields};

    fn analysis() -> AgentExtensionSpec {
        serde_json::from_value(json!({
            "extensionKind": "analysis",
            "image": "errand.local/test-extension:test",
            "command": ["/bin/analyse"],
            "results": ["analysis-report"],
            "configSchema": {
                "type": "object",
                "properties": {"depth": {"type": "integer", "minimum": 1}},
                "additionalProperties": false,
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_valid_extension_has_no_problems() {
        assert_eq!(check_extension(&analysis()), []);
    }

    #[test]
    fn result_names_must_be_valid_unique_and_not_errands_own() {
        let mut spec = analysis();
        spec.results = vec![
            "analysis-report".into(),
            "run_result".into(),
            "manifest.json".into(),
            "Report".into(),
            "-x".into(),
            "analysis-report".into(),
            "a".repeat(64),
        ];
        let problems = check_extension(&spec);
        let refused: Vec<String> = (1..=6).map(|i| format!("spec.results[{i}]")).collect();
        assert_eq!(fields(&problems), refused);
        assert_says(&problems[0], "one of errand's own results");
        assert_says(&problems[1], "one of errand's own results");
        assert_says(&problems[2], "not a valid result name");
        assert_eq!(problems[4].message, "\"analysis-report\" is named twice");
        spec.results.clear();
        assert_eq!(fields(&check_extension(&spec)), ["spec.results"]);
    }

    #[test]
    fn a_malformed_config_schema_is_refused() {
        let mut spec = analysis();
        spec.config_schema = Some(
            json!({"type": "array", "items": {"type": "strin"}})
                .as_object()
                .unwrap()
                .clone(),
        );
        spec.timeout_seconds = Some(0);
        assert_eq!(
            fields(&check_extension(&spec)),
            [
                "spec.configSchema.items.type",
                "spec.configSchema.type",
                "spec.timeoutSeconds"
            ]
        );
    }

    #[test]
    fn an_unknown_kind_lists_the_installed_kinds() {
        let installed = vec![
            ("b-analysis".to_owned(), analysis()),
            ("a-analysis".to_owned(), analysis()),
        ];
        let unknown = Extension {
            kind: "evaluation".into(),
            config: None,
        };
        let problems = pick_extension(&unknown, &installed).unwrap_err();
        assert_eq!(
            problems[0].to_string(),
            "spec.extension.kind: \"evaluation\" names no installed AgentExtension; installed \
             kinds: analysis"
        );
        let problems = pick_extension(&unknown, &[]).unwrap_err();
        assert!(
            problems[0]
                .message
                .ends_with("no AgentExtension is installed")
        );
        let known = Extension {
            kind: "analysis".into(),
            config: None,
        };
        let picked = pick_extension(&known, &installed).unwrap();
        assert_eq!(picked.name, "a-analysis");
        assert_eq!(picked.results, ["analysis-report"]);
        assert_eq!(picked.timeout_seconds, 600);
    }

    #[test]
    fn the_config_is_checked_against_the_extensions_schema() {
        let installed = vec![("analysis".to_owned(), analysis())];
        let extension = |config: Value| Extension {
            kind: "analysis".into(),
            config: config.as_object().cloned(),
        };
        let problems =
            pick_extension(&extension(json!({"depth": 0, "x": 1})), &installed).unwrap_err();
        assert_eq!(
            fields(&problems),
            ["spec.extension.config.depth", "spec.extension.config.x"]
        );
        let picked = pick_extension(&extension(json!({"depth": 2})), &installed).unwrap();
        assert_eq!(picked.config["depth"], 2);
    }
}
