//! The HTTP client of webhook deliveries: one signed POST of a CloudEvent, no redirects, bounded by [`ATTEMPT_TIMEOUT`].

use super::cloudevent::{CLOUDEVENTS_CONTENT_TYPE, CloudEvent, SIGNATURE_HEADER, sign};
use super::delivery::{ATTEMPT_TIMEOUT, AttemptOutcome};

/// Makes webhook attempts; one per controller, its connections reused.
#[derive(Clone)]
pub struct WebhookSender {
    client: reqwest::Client,
}

impl Default for WebhookSender {
    fn default() -> Self {
        Self::new()
    }
}

impl WebhookSender {
    /// A client that follows no redirects (the signed event goes only where the spec says)
    /// and gives up on an attempt after [`ATTEMPT_TIMEOUT`].
    pub fn new() -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(ATTEMPT_TIMEOUT)
            .connect_timeout(ATTEMPT_TIMEOUT)
            .user_agent(concat!("errand/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("a TLS client with the native roots builds");
        Self { client }
    }

    /// POSTs `event` to `url`, signed with `key`: one attempt.
    pub async fn attempt(&self, url: &str, key: &[u8], event: &CloudEvent) -> AttemptOutcome {
        let body = event.body();
        let request = self
            .client
            .post(url)
            .header(http::header::CONTENT_TYPE, CLOUDEVENTS_CONTENT_TYPE)
            .header(SIGNATURE_HEADER, sign(key, &body))
            .body(body);
        match request.send().await {
            Ok(response) => AttemptOutcome::Answered(response.status().as_u16()),
            Err(error) => AttemptOutcome::Unanswered(describe(&error)),
        }
    }
}

/// `error` with its causes, which say what actually failed (refused, DNS, TLS).
fn describe(error: &reqwest::Error) -> String {
    let mut text = if error.is_timeout() {
        format!("no answer within {}s", ATTEMPT_TIMEOUT.as_secs())
    } else {
        error.to_string()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
