//! The HTTP client of webhook deliveries: one signed POST of a CloudEvent through the outbound policy ([`crate::outbound`]), no redirects, bounded by [`ATTEMPT_TIMEOUT`].

use std::sync::Arc;

use super::cloudevent::{CLOUDEVENTS_CONTENT_TYPE, CloudEvent, SIGNATURE_HEADER, sign};
use super::delivery::{ATTEMPT_TIMEOUT, AttemptOutcome, Unanswered};
use crate::outbound::{Failure, OutboundPolicy, TenantClient};

/// Makes webhook attempts; one per controller, its connections reused.
#[derive(Clone)]
pub struct WebhookSender {
    client: TenantClient,
}

/// One attempt: what the tenant sees, and what only the controller's log gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The outcome, in classes.
    pub outcome: AttemptOutcome,
    /// Why it got no answer, in full (addresses included; never the URL, which may carry a
    /// token).
    pub detail: Option<String>,
}

impl WebhookSender {
    /// A sender whose attempts reach only the addresses `policy` allows, follow no redirects
    /// (the signed event goes only where the spec says) and give up after [`ATTEMPT_TIMEOUT`].
    pub fn new(policy: Arc<OutboundPolicy>) -> Self {
        Self {
            client: TenantClient::new(policy, ATTEMPT_TIMEOUT),
        }
    }

    /// POSTs `event` to `url`, signed with `key`: one attempt.
    pub async fn attempt(&self, url: &url::Url, key: &[u8], event: &CloudEvent) -> Attempt {
        let request = match self.client.post(url) {
            Ok(request) => request,
            Err(refused) => {
                return Attempt {
                    outcome: AttemptOutcome::Unanswered(Unanswered::RefusedByPolicy),
                    detail: Some(refused.to_string()),
                };
            }
        };
        let body = event.body();
        let request = request
            .header(http::header::CONTENT_TYPE, CLOUDEVENTS_CONTENT_TYPE)
            .header(SIGNATURE_HEADER, sign(key, &body))
            .body(body);
        match request.send().await {
            Ok(response) => Attempt {
                outcome: AttemptOutcome::Answered(response.status().as_u16()),
                detail: None,
            },
            Err(error) => {
                let why = match Failure::of(&error) {
                    Failure::RefusedByPolicy => Unanswered::RefusedByPolicy,
                    Failure::Timeout => Unanswered::Timeout,
                    Failure::Unreachable => Unanswered::Unreachable,
                };
                Attempt {
                    outcome: AttemptOutcome::Unanswered(why),
                    detail: Some(describe(error.without_url())),
                }
            }
        }
    }
}

/// `error` with its causes, which say what actually failed (refused, DNS, TLS, the policy).
fn describe(error: reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
