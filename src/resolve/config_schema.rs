//! The JSON Schema subset an AgentExtension's `configSchema` is written in: checking that a schema is well formed, and checking a config against it.
//!
//! The subset is what extension settings need and no more: `type` (`object`, `array`,
//! `string`, `integer`, `number`, `boolean`, `null`), `properties`, `required`,
//! `additionalProperties` (a boolean or a schema), `items`, `enum`, `minimum`, `maximum`,
//! `minLength`, `maxLength`, `minItems`, `maxItems`, and the annotations `description`,
//! `title` and `default`. A keyword outside it is refused when the AgentExtension is admitted,
//! so a schema never silently means less than its author wrote.

use serde_json::{Map, Value};

use super::problems::Problem;

/// The `type`s the subset knows.
pub const SCHEMA_TYPES: [&str; 7] = [
    "object", "array", "string", "integer", "number", "boolean", "null",
];

/// The keywords the subset knows.
pub const SCHEMA_KEYWORDS: [&str; 15] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "description",
    "title",
    "default",
];

/// Every problem that makes `schema` not a schema of the subset; each names its keyword under
/// `field` (for example `spec.configSchema.properties.depth.type`).
pub fn check_schema(schema: &Map<String, Value>, field: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    check_schema_into(schema, field, &mut problems);
    problems
}

fn check_schema_into(schema: &Map<String, Value>, field: &str, problems: &mut Vec<Problem>) {
    let mut push = |keyword: &str, message: String| {
        problems.push(Problem::new(format!("{field}.{keyword}"), message));
    };
    let mut nested: Vec<(String, &Value)> = Vec::new();
    for (keyword, value) in schema {
        match keyword.as_str() {
            "type" => {
                if !value.as_str().is_some_and(|t| SCHEMA_TYPES.contains(&t)) {
                    push(
                        keyword,
                        format!("{value} must be one of {}", SCHEMA_TYPES.join(", ")),
                    );
                }
            }
            "properties" => match value.as_object() {
                Some(properties) => nested.extend(
                    properties
                        .iter()
                        .map(|(name, sub)| (format!("{field}.properties.{name}"), sub)),
                ),
                None => push(keyword, format!("{value} must be an object of schemas")),
            },
            "required" => {
                let names = value.as_array().filter(|a| a.iter().all(Value::is_string));
                if names.is_none() {
                    push(keyword, format!("{value} must be a list of property names"));
                }
            }
            "additionalProperties" => match value {
                Value::Bool(_) => {}
                Value::Object(_) => nested.push((format!("{field}.{keyword}"), value)),
                _ => push(keyword, format!("{value} must be a boolean or a schema")),
            },
            "items" => nested.push((format!("{field}.{keyword}"), value)),
            "enum" => {
                if value.as_array().is_none_or(|a| a.is_empty()) {
                    push(
                        keyword,
                        format!("{value} must be a non-empty list of values"),
                    );
                }
            }
            "minimum" | "maximum" => {
                if !value.is_number() {
                    push(keyword, format!("{value} must be a number"));
                }
            }
            "minLength" | "maxLength" | "minItems" | "maxItems" => {
                if value.as_u64().is_none() {
                    push(keyword, format!("{value} must be a non-negative integer"));
                }
            }
            "description" | "title" => {
                if !value.is_string() {
                    push(keyword, format!("{value} must be a string"));
                }
            }
            "default" => {}
            other => push(
                other,
                format!(
                    "is not a keyword errand checks; the config schema may use: {}",
                    SCHEMA_KEYWORDS.join(", ")
                ),
            ),
        }
    }
    for (sub_field, sub) in nested {
        match sub.as_object() {
            Some(sub) => check_schema_into(sub, &sub_field, problems),
            None => problems.push(Problem::new(
                sub_field,
                format!("{sub} must be a schema (an object)"),
            )),
        }
    }
}

/// Every way `value` (at `field`) does not meet `schema`, a schema [`check_schema`] accepted.
pub fn validate(schema: &Map<String, Value>, value: &Value, field: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    validate_into(schema, value, field, &mut problems);
    problems
}

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(value: &Value, wanted: &str) -> bool {
    let actual = type_of(value);
    actual == wanted || (wanted == "number" && actual == "integer")
}

fn validate_into(
    schema: &Map<String, Value>,
    value: &Value,
    field: &str,
    problems: &mut Vec<Problem>,
) {
    let mut push = |message: String| problems.push(Problem::new(field, message));
    if let Some(wanted) = schema.get("type").and_then(Value::as_str)
        && !has_type(value, wanted)
    {
        push(format!("{value} must be of type {wanted}"));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let allowed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        push(format!("{value} must be one of {}", allowed.join(", ")));
    }
    let bound = |keyword: &str| schema.get(keyword).and_then(Value::as_f64);
    if let Some(number) = value.as_f64() {
        if let Some(minimum) = bound("minimum")
            && number < minimum
        {
            push(format!("{value} must be at least {}", schema["minimum"]));
        }
        if let Some(maximum) = bound("maximum")
            && number > maximum
        {
            push(format!("{value} must be at most {}", schema["maximum"]));
        }
    }
    let count = |keyword: &str| schema.get(keyword).and_then(Value::as_u64);
    let length = match value {
        Value::String(text) => Some((
            text.chars().count() as u64,
            "minLength",
            "maxLength",
            "characters",
        )),
        Value::Array(items) => Some((items.len() as u64, "minItems", "maxItems", "items")),
        _ => None,
    };
    if let Some((len, min_keyword, max_keyword, unit)) = length {
        if let Some(min) = count(min_keyword)
            && len < min
        {
            push(format!("has {len} {unit}; at least {min} are required"));
        }
        if let Some(max) = count(max_keyword)
            && len > max
        {
            push(format!("has {len} {unit}; at most {max} are allowed"));
        }
    }
    if let (Value::Array(items), Some(Value::Object(item_schema))) = (value, schema.get("items")) {
        for (index, item) in items.iter().enumerate() {
            validate_into(item_schema, item, &format!("{field}[{index}]"), problems);
        }
    }
    if let Value::Object(object) = value {
        validate_object(schema, object, field, problems);
    }
}

fn validate_object(
    schema: &Map<String, Value>,
    object: &Map<String, Value>,
    field: &str,
    problems: &mut Vec<Problem>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array);
    for name in required.into_iter().flatten().filter_map(Value::as_str) {
        if !object.contains_key(name) {
            problems.push(Problem::new(
                format!("{field}.{name}"),
                "is required by the extension's config schema",
            ));
        }
    }
    for (name, item) in object {
        let item_field = format!("{field}.{name}");
        match (
            properties.and_then(|p| p.get(name)),
            schema.get("additionalProperties"),
        ) {
            (Some(Value::Object(sub)), _) => validate_into(sub, item, &item_field, problems),
            (_, Some(Value::Bool(false))) => {
                let known: Vec<&str> = properties
                    .into_iter()
                    .flat_map(|p| p.keys().map(String::as_str))
                    .collect();
                problems.push(Problem::new(
                    item_field,
                    format!(
                        "is not a setting of the extension; its config schema allows: {}",
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
            (_, Some(Value::Object(sub))) => validate_into(sub, item, &item_field, problems),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn fields(problems: &[Problem]) -> Vec<&str> {
        problems.iter().map(|p| p.field.as_str()).collect()
    }

    fn report_schema() -> Map<String, Value> {
        schema(json!({
            "type": "object",
            "description": "how the report is made",
            "properties": {
                "format": {"type": "string", "enum": ["markdown", "json"]},
                "maxFiles": {"type": "integer", "minimum": 1, "maximum": 1000},
                "title": {"type": "string", "minLength": 1, "maxLength": 80},
                "include": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "ratio": {"type": "number"},
            },
            "required": ["format"],
            "additionalProperties": false,
        }))
    }

    #[test]
    fn a_schema_of_the_subset_is_well_formed() {
        assert_eq!(check_schema(&report_schema(), "spec.configSchema"), []);
    }

    #[test]
    fn a_malformed_schema_names_each_bad_keyword() {
        let bad = schema(json!({
            "type": "map",
            "properties": {
                "depth": {"type": "integer", "minimum": "one"},
                "tags": {"items": 3},
                "name": {"pattern": "^[a-z]+$"},
            },
            "required": "format",
            "additionalProperties": "no",
            "enum": [],
            "maxLength": -1,
            "$ref": "#/x",
        }));
        let problems = check_schema(&bad, "spec.configSchema");
        assert_eq!(
            fields(&problems),
            [
                "spec.configSchema.$ref",
                "spec.configSchema.additionalProperties",
                "spec.configSchema.enum",
                "spec.configSchema.maxLength",
                "spec.configSchema.required",
                "spec.configSchema.type",
                "spec.configSchema.properties.depth.minimum",
                "spec.configSchema.properties.name.pattern",
                "spec.configSchema.properties.tags.items",
            ]
        );
        assert!(
            problems[0].message.contains("not a keyword errand checks"),
            "{}",
            problems[0].message
        );
        assert!(
            problems[5]
                .message
                .contains("\"map\" must be one of object"),
            "{}",
            problems[5].message
        );
    }

    #[test]
    fn a_config_that_meets_the_schema_has_no_problems() {
        let config = json!({"format": "markdown", "maxFiles": 10, "title": "R", "include": ["a"], "ratio": 2});
        assert_eq!(
            validate(&report_schema(), &config, "spec.extension.config"),
            []
        );
    }

    #[test]
    fn a_config_that_breaks_the_schema_names_each_field() {
        let config = json!({
            "maxFiles": 0,
            "title": "",
            "include": ["a", 2, "c"],
            "ratio": "big",
            "colour": "red",
        });
        let problems = validate(&report_schema(), &config, "spec.extension.config");
        assert_eq!(
            fields(&problems),
            [
                "spec.extension.config.format",
                "spec.extension.config.colour",
                "spec.extension.config.include",
                "spec.extension.config.include[1]",
                "spec.extension.config.maxFiles",
                "spec.extension.config.ratio",
                "spec.extension.config.title",
            ]
        );
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(messages[0], "is required by the extension's config schema");
        assert!(
            messages[1].contains("allows: format, include, maxFiles, ratio, title"),
            "{}",
            messages[1]
        );
        assert_eq!(messages[2], "has 3 items; at most 2 are allowed");
        assert_eq!(messages[3], "2 must be of type string");
        assert_eq!(messages[4], "0 must be at least 1");
        assert_eq!(messages[5], "\"big\" must be of type number");
        assert_eq!(messages[6], "has 0 characters; at least 1 are required");
    }

    #[test]
    fn an_enum_and_a_wrong_top_level_type_are_reported() {
        let problems = validate(
            &report_schema(),
            &json!({"format": "pdf"}),
            "spec.extension.config",
        );
        assert_eq!(
            problems[0].message,
            "\"pdf\" must be one of \"markdown\", \"json\""
        );
        let problems = validate(&report_schema(), &json!([1]), "spec.extension.config");
        assert_eq!(fields(&problems), ["spec.extension.config"]);
    }
}
