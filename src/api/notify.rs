//! Completion notifications: the event every backend sends (`execution.finished`, `execution.output_matched`) in the one CloudEvents 1.0 envelope every sink gets, and on the cluster an execution's webhook sink and how its delivery went.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::phase::Phase;

/// Event type of a finished run.
pub const EXECUTION_FINISHED: &str = "execution.finished";
/// Event type of an output line that matched a watch (local runs).
pub const OUTPUT_MATCHED: &str = "execution.output_matched";
/// The longest webhook URL accepted.
pub const MAX_WEBHOOK_URL_BYTES: usize = 2048;
/// The `Content-Type` of a structured-mode CloudEvent in JSON.
pub const CLOUDEVENTS_CONTENT_TYPE: &str = "application/cloudevents+json";
/// Prefix of the CloudEvent `type` (reverse DNS of errand's API group).
const CLOUDEVENT_TYPE_PREFIX: &str = "dev.errand.";

/// What happened to an execution: the `data` of the CloudEvent every sink receives (the local
/// command and file sinks, the cluster's webhook).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExecutionEvent {
    /// `execution.finished` or `execution.output_matched`.
    #[serde(rename = "type")]
    pub kind: String,
    /// When it happened (a finished event: when the run ended).
    pub time: jiff::Timestamp,
    /// The execution's name.
    pub execution: String,
    /// Its namespace.
    pub namespace: String,
    /// Its uid.
    pub uid: String,
    /// Its phase then.
    pub phase: Phase,
    /// How it ended (finished events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The agent's exit code (finished events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The line that matched (output-match events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<MatchedLine>,
}

/// A CloudEvent 1.0 in structured mode, the one envelope of every notification (a local
/// run's command and file sinks, a cluster's webhook): the attributes, and the event as `data`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CloudEvent {
    /// Always `1.0`.
    pub specversion: String,
    /// `<uid>/<event type>` for the one `execution.finished` of a run (the same on every
    /// attempt of its delivery); an output match adds the nanosecond it was seen
    /// (`<uid>/execution.output_matched/<ns>`), so each of a run's matches has its own.
    pub id: String,
    /// The collection the execution belongs to:
    /// `/apis/errand.dev/v1alpha1/namespaces/<ns>/agentexecutions`.
    pub source: String,
    /// `dev.errand.execution.finished` or `dev.errand.execution.output_matched`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The execution's name.
    pub subject: String,
    /// When it happened (for a finished run: when it ended).
    pub time: jiff::Timestamp,
    /// Always `application/json`.
    pub datacontenttype: String,
    /// What happened.
    pub data: ExecutionEvent,
}

impl CloudEvent {
    /// `event` wrapped as a CloudEvent: the same attributes for the same event on every backend.
    pub fn of(event: ExecutionEvent) -> Self {
        let id = if event.kind == EXECUTION_FINISHED {
            format!("{}/{}", event.uid, event.kind)
        } else {
            format!(
                "{}/{}/{}",
                event.uid,
                event.kind,
                event.time.as_nanosecond()
            )
        };
        Self {
            specversion: "1.0".into(),
            id,
            source: format!(
                "/apis/{}/{}/namespaces/{}/agentexecutions",
                super::GROUP,
                super::VERSION,
                event.namespace
            ),
            kind: format!("{CLOUDEVENT_TYPE_PREFIX}{}", event.kind),
            subject: event.execution.clone(),
            time: event.time,
            datacontenttype: "application/json".into(),
            data: event,
        }
    }

    /// The event as JSON bytes: the same bytes for the same event, so a signature over them
    /// stays valid on every attempt.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a CloudEvent serializes")
    }
}

/// The output line an event reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MatchedLine {
    /// The watch's pattern.
    pub pattern: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The line, without its newline.
    pub line: String,
}

/// Where an execution's notifications go (cluster).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotifySpec {
    /// An HTTP endpoint the controller POSTs the `execution.finished` CloudEvent to, signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSink>,
}

/// A webhook the controller delivers the run's end to: a CloudEvents 1.0 structured-mode JSON
/// POST, signed with HMAC-SHA256 in `X-Errand-Signature: sha256=<hex>`, retried with backoff.
/// Exactly one of `url` or `urlFrom`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("(has(self.url) ? 1 : 0) + (has(self.urlFrom) ? 1 : 0) == 1").message("exactly one of url or urlFrom must be set"))]
#[serde(rename_all = "camelCase")]
pub struct WebhookSink {
    /// The `https://` (or `http://`) URL to POST to, at most 2048 bytes, without user
    /// information (credentials belong in the signing Secret, not in the spec). Only
    /// addresses the operator's outbound policy allows are reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_WEBHOOK_URL_BYTES))]
    #[x_kube(validation = Rule::new("self.startsWith('https://') || self.startsWith('http://')").message("url must start with https:// or http://"))]
    pub url: Option<String>,
    /// The Secret key (in this namespace) whose value is the URL, for a URL that carries a
    /// token in its path or query (as chat services' incoming webhooks do). The controller
    /// reads it when it delivers; the value never appears in the execution, its status, events
    /// or the controller's log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_from: Option<SecretKeyRef>,
    /// The Secret key (in this namespace) whose value signs each delivery. The controller
    /// reads it when it delivers; it is never copied into the execution, its snapshot or status.
    pub signing_secret_ref: SecretKeyRef,
}

/// A key of a Secret in the execution's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in its `data`.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// How the execution's notifications went (cluster).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotifyStatus {
    /// The delivery of the `execution.finished` event to `spec.notify.webhook`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookDelivery>,
}

/// Where a webhook delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeliveryState {
    /// Not delivered yet; another attempt comes at `nextAttemptTime`.
    Pending,
    /// The endpoint answered 2xx.
    Delivered,
    /// Given up: the attempts ran out, or the endpoint refused it for good (a 4xx other than
    /// 408 and 429, or a redirect).
    Failed,
}

/// The record of one webhook delivery: enough to see what the endpoint answered, never the
/// signing key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// The CloudEvent's `id`, the same on every attempt, so a receiver can drop duplicates.
    pub event_id: String,
    /// Where the delivery stands.
    pub state: DeliveryState,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the last attempt was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt_time: Option<Time>,
    /// The HTTP status the endpoint answered last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status_code: Option<u16>,
    /// Why the last attempt failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the endpoint accepted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_time: Option<Time>,
    /// When the next attempt is due (state `Pending`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_time: Option<Time>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, time: &str) -> ExecutionEvent {
        ExecutionEvent {
            kind: kind.into(),
            time: time.parse().unwrap(),
            execution: "run-1".into(),
            namespace: "default".into(),
            uid: "0c5e".into(),
            phase: Phase::Running,
            reason: None,
            exit_code: None,
            matched: Some(MatchedLine {
                pattern: "ready".into(),
                stream: "stdout".into(),
                line: "ready".into(),
            }),
        }
    }

    #[test]
    fn each_output_match_has_its_own_id_and_only_spec_attributes() {
        let first = CloudEvent::of(event(OUTPUT_MATCHED, "2026-12-01T00:00:00.000000001Z"));
        let second = CloudEvent::of(event(OUTPUT_MATCHED, "2026-12-01T00:00:00.000000002Z"));
        assert_eq!(
            first.id,
            "0c5e/execution.output_matched/1796083200000000001"
        );
        assert_ne!(first.id, second.id);
        assert_eq!(first.kind, "dev.errand.execution.output_matched");
        let json: serde_json::Value = serde_json::from_slice(&first.body()).unwrap();
        let attributes: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            attributes,
            [
                "data",
                "datacontenttype",
                "id",
                "source",
                "specversion",
                "subject",
                "time",
                "type"
            ],
            "no extension attributes"
        );
    }
}
