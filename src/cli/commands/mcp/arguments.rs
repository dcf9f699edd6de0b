//! A tool call's arguments in the tool's own names: decoded, or refused as `invalid_argument` naming the argument; and the command line's errors put back in those names.
//!
//! Every tool takes [`Arguments`], so a value of the wrong type, an unknown argument or a missing
//! one is a tool result (`isError`, errand's error answer as `structuredContent`) that names
//! the argument, for every tool alike. A call runs the command line, whose errors name its
//! flags (`'--timeout-seconds <TIMEOUT_SECONDS>'`); [`respell`] turns them back into the
//! arguments that spelled them (`timeout_seconds`).

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::handler::server::common::{FromContextPart, schema_for_input};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ops::Error;

/// A tool call's arguments: `T`, or the refusal of them in the tool's argument names.
pub struct Arguments<T>(pub Result<T, Error>);

impl<S, T: DeserializeOwned + JsonSchema + 'static> FromContextPart<ToolCallContext<'_, S>>
    for Arguments<T>
{
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        let arguments = context.arguments.take().unwrap_or_default();
        Ok(Self(decode::<T>(&context.name, arguments)))
    }
}

/// The input schema of a tool whose arguments are `T`.
pub fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    schema_for_input::<T>().unwrap_or_else(|e| panic!("the input schema of a tool: {e}"))
}

/// `arguments` of tool `tool` as `T`; refused naming the first argument that is unknown,
/// missing or not of its type (by `T`'s schema, which the tool lists).
fn decode<T: DeserializeOwned + JsonSchema + 'static>(
    tool: &str,
    arguments: JsonObject,
) -> Result<T, Error> {
    let schema = schema::<T>();
    let empty = JsonObject::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let known = || {
        let names: Vec<&str> = properties.keys().map(String::as_str).collect();
        if names.is_empty() {
            format!("{tool} takes no arguments")
        } else {
            format!("the arguments of {tool} are {}", names.join(", "))
        }
    };
    if let Some(unknown) = arguments.keys().find(|k| !properties.contains_key(*k)) {
        return Err(Error::argument(format!(
            "{unknown}: not an argument of {tool}; {}",
            known()
        )));
    }
    let required = schema.get("required").and_then(Value::as_array);
    if let Some(missing) = required
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|r| !arguments.contains_key(*r))
    {
        return Err(Error::argument(format!(
            "{missing}: missing; {tool} needs it"
        )));
    }
    let given = Value::Object(arguments);
    serde_path_to_error::deserialize(&given).map_err(|e| {
        let path = e.path().to_string();
        let field = path.split(['.', '[']).next().unwrap_or_default();
        match (given.get(field), properties.get(field)) {
            (Some(value), Some(property)) => {
                Error::argument(format!("{path}: {value} is not {}", expected(property)))
            }
            _ => Error::argument(format!("{tool}: {}", e.inner())),
        }
    })
}

/// What a value of `property` (a property of an input schema) is, in words.
fn expected(property: &Value) -> &'static str {
    let types: Vec<&str> = match &property["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let non_negative = property["minimum"].as_f64().is_some_and(|m| m >= 0.0);
    match types.into_iter().find(|t| *t != "null") {
        Some("number") => "a number",
        Some("integer") if non_negative => "a whole number, 0 or more",
        Some("integer") => "a whole number",
        Some("string") => "a string",
        Some("boolean") => "true or false",
        Some("array") => "an array",
        Some("object") => "an object",
        _ => "of its type",
    }
}

/// Which tool argument each command-line name spells: a flag (`--timeout-seconds`) or a
/// positional's value name (`<NAME>`), with its argument (`timeout_seconds`).
pub type Spelling = Vec<(&'static str, &'static str)>;

/// Every text of the command line's error answer `error` in the tool's argument names.
pub fn respell_error(error: &mut Value, spelling: &Spelling) {
    match error {
        Value::String(text) => *text = respell(text, spelling),
        Value::Array(items) => items.iter_mut().for_each(|i| respell_error(i, spelling)),
        Value::Object(fields) => fields.values_mut().for_each(|v| respell_error(v, spelling)),
        _ => {}
    }
}

/// `text` with each command-line name of `spelling` as its argument: clap's quoted
/// `'--flag <VALUE>'` and a bare `--flag` alike; clap's `invalid value 'V' for ARG: WHY` starts
/// with the argument, as errand's own messages do.
fn respell(text: &str, spelling: &Spelling) -> String {
    let mut names = spelling.clone();
    names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while let Some(c) = rest.chars().next() {
        if !out.chars().next_back().is_some_and(word) {
            for (name, argument) in &names {
                let Some(mut after) = rest.strip_prefix(name) else {
                    continue;
                };
                if after.chars().next().is_some_and(word) {
                    continue;
                }
                if let Some(value_name) = after.strip_prefix(" <")
                    && let Some(end) = value_name
                        .find('>')
                        .filter(|e| !value_name[..*e].contains(' '))
                {
                    after = &value_name[end + 1..];
                }
                if out.ends_with('\'') && after.starts_with('\'') {
                    out.pop();
                    after = &after[1..];
                }
                out.push_str(argument);
                rest = after;
                continue 'scan;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    argument_first(&out, spelling).unwrap_or(out)
}

/// clap's `invalid value 'V' for ARG: WHY` as `ARG: invalid value 'V': WHY`.
fn argument_first(text: &str, spelling: &Spelling) -> Option<String> {
    let value = text.strip_prefix("invalid value '")?;
    let (value, rest) = value.split_once("' for ")?;
    let (argument, why) = rest.split_once(": ")?;
    spelling
        .iter()
        .any(|(_, a)| *a == argument)
        .then(|| format!("{argument}: invalid value '{value}': {why}"))
}

#[cfg(test)]
mod tests {
    use super::{Spelling, decode, respell};
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Probe {
        name: String,
        until: Option<f64>,
        max_bytes: Option<u64>,
    }

    fn refused(arguments: serde_json::Value) -> String {
        let serde_json::Value::Object(arguments) = arguments else {
            unreachable!()
        };
        let error = decode::<Probe>("probe", arguments).unwrap_err();
        assert_eq!(error.code, "invalid_argument");
        error.message
    }

    #[test]
    fn a_refused_argument_is_named_with_what_it_should_be() {
        assert_eq!(
            refused(json!({"name": "a", "until": "abc"})),
            "until: \"abc\" is not a number"
        );
        assert_eq!(
            refused(json!({"name": "a", "max_bytes": -1})),
            "max_bytes: -1 is not a whole number, 0 or more"
        );
        assert_eq!(
            refused(json!({"name": "a", "colour": 1})),
            "colour: not an argument of probe; the arguments of probe are max_bytes, name, until"
        );
        assert_eq!(refused(json!({})), "name: missing; probe needs it");
        assert_eq!(refused(json!({"name": 5})), "name: 5 is not a string");
    }

    #[test]
    fn command_line_names_become_argument_names() {
        let spelling: Spelling = vec![
            ("--notify-webhook", "notify_webhook"),
            ("--notify-webhook-secret", "notify_webhook_secret"),
            ("--timeout-seconds", "timeout_seconds"),
            ("--workdir.base-workdir", "workdir"),
            ("<RESULT>", "result"),
        ];
        let cases = [
            (
                "invalid value '0' for '--timeout-seconds <TIMEOUT_SECONDS>': 0 is not in 1..=604800",
                "timeout_seconds: invalid value '0': 0 is not in 1..=604800",
            ),
            (
                "the following required arguments were not provided: --notify-webhook-secret <NAME:KEY>",
                "the following required arguments were not provided: notify_webhook_secret",
            ),
            (
                "--workdir.base-workdir /nonexist: the directory does not exist",
                "workdir /nonexist: the directory does not exist",
            ),
            (
                "--notify-webhook: not a URL; see --notify-webhook-secret",
                "notify_webhook: not a URL; see notify_webhook_secret",
            ),
            (
                "invalid value 'x' for '<RESULT>': no",
                "result: invalid value 'x': no",
            ),
            (
                "--timeout-secondsx and a--timeout-seconds",
                "--timeout-secondsx and a--timeout-seconds",
            ),
        ];
        for (text, respelled) in cases {
            assert_eq!(respell(text, &spelling), respelled);
        }
    }
}
