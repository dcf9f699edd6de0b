//! The bodies the gateway accepts, checked before anything is sent to an agent: a malformed one is refused with 400 naming its field.
//!
//! Pure. Invoke and chat completions bodies are passed on as they came once checked; a chat
//! turn is read into a [`ChatTurn`] the gateway adds to its session.

use serde_json::{Map, Value};

use super::refusal::Refusal;

/// The roles OpenAI's chat completions accept.
pub const CHAT_ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];
/// The longest session name.
pub const MAX_SESSION_NAME: usize = 63;

/// One turn of a named session: `{"session": "...", "message": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatTurn {
    /// The session's name: lowercase letters, digits and `-`, at most 63.
    pub session: String,
    /// What the user says.
    pub message: String,
}

fn object(body: &[u8]) -> Result<Map<String, Value>, Refusal> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(other) => Err(Refusal::bad_request(format!(
            "the body must be a JSON object, not {}",
            kind(&other)
        ))),
        Err(e) => Err(Refusal::bad_request(format!("the body is not JSON: {e}"))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn string<'a>(object: &'a Map<String, Value>, field: &str) -> Result<&'a str, Refusal> {
    match object.get(field) {
        Some(Value::String(text)) => Ok(text),
        None => Err(Refusal::bad_request(format!(
            "{field}: is required (a string)"
        ))),
        Some(other) => Err(Refusal::bad_request(format!(
            "{field}: must be a string, not {}",
            kind(other)
        ))),
    }
}

/// Checks an invoke body: `{"input": string, ...}`.
pub fn invoke(body: &[u8]) -> Result<(), Refusal> {
    string(&object(body)?, "input").map(|_| ())
}

/// Reads a chat turn.
pub fn chat_turn(body: &[u8]) -> Result<ChatTurn, Refusal> {
    let object = object(body)?;
    let session = string(&object, "session")?;
    session_name(session)?;
    let message = string(&object, "message")?;
    Ok(ChatTurn {
        session: session.to_owned(),
        message: message.to_owned(),
    })
}

/// Checks a session name: it becomes part of a store key.
pub fn session_name(name: &str) -> Result<(), Refusal> {
    let valid = !name.is_empty()
        && name.len() <= MAX_SESSION_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(Refusal::bad_request(format!(
            "session: {name:?} must be 1 to {MAX_SESSION_NAME} lowercase letters, digits and \
             '-', starting and ending with a letter or digit"
        )))
    }
}

/// Checks an OpenAI chat completions body and returns whether it asks for a stream.
pub fn chat_completions(body: &[u8]) -> Result<bool, Refusal> {
    let object = object(body)?;
    let messages = match object.get("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => messages,
        Some(Value::Array(_)) => {
            return Err(Refusal::bad_request("messages: must not be empty"));
        }
        None => {
            return Err(Refusal::bad_request(
                "messages: is required (an array of {role, content})",
            ));
        }
        Some(other) => {
            return Err(Refusal::bad_request(format!(
                "messages: must be an array, not {}",
                kind(other)
            )));
        }
    };
    for (index, message) in messages.iter().enumerate() {
        let Value::Object(message) = message else {
            return Err(Refusal::bad_request(format!(
                "messages[{index}]: must be an object, not {}",
                kind(message)
            )));
        };
        let role = string(message, "role")
            .map_err(|r| Refusal::bad_request(format!("messages[{index}].{}", r.message)))?;
        if !CHAT_ROLES.contains(&role) {
            return Err(Refusal::bad_request(format!(
                "messages[{index}].role: {role:?} is not one of {}",
                CHAT_ROLES.join(", ")
            )));
        }
        match message.get("content") {
            Some(Value::String(_) | Value::Array(_) | Value::Null) => {}
            None if role == "assistant" => {}
            None => {
                return Err(Refusal::bad_request(format!(
                    "messages[{index}].content: is required"
                )));
            }
            Some(other) => {
                return Err(Refusal::bad_request(format!(
                    "messages[{index}].content: must be a string or an array of parts, not {}",
                    kind(other)
                )));
            }
        }
    }
    match object.get("stream") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(stream)) => Ok(*stream),
        Some(other) => Err(Refusal::bad_request(format!(
            "stream: must be a boolean, not {}",
            kind(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(result: Result<impl std::fmt::Debug, Refusal>) -> String {
        let refusal = result.expect_err("refused");
        assert_eq!(refusal.status, 400);
        refusal.message
    }

    #[test]
    fn a_malformed_invoke_names_its_field() {
        assert!(invoke(br#"{"input": "hi"}"#).is_ok());
        assert_eq!(refused(invoke(b"{}")), "input: is required (a string)");
        assert_eq!(
            refused(invoke(br#"{"input": 3}"#)),
            "input: must be a string, not a number"
        );
        assert!(refused(invoke(b"nope")).starts_with("the body is not JSON"));
    }

    #[test]
    fn a_chat_turn_needs_a_session_name_fit_for_a_key_and_a_message() {
        let turn = chat_turn(br#"{"session": "s-1", "message": "hello"}"#).unwrap();
        assert_eq!(
            (turn.session.as_str(), turn.message.as_str()),
            ("s-1", "hello")
        );
        assert!(
            refused(chat_turn(br#"{"session": "../x", "message": "m"}"#)).starts_with("session: ")
        );
        assert_eq!(
            refused(chat_turn(br#"{"session": "s"}"#)),
            "message: is required (a string)"
        );
    }

    #[test]
    fn a_malformed_chat_completion_names_the_message_and_field() {
        let ok = br#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
        assert_eq!(chat_completions(ok), Ok(false));
        let stream = br#"{"messages": [{"role": "user", "content": "hi"}], "stream": true}"#;
        assert_eq!(chat_completions(stream), Ok(true));
        assert_eq!(
            refused(chat_completions(br#"{"messages": []}"#)),
            "messages: must not be empty"
        );
        assert_eq!(
            refused(chat_completions(
                br#"{"messages": [{"role": "user"}, {"role": "robot", "content": "x"}]}"#
            )),
            "messages[0].content: is required"
        );
        assert_eq!(
            refused(chat_completions(
                br#"{"messages": [{"role": "robot", "content": "x"}]}"#
            )),
            "messages[0].role: \"robot\" is not one of system, developer, user, assistant, tool"
        );
        assert_eq!(
            refused(chat_completions(br#"{"messages": [{"content": "x"}]}"#)),
            "messages[0].role: is required (a string)"
        );
        assert_eq!(
            refused(chat_completions(
                br#"{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}"#
            )),
            "stream: must be a boolean, not a string"
        );
    }
}
