//! How the gateway says no: a status code and a JSON error in OpenAI's shape, so an OpenAI client shows the message.

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

    /// The JSON body: `{"error": {"message", "type", "code"}}`.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "error": {"message": self.message, "type": self.reason, "code": self.status},
        }))
        .expect("a JSON object serializes")
    }
}
