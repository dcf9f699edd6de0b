//! The two spec shapes `--spec`/`--spec-file` accept, read into one [`AgentExecutionSpec`]: the CRD's camelCase spec and the NeMo job spec (`agent`, `environment`, `workdir.base_workdir`, `workdir.artifact_mounts[]`, `timeout_seconds`, `auto_telemetry`, `extension`).
//!
//! Both are checked against the AgentExecution schema after reading, so every problem names
//! its field (in the words of the shape the user wrote), an unknown field is refused by name,
//! and a `workspace/` prefix must be the target namespace.

use serde_json::{Map, Value, json};

use super::problems::{InvalidSpec, Problem};
use super::schema::{check_execution_spec_structure, decode};
use crate::api::AgentExecutionSpec;

/// The fields of a NeMo job spec.
pub const NEMO_JOB_FIELDS: [&str; 7] = [
    "agent",
    "input",
    "environment",
    "workdir",
    "timeout_seconds",
    "auto_telemetry",
    "extension",
];

/// Which shape a spec document is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecShape {
    /// The AgentExecution's own `spec` (camelCase: `agentRef`, `timeoutSeconds`, ...).
    Crd,
    /// The NeMo job spec (`agent: NAME`, `timeout_seconds`, `workdir.base_workdir`, ...).
    NemoJob,
}

/// The shape of `spec`: a NeMo job spec when it uses a field or a form only NeMo has (a
/// snake_case field, `agent` or `environment` by name, an inline `{config_format, config}`
/// agent, `workdir.base_workdir` or `workdir.artifact_mounts`); otherwise the CRD's.
pub fn shape_of(spec: &Value) -> SpecShape {
    let Value::Object(fields) = spec else {
        return SpecShape::Crd;
    };
    let nemo_only = ["timeout_seconds", "auto_telemetry"]
        .iter()
        .any(|k| fields.contains_key(*k));
    let by_name = |key: &str| fields.get(key).is_some_and(Value::is_string);
    let inline_config = fields
        .get("agent")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key("config_format"));
    let nemo_workdir = fields
        .get("workdir")
        .and_then(Value::as_object)
        .is_some_and(|w| w.contains_key("base_workdir") || w.contains_key("artifact_mounts"));
    if nemo_only || by_name("agent") || by_name("environment") || inline_config || nemo_workdir {
        SpecShape::NemoJob
    } else {
        SpecShape::Crd
    }
}

/// Reads a spec document of either shape submitted to `namespace`, with every problem at once.
pub fn parse_spec(spec: Value, namespace: &str) -> Result<AgentExecutionSpec, InvalidSpec> {
    match shape_of(&spec) {
        SpecShape::Crd => decode_crd_spec(spec, &|field| field.to_owned()),
        SpecShape::NemoJob => {
            let mut problems = Vec::new();
            let crd = nemo_to_crd(spec, namespace, &mut problems);
            if !problems.is_empty() {
                return Err(InvalidSpec { problems });
            }
            decode_crd_spec(crd, &nemo_field)
        }
    }
}

/// Checks a CRD-shaped spec against the AgentExecution schema and decodes it; `rename` turns
/// each problem's field back into the words the user wrote.
fn decode_crd_spec(
    spec: Value,
    rename: &dyn Fn(&str) -> String,
) -> Result<AgentExecutionSpec, InvalidSpec> {
    let renamed = |problems: Vec<Problem>| InvalidSpec {
        problems: problems
            .into_iter()
            .map(|p| Problem::new(rename(&p.field), p.message))
            .collect(),
    };
    let problems = check_execution_spec_structure(&spec);
    if !problems.is_empty() {
        return Err(renamed(problems));
    }
    decode(spec).map_err(|problem| {
        renamed(vec![Problem::new(
            format!("spec.{}", problem.field),
            problem.message,
        )])
    })
}

/// A CRD field path (`spec.workdir.artifactMounts[0].mountPath`) in the NeMo job spec's words
/// (`workdir.artifact_mounts[0].mount_path`).
fn nemo_field(field: &str) -> String {
    let field = field.strip_prefix("spec.").unwrap_or(field);
    [
        ("agentRef.name", "agent"),
        ("environmentRef.name", "environment"),
        ("timeoutSeconds", "timeout_seconds"),
        ("autoTelemetry", "auto_telemetry"),
        ("workdir.base", "workdir.base_workdir"),
        ("artifactMounts", "artifact_mounts"),
        ("mountPath", "mount_path"),
    ]
    .iter()
    .fold(field.to_owned(), |field, (crd, nemo)| {
        field.replace(crd, nemo)
    })
}

/// The NeMo job spec `spec` rewritten as the CRD's spec; problems found on the way (unknown
/// fields, other workspaces, wrong types of the NeMo-only forms) go to `problems`.
fn nemo_to_crd(spec: Value, namespace: &str, problems: &mut Vec<Problem>) -> Value {
    let Value::Object(fields) = spec else {
        unreachable!("only an object reads as a NeMo job spec")
    };
    let mut crd = Map::new();
    for (key, value) in fields {
        match key.as_str() {
            "agent" => match value {
                Value::String(reference) => {
                    if let Some(name) = in_namespace(&reference, "agent", namespace, problems) {
                        crd.insert("agentRef".into(), json!({"name": name}));
                    }
                }
                Value::Object(agent) if agent.contains_key("config_format") => {
                    crd.insert("agent".into(), inline_agent(agent, problems));
                }
                // The CRD's inline agent (`runtime`, `config`), checked by the schema.
                other => {
                    crd.insert("agent".into(), other);
                }
            },
            "environment" => match value {
                Value::String(reference) => {
                    if let Some(name) = in_namespace(&reference, "environment", namespace, problems)
                    {
                        crd.insert("environmentRef".into(), json!({"name": name}));
                    }
                }
                // An inline environment is the AgentEnvironment's spec (`overlay`, `compute`).
                other => {
                    crd.insert("environment".into(), other);
                }
            },
            "workdir" => {
                crd.insert("workdir".into(), workdir(value, namespace, problems));
            }
            "input" | "extension" => {
                crd.insert(key, value);
            }
            "timeout_seconds" => {
                crd.insert("timeoutSeconds".into(), value);
            }
            "auto_telemetry" => {
                crd.insert("autoTelemetry".into(), value);
            }
            _ => problems.push(unknown_field(&key, &key, &NEMO_JOB_FIELDS)),
        }
    }
    Value::Object(crd)
}

/// An unknown field at `field`, with the ones accepted there.
fn unknown_field(field: &str, key: &str, accepted: &[&str]) -> Problem {
    Problem::new(
        field,
        format!(
            "unknown field {key:?} in the NeMo job spec; accepted: {}",
            accepted.join(", ")
        ),
    )
}

/// The object name of `reference` (`name` or `workspace/name`), when its workspace is
/// `namespace`; otherwise a problem at `field`.
pub fn workspace_name(reference: &str, field: &str, namespace: &str) -> Result<String, Problem> {
    match reference.split_once('/') {
        None => Ok(reference.to_owned()),
        Some((workspace, name)) if workspace == namespace => Ok(name.to_owned()),
        Some((workspace, _)) => Err(Problem::new(
            field,
            format!(
                "{reference:?} names workspace {workspace:?}; the target namespace is \
                 {namespace:?}, and references stay in it (a workspace/ prefix must be the \
                 target namespace)"
            ),
        )),
    }
}

/// [`workspace_name`], its problem (if any) added to `problems`.
fn in_namespace(
    reference: &str,
    field: &str,
    namespace: &str,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    workspace_name(reference, field, namespace)
        .map_err(|problem| problems.push(problem))
        .ok()
}

/// The NeMo inline agent `{config_format, config}` as the CRD's inline agent: the config,
/// with the outer `config_format` (the config's own, when it has one, must agree), and no
/// `runtime` (errand picks the AgentRuntime of its harness kind).
fn inline_agent(agent: Map<String, Value>, problems: &mut Vec<Problem>) -> Value {
    let format = agent.get("config_format").cloned().unwrap_or(Value::Null);
    let mut config = Map::new();
    for (key, value) in agent {
        match (key.as_str(), value) {
            ("config_format", _) => {}
            ("config", Value::Object(fields)) => config = fields,
            ("config", other) => problems.push(Problem::new(
                "agent.config",
                format!("{other} must be the agent config (an object)"),
            )),
            (_, _) => problems.push(unknown_field(
                &format!("agent.{key}"),
                &key,
                &["config_format", "config"],
            )),
        }
    }
    match config.get("config_format") {
        Some(own) if *own != format => problems.push(Problem::new(
            "agent.config.config_format",
            format!("{own} differs from agent.config_format {format}"),
        )),
        _ => {
            config.insert("config_format".into(), format);
        }
    }
    json!({"config": config})
}

/// The NeMo `workdir` (`base_workdir`, `artifact_mounts[].{ref, mount_path}`) as the CRD's.
fn workdir(value: Value, namespace: &str, problems: &mut Vec<Problem>) -> Value {
    let Value::Object(fields) = value else {
        problems.push(Problem::new(
            "workdir",
            format!("{value} must be an object with base_workdir and artifact_mounts"),
        ));
        return Value::Null;
    };
    let mut crd = Map::new();
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("base_workdir", Value::String(base)) => {
                if let Some(base) =
                    fileset_in_namespace(&base, "workdir.base_workdir", namespace, problems)
                {
                    crd.insert("base".into(), Value::String(base));
                }
            }
            ("artifact_mounts", Value::Array(mounts)) => {
                let mounts = mounts
                    .into_iter()
                    .enumerate()
                    .map(|(index, mount)| artifact_mount(index, mount, namespace, problems))
                    .collect();
                crd.insert("artifactMounts".into(), Value::Array(mounts));
            }
            ("base_workdir" | "artifact_mounts", other) => problems.push(Problem::new(
                format!("workdir.{key}"),
                format!(
                    "{other} must be {}",
                    if key == "base_workdir" {
                        "a Fileset reference ([workspace/]fileset[#path/])"
                    } else {
                        "a list of {ref, mount_path}"
                    }
                ),
            )),
            (_, _) => problems.push(unknown_field(
                &format!("workdir.{key}"),
                &key,
                &["base_workdir", "artifact_mounts"],
            )),
        }
    }
    Value::Object(crd)
}

/// One `artifact_mounts[index]` entry as the CRD's `{ref, mountPath}`.
fn artifact_mount(
    index: usize,
    mount: Value,
    namespace: &str,
    problems: &mut Vec<Problem>,
) -> Value {
    let field = format!("workdir.artifact_mounts[{index}]");
    let Value::Object(fields) = mount else {
        problems.push(Problem::new(
            &field,
            format!("{mount} must be {{ref, mount_path}}"),
        ));
        return Value::Null;
    };
    let mut crd = Map::new();
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("ref", Value::String(reference)) => {
                let at = format!("{field}.ref");
                if let Some(reference) = fileset_in_namespace(&reference, &at, namespace, problems)
                {
                    crd.insert("ref".into(), Value::String(reference));
                }
            }
            ("mount_path", value) => {
                crd.insert("mountPath".into(), value);
            }
            ("ref", value) => {
                crd.insert("ref".into(), value);
            }
            (_, _) => problems.push(unknown_field(
                &format!("{field}.{key}"),
                &key,
                &["ref", "mount_path"],
            )),
        }
    }
    Value::Object(crd)
}

/// A Fileset reference `[workspace/]fileset[#path]` without its workspace, when that is
/// `namespace`; otherwise a problem at `field`.
fn fileset_in_namespace(
    reference: &str,
    field: &str,
    namespace: &str,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    let (object, fragment) = match reference.split_once('#') {
        Some((object, fragment)) => (object, Some(fragment)),
        None => (reference, None),
    };
    let name = in_namespace(object, field, namespace, problems)?;
    Some(match fragment {
        Some(fragment) => format!("{name}#{fragment}"),
        None => name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(error: InvalidSpec) -> Vec<String> {
        error.problems.into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn the_documented_workdir_job_spec_reads_as_the_crd_spec() {
        let spec = json!({
            "agent": "research-agent",
            "input": "Summarize the repository.",
            "workdir": {
                "base_workdir": "default/project-source",
                "artifact_mounts": [
                    {"ref": "default/config-artifact#config.yaml", "mount_path": "app/config.yaml"},
                ],
            },
            "timeout_seconds": 600,
        });
        assert_eq!(shape_of(&spec), SpecShape::NemoJob);
        let parsed = parse_spec(spec, "default").unwrap();
        let expected: AgentExecutionSpec = serde_json::from_value(json!({
            "agentRef": {"name": "research-agent"},
            "input": "Summarize the repository.",
            "workdir": {"base": "project-source", "artifactMounts": [
                {"ref": "config-artifact#config.yaml", "mountPath": "app/config.yaml"},
            ]},
            "timeoutSeconds": 600,
        }))
        .unwrap();
        assert_eq!(parsed, expected);
    }

    #[test]
    fn the_inline_agent_and_environment_by_workspace_name_read_as_the_crd_spec() {
        let spec = json!({
            "agent": {"config_format": "nemo-agents-spec-v1", "config": {
                "name": "calculator-agent", "default_harness": "deepagents",
                "harnesses": {"deepagents": {"kind": "deepagents"}},
            }},
            "environment": "team-a/research",
            "auto_telemetry": true,
            "extension": {"kind": "evaluation", "config": {"metric": "exact"}},
        });
        let parsed = parse_spec(spec, "team-a").unwrap();
        let agent = parsed.agent.unwrap();
        assert!(agent.runtime.is_none());
        assert_eq!(agent.config.format(), Some("nemo-agents-spec-v1"));
        assert_eq!(agent.config.name(), Some("calculator-agent"));
        assert_eq!(parsed.environment_ref.unwrap().name, "research");
        assert!(parsed.auto_telemetry);
        assert_eq!(parsed.extension.unwrap().kind, "evaluation");
    }

    #[test]
    fn another_workspace_is_refused_naming_each_field() {
        let spec = json!({
            "agent": "other/research-agent",
            "environment": "other/research",
            "workdir": {
                "base_workdir": "other/project-source",
                "artifact_mounts": [{"ref": "other/config#a.yaml", "mount_path": "a.yaml"}],
            },
        });
        let error = parse_spec(spec, "default").unwrap_err();
        assert!(
            error.problems[0]
                .message
                .contains("names workspace \"other\"; the target namespace is \"default\""),
            "{error}"
        );
        assert_eq!(
            fields(error),
            [
                "agent",
                "environment",
                "workdir.artifact_mounts[0].ref",
                "workdir.base_workdir"
            ]
        );
    }

    #[test]
    fn unknown_fields_are_refused_by_name_in_either_shape() {
        let nemo = json!({
            "agent": "a", "timeout_seconds": 60, "priority": "high",
            "workdir": {"base_workdir": "src", "cache": true,
                        "artifact_mounts": [{"ref": "c", "mount_path": "c", "mode": "ro"}]},
        });
        let error = parse_spec(nemo, "default").unwrap_err();
        assert_eq!(
            fields(error.clone()),
            [
                "priority",
                "workdir.artifact_mounts[0].mode",
                "workdir.cache"
            ]
        );
        assert!(
            error.problems[0]
                .message
                .starts_with("unknown field \"priority\" in the NeMo job spec; accepted: agent,"),
            "{error}"
        );
        // A CRD field in a NeMo job spec is unknown there too.
        let mixed = json!({"agent": "a", "timeoutSeconds": 60});
        assert_eq!(
            fields(parse_spec(mixed, "default").unwrap_err()),
            ["timeoutSeconds"]
        );
        let crd = json!({"agentRef": {"name": "a"}, "priority": "high"});
        assert_eq!(shape_of(&crd), SpecShape::Crd);
        let error = parse_spec(crd, "default").unwrap_err();
        assert_eq!(fields(error), ["spec.priority"]);
    }

    #[test]
    fn schema_problems_of_a_nemo_job_spec_use_its_field_names() {
        let spec = json!({
            "agent": "a",
            "timeout_seconds": "soon",
            "workdir": {"artifact_mounts": [{"ref": "c", "mount_path": 3}]},
        });
        let error = parse_spec(spec, "default").unwrap_err();
        let fields = fields(error);
        assert!(fields.contains(&"timeout_seconds".to_owned()), "{fields:?}");
        assert!(
            fields.contains(&"workdir.artifact_mounts[0].mount_path".to_owned()),
            "{fields:?}"
        );
    }

    #[test]
    fn an_inline_agent_with_two_formats_or_extra_fields_is_refused() {
        let spec = json!({"agent": {
            "config_format": "nemo-agents-spec-v1",
            "config": {"config_format": "agents-spec-v1"},
            "runtime": {"image": "i"},
        }});
        assert_eq!(
            fields(parse_spec(spec, "default").unwrap_err()),
            ["agent.runtime", "agent.config.config_format"]
        );
    }
}
