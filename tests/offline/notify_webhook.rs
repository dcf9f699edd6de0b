//! Webhook deliveries to a real local HTTP endpoint, without a cluster: the controller's sender and retry schedule deliver a finished execution's CloudEvent after a 500, with the same signed bytes on every attempt, and stop at once on a refusal or a redirect.

use std::sync::Arc;
use std::time::Duration;

use crate::support::webhook_receiver::Receiver;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

use errand::api::{
    AgentExecution, AgentExecutionSpec, AgentExecutionStatus, DeliveryState, Phase, WebhookDelivery,
};
use errand::controller::execution::notify::{
    AttemptOutcome, CloudEvent, Step, Unanswered, WebhookSender, finished_event, next_step,
    record_attempt,
};
use errand::outbound::OutboundPolicy;

const KEY: &[u8] = b"a signing key only the receiver and the Secret know";

fn succeeded() -> AgentExecution {
    let mut execution = AgentExecution::new("told", AgentExecutionSpec::default());
    execution.metadata.namespace = Some("team".into());
    execution.metadata.uid = Some("6a1f0e4e-0000-4000-8000-000000000001".into());
    let ended: Timestamp = "2026-11-30T23:00:00Z".parse().unwrap();
    execution.status = Some(AgentExecutionStatus {
        phase: Some(Phase::Succeeded),
        completion_time: Some(Time(ended)),
        exit_code: Some(0),
        conditions: vec![Condition {
            type_: "Complete".into(),
            status: "True".into(),
            reason: "Succeeded".into(),
            message: String::new(),
            last_transition_time: Time(ended),
            observed_generation: None,
        }],
        ..AgentExecutionStatus::default()
    });
    execution
}

/// A sender that may reach this machine's loopback receivers, which the default policy denies.
fn loopback_sender() -> WebhookSender {
    let loopback = "127.0.0.0/8".parse().unwrap();
    WebhookSender::new(Arc::new(OutboundPolicy::default().allow(loopback)))
}

/// Delivers `event` to `url` the way the controller does, one attempt after another as the
/// schedule says (waiting out its delays), until it is done; the final record.
async fn deliver(url: &str, event: &CloudEvent) -> WebhookDelivery {
    let sender = loopback_sender();
    let url = url::Url::parse(url).unwrap();
    let mut record: Option<WebhookDelivery> = None;
    loop {
        match next_step(record.as_ref(), Timestamp::now()) {
            Step::Done => return record.expect("a done delivery was tried"),
            Step::WaitFor(after) => tokio::time::sleep(after).await,
            Step::Attempt => {
                let outcome = sender.attempt(&url, KEY, event).await.outcome;
                record = Some(record_attempt(
                    record.as_ref(),
                    &event.id,
                    &outcome,
                    Timestamp::now(),
                ));
            }
        }
    }
}

#[tokio::test]
async fn a_delivery_is_retried_after_a_500_and_its_signature_verifies() {
    let receiver = Receiver::start("127.0.0.1", &[500, 204]).await;
    let event = CloudEvent::of(finished_event(&succeeded()).unwrap());
    let record = deliver(&receiver.url("/hooks/errand"), &event).await;

    assert_eq!(record.state, DeliveryState::Delivered, "{record:?}");
    assert_eq!(record.attempts, 2);
    assert_eq!(record.last_status_code, Some(204));
    assert_eq!(record.last_error, None);
    assert!(record.delivered_time.is_some());
    assert_eq!(
        record.event_id,
        "6a1f0e4e-0000-4000-8000-000000000001/execution.finished"
    );

    let received = receiver.received();
    assert_eq!(received.len(), 2, "one 500, then the retry");
    assert_eq!(
        received[0].body, received[1].body,
        "every attempt sends the same bytes"
    );
    for request in &received {
        request.assert_signed_cloudevent("/hooks/errand", KEY);
    }
    let cloud_event: Value = serde_json::from_slice(&received[1].body).unwrap();
    assert_eq!(
        cloud_event,
        json!({
            "specversion": "1.0",
            "id": "6a1f0e4e-0000-4000-8000-000000000001/execution.finished",
            "source": "/apis/errand.dev/v1alpha1/namespaces/team/agentexecutions",
            "type": "dev.errand.execution.finished",
            "subject": "told",
            "time": "2026-11-30T23:00:00Z",
            "datacontenttype": "application/json",
            "data": {
                "type": "execution.finished",
                "time": "2026-11-30T23:00:00Z",
                "execution": "told",
                "namespace": "team",
                "uid": "6a1f0e4e-0000-4000-8000-000000000001",
                "phase": "Succeeded",
                "reason": "Succeeded",
                "exit_code": 0,
            },
        })
    );
}

#[tokio::test]
async fn a_refusal_or_a_redirect_ends_the_delivery_at_once() {
    let event = CloudEvent::of(finished_event(&succeeded()).unwrap());
    for status in [404, 302] {
        let receiver = Receiver::start("127.0.0.1", &[status]).await;
        let record = deliver(&receiver.url("/"), &event).await;
        assert_eq!(record.state, DeliveryState::Failed, "{status}: {record:?}");
        assert_eq!(record.attempts, 1);
        assert_eq!(record.last_status_code, Some(status));
        assert_eq!(
            record.last_error.as_deref(),
            Some(
                format!(
                    "http-{}xx: the endpoint answered HTTP {status}{}",
                    status / 100,
                    if status == 302 {
                        "; redirects are not followed"
                    } else {
                        ""
                    }
                )
                .as_str()
            )
        );
        assert_eq!(
            receiver.received().len(),
            1,
            "{status}: not retried, not followed"
        );
    }
}

#[tokio::test]
async fn an_endpoint_that_does_not_answer_is_an_error_worth_a_retry() {
    // A port nobody listens on: bound, then closed.
    let address = crate::support::ports::free_local_address();
    let event = CloudEvent::of(finished_event(&succeeded()).unwrap());
    let url = url::Url::parse(&format!("http://{address}/")).unwrap();
    let attempt = loopback_sender().attempt(&url, KEY, &event).await;
    let outcome = attempt.outcome;
    assert_eq!(outcome, AttemptOutcome::Unanswered(Unanswered::Unreachable));
    let detail = attempt.detail.unwrap();
    assert!(detail.contains("onnect"), "the log says why: {detail}");
    let record = record_attempt(None, &event.id, &outcome, Timestamp::now());
    assert_eq!(record.state, DeliveryState::Pending);
    assert_eq!(record.last_status_code, None);
    assert!(matches!(
        next_step(Some(&record), Timestamp::now()),
        Step::WaitFor(wait) if wait <= Duration::from_secs(2)
    ));
}

#[tokio::test]
async fn the_default_policy_refuses_loopback_link_local_and_private_targets_naming_no_address() {
    let receiver = Receiver::start("127.0.0.1", &[204]).await;
    let event = CloudEvent::of(finished_event(&succeeded()).unwrap());
    let sender = WebhookSender::new(Arc::new(OutboundPolicy::default()));
    for url in [
        receiver.url("/by-address"),
        receiver.url("/").replace("127.0.0.1", "localhost"),
        receiver.url("/").replace("127.0.0.1", "[::ffff:127.0.0.1]"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.96.0.1/".to_owned(),
        "http://[fd00::1]/".to_owned(),
    ] {
        let attempt = sender
            .attempt(&url::Url::parse(&url).unwrap(), KEY, &event)
            .await;
        assert_eq!(
            attempt.outcome,
            AttemptOutcome::Unanswered(Unanswered::RefusedByPolicy),
            "{url}: {attempt:?}"
        );
        let record = record_attempt(None, &event.id, &attempt.outcome, Timestamp::now());
        assert_eq!(record.state, DeliveryState::Failed, "{url}");
        let error = record.last_error.unwrap();
        assert!(error.starts_with("refused-by-policy:"), "{error}");
        for leak in ["127.", "169.254", "10.96", "fd00", "localhost", "::"] {
            assert!(!error.contains(leak), "{url}: status names {leak}: {error}");
        }
        assert!(
            attempt
                .detail
                .is_some_and(|d| d.contains("outbound policy")),
            "the log says which range"
        );
    }
    assert!(
        receiver.received().is_empty(),
        "nothing reached the receiver"
    );
}
