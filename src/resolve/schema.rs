//! An object checked against its CRD's generated OpenAPI schema and CEL rules, the way the API server checks it before anyone else sees it.
//!
//! The local backend has no API server, so it runs the same checks here on what it is given:
//! types, required fields, enums, bounds and patterns, fields the schema does not know (the API
//! server would refuse them under `kubectl`'s strict field validation, or drop them
//! silently), and then the CRD's `x-kubernetes-validations` through kube's client-side CEL.
//! Where the schema keeps unknown fields (`x-kubernetes-preserve-unknown-fields`, as in an
//! Agent's `config`), they stay allowed here too.

use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::problems::Problem;
use crate::api::{
    Agent, AgentDeployment, AgentEnvironment, AgentExecution, AgentExtension, AgentRuntime,
    AgentSchedule, Fileset,
};

/// The errand resources with a CRD schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// `Agent`
    Agent,
    /// `AgentEnvironment`
    AgentEnvironment,
    /// `AgentRuntime`
    AgentRuntime,
    /// `AgentExtension`
    AgentExtension,
    /// `Fileset`
    Fileset,
    /// `AgentExecution`
    AgentExecution,
}

impl Resource {
    /// The resource's kind, as manifests spell it.
    pub fn kind(self) -> &'static str {
        match self {
            Resource::Agent => "Agent",
            Resource::AgentEnvironment => "AgentEnvironment",
            Resource::AgentRuntime => "AgentRuntime",
            Resource::AgentExtension => "AgentExtension",
            Resource::Fileset => "Fileset",
            Resource::AgentExecution => "AgentExecution",
        }
    }

    /// Every errand resource with a CRD schema.
    pub const ALL: [Resource; 6] = [
        Resource::Agent,
        Resource::AgentEnvironment,
        Resource::AgentRuntime,
        Resource::AgentExtension,
        Resource::Fileset,
        Resource::AgentExecution,
    ];

    /// The resource of an `errand.dev/v1alpha1` kind.
    pub fn from_kind(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.kind() == kind)
    }

    /// The `openAPIV3Schema` of the resource's CRD, read once from the committed `crds/` file
    /// (a test keeps it equal to the generated one), which build.rs turns into JSON: generating
    /// it from the Rust types, or parsing the YAML, takes longer than anything else an
    /// `execute --local` does.
    pub fn schema(self) -> &'static Value {
        static SCHEMAS: [OnceLock<Value>; 6] = [const { OnceLock::new() }; 6];
        macro_rules! committed {
            ($crd:literal) => {
                include_str!(concat!(env!("OUT_DIR"), "/", $crd, ".schema.json"))
            };
        }
        let (index, json) = match self {
            Resource::Agent => (0, committed!("agents.errand.dev")),
            Resource::AgentEnvironment => (1, committed!("agentenvironments.errand.dev")),
            Resource::Fileset => (2, committed!("filesets.errand.dev")),
            Resource::AgentExecution => (3, committed!("agentexecutions.errand.dev")),
            Resource::AgentRuntime => (4, committed!("agentruntimes.errand.dev")),
            Resource::AgentExtension => (5, committed!("agentextensions.errand.dev")),
        };
        SCHEMAS[index]
            .get_or_init(|| serde_json::from_str(json).expect("build.rs wrote a committed schema"))
    }

    /// The `openAPIV3Schema` of the CRD generated from the resource's Rust type.
    pub fn generated_schema(self) -> Value {
        let crd = match self {
            Resource::Agent => Agent::crd(),
            Resource::AgentEnvironment => AgentEnvironment::crd(),
            Resource::Fileset => Fileset::crd(),
            Resource::AgentExecution => AgentExecution::crd(),
            Resource::AgentRuntime => AgentRuntime::crd(),
            Resource::AgentExtension => AgentExtension::crd(),
        };
        crd_schema(&crd)
    }
}

/// The `openAPIV3Schema` of a CRD's (only) version.
fn crd_schema(crd: &CustomResourceDefinition) -> Value {
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("every errand CRD has a schema");
    serde_json::to_value(schema).expect("a schema always serializes")
}

/// The fields of `metadata` a manifest may set (Kubernetes' ObjectMeta).
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Every problem the API server would find in `object` (a whole manifest object of
/// `resource`) on create: first its structure against the schema, then, for a well-formed
/// object, the CEL rules. `status` is not checked: the API server ignores it on create.
pub fn check_object(resource: Resource, object: &Value) -> Vec<Problem> {
    static CREATE_RULES: [OnceLock<Value>; 6] = [const { OnceLock::new() }; 6];
    let create_rules =
        CREATE_RULES[resource as usize].get_or_init(|| create_rules(resource.schema()));
    check_against(resource.schema(), create_rules, object)
}

/// Every problem the API server would find in a whole AgentDeployment on create (the local
/// backend's deployments; it is not a kind `apply` takes).
pub fn check_deployment(object: &Value) -> Vec<Problem> {
    static SCHEMAS: OnceLock<(Value, Value)> = OnceLock::new();
    check_whole(&SCHEMAS, AgentDeployment::crd, object)
}

/// Every problem the API server would find in a whole AgentSchedule on create (the local
/// backend's schedules).
pub fn check_schedule(object: &Value) -> Vec<Problem> {
    static SCHEMAS: OnceLock<(Value, Value)> = OnceLock::new();
    check_whole(&SCHEMAS, AgentSchedule::crd, object)
}

/// `object` checked against the schema and create rules of `crd`, both worked out once.
fn check_whole(
    schemas: &'static OnceLock<(Value, Value)>,
    crd: fn() -> CustomResourceDefinition,
    object: &Value,
) -> Vec<Problem> {
    let (schema, rules) = schemas.get_or_init(|| {
        let schema = crd_schema(&crd());
        let rules = create_rules(&schema);
        (schema, rules)
    });
    check_against(schema, rules, object)
}

/// `schema` with only the CEL rules that run on create. A transition rule (one that reads
/// `oldSelf`, without `optionalOldSelf`) is skipped when there is no old object, but the
/// validator would still compile it, and compiling is most of what a check costs.
fn create_rules(schema: &Value) -> Value {
    match schema {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, value)| match (key.as_str(), value) {
                    ("x-kubernetes-validations", Value::Array(rules)) => (
                        key.clone(),
                        rules
                            .iter()
                            .filter(|r| !is_transition_rule(r))
                            .cloned()
                            .collect(),
                    ),
                    _ => (key.clone(), create_rules(value)),
                })
                .collect(),
        ),
        Value::Array(items) => items.iter().map(create_rules).collect(),
        other => other.clone(),
    }
}

/// Whether a rule of `x-kubernetes-validations` only runs on update: it names `oldSelf`
/// and does not opt into running without one. (Read from the text; a test checks the CRDs'
/// rules against the compiled programs' references, which is what the validator goes by.)
fn is_transition_rule(rule: &Value) -> bool {
    let names_old_self = rule["rule"].as_str().is_some_and(|r| r.contains("oldSelf"));
    names_old_self && rule["optionalOldSelf"] != Value::Bool(true)
}

fn check_against(schema: &Value, create_rules: &Value, object: &Value) -> Vec<Problem> {
    let mut object = object.clone();
    if let Some(fields) = object.as_object_mut() {
        fields.remove("status");
    }
    let problems = check_structure(schema, &object);
    if !problems.is_empty() {
        return problems;
    }
    match kube::core::cel::Validator::new().validate(create_rules, &object, None) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| Problem::new(e.field_path, e.message))
            .collect(),
    }
}

/// Every structural problem in `object` against `schema`, an OpenAPI schema of the same subset
/// the CRDs use (for objects errand reads that are not its own, such as a Secret).
pub fn check_structure(schema: &Value, object: &Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    check_value(schema, object, "", true, &mut problems);
    problems
}

/// Reads `value` as a `T`; a failure names the field it is at (`spec.timeoutSeconds`).
pub fn decode<T: DeserializeOwned>(value: Value) -> Result<T, Problem> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        let field = if path == "." { String::new() } else { path };
        Problem::new(field, error.into_inner().to_string())
    })
}

/// Every structural problem in a bare AgentExecution `spec` (types, unknown fields, bounds),
/// with paths starting at `spec`. The CEL rules are left for the complete spec: the command
/// line's flags may still fill in what a spec file leaves out.
pub fn check_execution_spec_structure(spec: &Value) -> Vec<Problem> {
    check_structure(Resource::AgentExecution.schema(), &execution_object(spec))
}

/// Every problem the API server would find in a complete AgentExecution `spec` on create:
/// structure and CEL rules, with paths starting at `spec`.
pub fn check_execution_spec(spec: &Value) -> Vec<Problem> {
    check_object(Resource::AgentExecution, &execution_object(spec))
}

fn execution_object(spec: &Value) -> Value {
    serde_json::json!({
        "apiVersion": format!("{}/{}", crate::api::GROUP, crate::api::VERSION),
        "kind": "AgentExecution",
        "metadata": {"name": "spec"},
        "spec": spec,
    })
}

/// The fields a manifest object may set beside its schema's own: the type and object metadata.
fn check_root_extras(fields: &Map<String, Value>, problems: &mut Vec<Problem>) {
    for key in ["apiVersion", "kind"] {
        if let Some(value) = fields.get(key).filter(|v| !v.is_string()) {
            problems.push(Problem::new(key, type_error(value, "a string")));
        }
    }
    match fields.get("metadata") {
        None | Some(Value::Null) => {}
        Some(Value::Object(metadata)) => {
            for key in metadata.keys() {
                if !OBJECT_META_FIELDS.contains(&key.as_str()) {
                    problems.push(Problem::new(
                        format!("metadata.{key}"),
                        unknown_field(key, &OBJECT_META_FIELDS),
                    ));
                }
            }
            for key in ["name", "namespace", "generateName"] {
                if let Some(value) = metadata.get(key).filter(|v| !v.is_string()) {
                    problems.push(Problem::new(
                        format!("metadata.{key}"),
                        type_error(value, "a string"),
                    ));
                }
            }
        }
        Some(other) => problems.push(Problem::new("metadata", type_error(other, "an object"))),
    }
}

/// Checks `value` at `path` against `schema`, the structural rules only.
fn check_value(schema: &Value, value: &Value, path: &str, root: bool, problems: &mut Vec<Problem>) {
    if value.is_null() {
        // Null is allowed where the schema says `nullable`; elsewhere the API server drops it
        // (and reports a required field that is missing).
        return;
    }
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    let expected = schema.get("type").and_then(Value::as_str);
    if int_or_string {
        if !(is_integer(value) || value.is_string()) {
            problems.push(Problem::new(
                path,
                type_error(value, "an integer or a string"),
            ));
            return;
        }
    } else if let Some(expected) = expected
        && !has_type(value, expected)
    {
        problems.push(Problem::new(path, type_error(value, article(expected))));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let supported = allowed
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        problems.push(Problem::new(
            path,
            format!("Unsupported value: {value}: supported values: {supported}"),
        ));
    }
    match value {
        Value::Object(fields) => check_object_fields(schema, fields, path, root, problems),
        Value::Array(items) => check_items(schema, items, path, problems),
        Value::String(text) => check_string(schema, text, path, problems),
        Value::Number(_) => check_number(schema, value, path, problems),
        _ => {}
    }
}

fn check_object_fields(
    schema: &Value,
    fields: &Map<String, Value>,
    path: &str,
    root: bool,
    problems: &mut Vec<Problem>,
) {
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && fields.len() as u64 > max
    {
        problems.push(Problem::new(
            path,
            format!(
                "Too many: {}: must have at most {max} properties",
                fields.len()
            ),
        ));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let keeps_unknown = flag(schema, "x-kubernetes-preserve-unknown-fields")
        || additional.is_some_and(|a| a == &Value::Bool(true));
    if root {
        check_root_extras(fields, problems);
    }
    for (key, child) in fields {
        if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
            check_value(child_schema, child, &join(path, key), false, problems);
        } else if let Some(entry_schema) = additional.filter(|a| a.is_object()) {
            check_value(
                entry_schema,
                child,
                &format!("{path}[{key}]"),
                false,
                problems,
            );
        } else if root && ["apiVersion", "kind", "metadata"].contains(&key.as_str()) {
        } else if !keeps_unknown {
            let known: Vec<&str> = properties
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            problems.push(Problem::new(join(path, key), unknown_field(key, &known)));
        }
    }
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let nullable = properties
            .and_then(|p| p.get(required))
            .is_some_and(|s| flag(s, "nullable"));
        let present = match fields.get(required) {
            None => false,
            Some(Value::Null) => nullable,
            Some(_) => true,
        };
        if !present {
            problems.push(Problem::new(join(path, required), "Required value"));
        }
    }
}

fn check_items(schema: &Value, items: &[Value], path: &str, problems: &mut Vec<Problem>) {
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && items.len() as u64 > max
    {
        problems.push(Problem::new(
            path,
            format!("Too many: {}: must have at most {max} items", items.len()),
        ));
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        problems.push(Problem::new(
            path,
            format!(
                "Invalid value: {}: should have at least {min} items",
                items.len()
            ),
        ));
    }
    if let Some(item_schema) = schema.get("items") {
        for (index, item) in items.iter().enumerate() {
            check_value(
                item_schema,
                item,
                &format!("{path}[{index}]"),
                false,
                problems,
            );
        }
    }
}

fn check_string(schema: &Value, text: &str, path: &str, problems: &mut Vec<Problem>) {
    let length = text.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && length < min
    {
        problems.push(Problem::new(
            path,
            format!("Invalid value: {text:?}: should be at least {min} chars long"),
        ));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && length > max
    {
        problems.push(Problem::new(
            path,
            format!("Too long: may not be more than {max} bytes"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        // The schemas are errand's own: a pattern that does not compile is a bug, not input.
        let matches = regex::Regex::new(pattern)
            .expect("the CRD patterns compile")
            .is_match(text);
        if !matches {
            problems.push(Problem::new(
                path,
                format!("Invalid value: {text:?}: should match '{pattern}'"),
            ));
        }
    }
}

fn check_number(schema: &Value, value: &Value, path: &str, problems: &mut Vec<Problem>) {
    let Some(number) = value.as_f64() else {
        return;
    };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && number < min
    {
        problems.push(Problem::new(
            path,
            format!("Invalid value: {value}: should be greater than or equal to {min}"),
        ));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && number > max
    {
        problems.push(Problem::new(
            path,
            format!("Invalid value: {value}: should be less than or equal to {max}"),
        ));
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool) == Some(true)
}

/// Whether a JSON number is a whole number, as the API server reads integers (`1e3` is 1000).
fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn has_type(value: &Value, expected: &str) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => is_integer(value),
        "number" => value.is_number(),
        _ => true,
    }
}

fn article(expected: &str) -> &'static str {
    match expected {
        "object" => "an object",
        "array" => "a list",
        "string" => "a string",
        "boolean" => "a boolean",
        "integer" => "an integer",
        "number" => "a number",
        _ => "something else",
    }
}

/// `invalid type: string "30", expected an integer`, as serde words it.
fn type_error(value: &Value, expected: &str) -> String {
    let unexpected = match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) if n.is_f64() => format!("floating point `{n}`"),
        Value::Number(n) => format!("integer `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "sequence".to_owned(),
        Value::Object(_) => "map".to_owned(),
    };
    format!("invalid type: {unexpected}, expected {expected}")
}

fn unknown_field(key: &str, known: &[&str]) -> String {
    if known.is_empty() {
        format!("unknown field {key:?}")
    } else {
        format!("unknown field {key:?}; known fields: {}", known.join(", "))
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn messages(problems: Vec<Problem>) -> Vec<String> {
        problems.iter().map(ToString::to_string).collect()
    }

    fn agent(spec: Value) -> Value {
        json!({"apiVersion": "errand.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "a"}, "spec": spec})
    }

    fn runtime() -> Value {
        json!({"image": "busybox", "command": ["sh"]})
    }

    #[test]
    fn the_committed_crd_schemas_are_the_generated_ones() {
        for resource in Resource::ALL {
            assert!(
                *resource.schema() == resource.generated_schema(),
                "crds/ is stale for {}: regenerate with `cargo run -- crds --out-dir crds`",
                resource.kind()
            );
        }
    }

    /// Every rule in the CRDs, with whether the compiled program reads `oldSelf`.
    fn rules_of(schema: &Value, found: &mut Vec<(Value, bool)>) {
        match schema {
            Value::Object(fields) => {
                for (key, value) in fields {
                    if let ("x-kubernetes-validations", Value::Array(rules)) = (key.as_str(), value)
                    {
                        for rule in rules {
                            let program = kube::core::cel::cel::Program::compile(
                                rule["rule"].as_str().unwrap(),
                            )
                            .unwrap();
                            found
                                .push((rule.clone(), program.references().has_variable("oldSelf")));
                        }
                    } else {
                        rules_of(value, found);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| rules_of(item, found)),
            _ => {}
        }
    }

    #[test]
    fn create_checks_leave_out_exactly_the_transition_rules() {
        let deployment = crd_schema(&AgentDeployment::crd());
        let schemas = Resource::ALL.map(Resource::schema);
        let mut transition_rules = 0;
        for schema in schemas.into_iter().chain([&deployment]) {
            let (mut all, mut kept) = (Vec::new(), Vec::new());
            rules_of(schema, &mut all);
            rules_of(&create_rules(schema), &mut kept);
            for (rule, reads_old_self) in &all {
                let left_out = rule["optionalOldSelf"] != Value::Bool(true) && *reads_old_self;
                assert_eq!(is_transition_rule(rule), left_out, "{rule}");
                transition_rules += usize::from(left_out);
            }
            let expected: Vec<_> = all
                .into_iter()
                .filter(|(r, _)| !is_transition_rule(r))
                .collect();
            assert_eq!(kept, expected);
        }
        assert!(
            transition_rules > 0,
            "the CRDs have transition rules to leave out"
        );
    }

    #[test]
    fn a_typed_read_names_the_field_it_failed_at() {
        let error = decode::<crate::api::AgentExecutionSpec>(
            json!({"workdir": {"artifactMounts": [{"ref": 1}]}}),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "workdir.artifactMounts[0].ref: invalid type: integer `1`, expected a string"
        );
    }

    #[test]
    fn a_type_error_names_its_field() {
        assert_eq!(
            messages(check_execution_spec(
                &json!({"agentRef": {"name": "a"}, "timeoutSeconds": "30"})
            )),
            ["spec.timeoutSeconds: invalid type: string \"30\", expected an integer"]
        );
        assert_eq!(
            messages(check_execution_spec(
                &json!({"agentRef": {"name": "a"}, "timeoutSeconds": 1e3})
            )),
            Vec::<String>::new(),
            "1e3 is an integer to the API server"
        );
    }

    #[test]
    fn unknown_fields_are_named_except_where_the_schema_keeps_them() {
        let problems = messages(check_execution_spec(
            &json!({"agentRef": {"name": "a"}, "timeout_seconds": 1}),
        ));
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with(
                "spec.timeout_seconds: unknown field \"timeout_seconds\"; known fields: "
            ),
            "{problems:?}"
        );
        let kept = agent(json!({"runtime": runtime(),
            "config": {"config_format": "agents-spec-v1", "anything": {"nested": [1]}}}));
        assert_eq!(
            messages(check_object(Resource::Agent, &kept)),
            Vec::<String>::new()
        );
        let unknown_meta = json!({"apiVersion": "errand.dev/v1alpha1", "kind": "Fileset",
            "metadata": {"name": "f", "labelz": {}}, "spec": {}});
        assert!(
            messages(check_object(Resource::Fileset, &unknown_meta))[0]
                .starts_with("metadata.labelz: unknown field \"labelz\""),
        );
    }

    #[test]
    fn enums_bounds_patterns_and_required_fields_read_as_the_api_server_words_them() {
        let bad = agent(json!({
            "runtime": {"image": "", "command": ["sh"], "imagePullPolicy": "Sometimes"},
            "config": {"config_format": "yaml-v9"}}));
        assert_eq!(
            messages(check_object(Resource::Agent, &bad)),
            [
                "spec.config.config_format: Unsupported value: \"yaml-v9\": supported values: \"agents-spec-v1\", \"nemo-agents-spec-v1\"",
                "spec.runtime.image: Invalid value: \"\": should be at least 1 chars long",
                "spec.runtime.imagePullPolicy: Invalid value: \"Sometimes\": should match '^(Always|IfNotPresent|Never)$'",
            ]
        );
        assert_eq!(
            messages(check_object(
                Resource::Agent,
                &agent(json!({"runtime": {}}))
            )),
            [
                "spec.runtime.command: Required value",
                "spec.runtime.image: Required value",
                "spec.config: Required value"
            ]
        );
        assert_eq!(
            messages(check_execution_spec(
                &json!({"agentRef": {"name": "a"}, "timeoutSeconds": 0})
            )),
            ["spec.timeoutSeconds: Invalid value: 0: should be greater than or equal to 1"]
        );
    }

    #[test]
    fn cel_rules_run_on_well_formed_objects() {
        let environment = json!({"apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment",
            "metadata": {"name": "e"},
            "spec": {"compute": {"resources": {"limits": {"ephemeral-storage": "1Gi"}}},
                     "overlay": {"env": {"ERRAND_X": "1"}}}});
        assert_eq!(
            messages(check_object(Resource::AgentEnvironment, &environment)),
            [
                "spec.compute.resources.limits: \"ephemeral-storage\" is not allowed; only cpu, memory and nvidia.com/gpu may be set",
                "spec.overlay.env: \"ERRAND_X\" is reserved: ERRAND_* and AGENT_CONFIG_PATH are reserved for errand's runner",
            ]
        );
        let amounts = |limits: Value| {
            let object = json!({"apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment",
                "metadata": {"name": "e"}, "spec": {"compute": {"resources": {"limits": limits}}}});
            messages(check_object(Resource::AgentEnvironment, &object))
        };
        assert_eq!(
            amounts(json!({"cpu": 2, "memory": "1e3", "nvidia.com/gpu": "1"})),
            Vec::<String>::new()
        );
        for (bad, named) in [
            (json!({"cpu": "abc"}), r#""cpu": "abc""#),
            (json!({"memory": "-1Gi"}), r#""memory": "-1Gi""#),
        ] {
            assert_eq!(
                amounts(bad),
                [format!(
                    "spec.compute.resources.limits: {named} is not a valid amount; amounts must be non-negative quantities, such as 500m, 2 or 4Gi"
                )]
            );
        }
        let float = json!({"apiVersion": "errand.dev/v1alpha1", "kind": "AgentEnvironment",
            "metadata": {"name": "e"}, "spec": {"compute": {"resources": {"limits": {"cpu": 1.5}}}}});
        assert_eq!(
            messages(check_object(Resource::AgentEnvironment, &float)),
            [
                "spec.compute.resources.limits[cpu]: invalid type: floating point `1.5`, expected an integer or a string"
            ]
        );
    }
}
