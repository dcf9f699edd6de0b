//! How the gateway says no: a status code and a JSON error in OpenAI's shape (`message`, `type`, `param`, and `code` a string), so an OpenAI client raises its own error class with the message.

use serde_json::json;

/// A refused request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// A short machine-readable reason (`BadRequest`, `NotFound`, `NotReady`, ...).
    pub reason: &'static str,
    /// What went wrong, naming the field or object.
    pub message: String,
}

impl Refusal {
    /// A refusal with this status, reason and message.
    pub fn new(status: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            reason,
            message: message.into(),
        }
    }

    /// 400: the body is malformed; `message` names the field.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// The JSON body, as OpenAI's API answers errors: `{"error": {"message", "type", "param",
    /// "code"}}`, with `type` OpenAI's class of the status and `code` the reason in snake case.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "error": {
                "message": self.message,
                "type": openai_type(self.status),
                "param": null,
                "code": snake_case(self.reason),
            },
        }))
        .expect("a JSON object serializes")
    }
}

/// OpenAI's error `type` of an HTTP status.
fn openai_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

/// `NotReady` as `not_ready`.
fn snake_case(reason: &str) -> String {
    let mut snake = String::with_capacity(reason.len() + 4);
    for (i, c) in reason.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    snake
}

#[cfg(test)]
mod tests {
    use super::Refusal;

    #[test]
    fn a_refusal_reads_as_an_openai_error() {
        let body: serde_json::Value =
            serde_json::from_slice(&Refusal::new(503, "NotReady", "no ready pod").body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"error": {
                "message": "no ready pod", "type": "api_error", "param": null, "code": "not_ready",
            }})
        );
        for (status, reason, kind, code) in [
            (400, "BadRequest", "invalid_request_error", "bad_request"),
            (401, "Unauthorized", "authentication_error", "unauthorized"),
            (403, "Forbidden", "permission_error", "forbidden"),
            (404, "ModelNotFound", "not_found_error", "model_not_found"),
            (413, "TooLarge", "invalid_request_error", "too_large"),
            (502, "BadGateway", "api_error", "bad_gateway"),
        ] {
            let body: serde_json::Value =
                serde_json::from_slice(&Refusal::new(status, reason, "m").body()).unwrap();
            assert_eq!(body["error"]["type"], kind, "{status}");
            assert_eq!(body["error"]["code"], code, "{status}");
        }
    }
}
