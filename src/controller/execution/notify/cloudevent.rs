//! The `execution.finished` event of a terminal execution, in the CloudEvent envelope local runs use too ([`crate::api::CloudEvent`]), and its HMAC-SHA256 signature.

use crate::api::{AgentExecution, EXECUTION_FINISHED, ExecutionEvent};
pub use crate::api::{CLOUDEVENTS_CONTENT_TYPE, CloudEvent};
use crate::runner::outcome::Outcome;

/// The header carrying `sha256=<hex>`: HMAC-SHA256 of the request body, keyed with the
/// signing Secret's value.
pub const SIGNATURE_HEADER: &str = "X-Errand-Signature";

/// The `execution.finished` event of `execution`, once it is terminal (`None` before). Its
/// time is the run's `completionTime`, so every attempt sends the same event.
pub fn finished_event(execution: &AgentExecution) -> Option<ExecutionEvent> {
    let status = execution.status.as_ref()?;
    let phase = status.phase.filter(|p| p.is_terminal())?;
    let time = status
        .completion_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| execution.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    Some(ExecutionEvent {
        kind: EXECUTION_FINISHED.into(),
        time,
        execution: execution.metadata.name.clone()?,
        namespace: execution.metadata.namespace.clone()?,
        uid: execution.metadata.uid.clone()?,
        phase,
        reason: Outcome::of_status(status).map(|o| o.reason.as_str().to_owned()),
        exit_code: status.exit_code,
        matched: None,
    })
}

/// The signature header's value for `body` signed with `key`: `sha256=<hex>`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    format!(
        "sha256={}",
        hex::encode(ring::hmac::sign(&key, body).as_ref())
    )
}

/// Whether `header` is the signature of `body` with `key` (compared in constant time): what a
/// receiver checks.
pub fn verify(key: &[u8], body: &[u8], header: &str) -> bool {
    let Some(tag) = header
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
    else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    ring::hmac::verify(&key, body, &tag).is_ok()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;
    use crate::api::{AgentExecutionSpec, AgentExecutionStatus, Phase};

    fn finished(phase: Phase, reason: &str) -> AgentExecution {
        let mut execution = AgentExecution::new("run-1", AgentExecutionSpec::default());
        execution.metadata.namespace = Some("team".into());
        execution.metadata.uid = Some("0c5e".into());
        let ended: jiff::Timestamp = "2026-11-30T22:00:00Z".parse().unwrap();
        execution.status = Some(AgentExecutionStatus {
            phase: Some(phase),
            completion_time: Some(Time(ended)),
            exit_code: Some(3),
            conditions: vec![Condition {
                type_: "Failed".into(),
                status: "True".into(),
                reason: reason.into(),
                message: String::new(),
                last_transition_time: Time(ended),
                observed_generation: None,
            }],
            ..AgentExecutionStatus::default()
        });
        execution
    }

    #[test]
    fn a_finished_run_becomes_a_cloudevent_with_stable_attributes() {
        let event = finished_event(&finished(Phase::Failed, "AgentFailed")).unwrap();
        let cloud = CloudEvent::of(event);
        let json: serde_json::Value = serde_json::from_slice(&cloud.body()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "specversion": "1.0",
                "id": "0c5e/execution.finished",
                "source": "/apis/errand.dev/v1alpha1/namespaces/team/agentexecutions",
                "type": "dev.errand.execution.finished",
                "subject": "run-1",
                "time": "2026-11-30T22:00:00Z",
                "datacontenttype": "application/json",
                "data": {
                    "type": "execution.finished",
                    "time": "2026-11-30T22:00:00Z",
                    "execution": "run-1",
                    "namespace": "team",
                    "uid": "0c5e",
                    "phase": "Failed",
                    "reason": "AgentFailed",
                    "exit_code": 3,
                }
            })
        );
        let again =
            CloudEvent::of(finished_event(&finished(Phase::Failed, "AgentFailed")).unwrap());
        assert_eq!(
            cloud.body(),
            again.body(),
            "every attempt sends the same bytes"
        );
    }

    #[test]
    fn a_running_execution_has_no_finished_event() {
        let mut execution = finished(Phase::Failed, "AgentFailed");
        execution.status.as_mut().unwrap().phase = Some(Phase::Running);
        assert_eq!(finished_event(&execution), None);
    }

    #[test]
    fn signatures_verify_only_with_the_same_key_and_body() {
        let header = sign(b"key", b"{\"a\":1}");
        assert!(header.starts_with("sha256="));
        assert_eq!(header.len(), "sha256=".len() + 64);
        assert!(verify(b"key", b"{\"a\":1}", &header));
        assert!(!verify(b"other", b"{\"a\":1}", &header));
        assert!(!verify(b"key", b"{\"a\":2}", &header));
        assert!(!verify(b"key", b"{\"a\":1}", "sha1=00"));
        // RFC 4231 test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
