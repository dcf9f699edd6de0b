//! Notify: once an execution is terminal, its `execution.finished` CloudEvent goes to its webhook, one attempt at a time in the background, each recorded in `status.notify.webhook`.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tracing::{debug, info, warn};

use super::Reconciler;
use crate::api::{AgentExecution, DeliveryState, NotifyStatus, SecretKeyRef, WebhookSink};
use crate::controller::build::ExecutionOwner;
use crate::controller::execution::context::Context;
use crate::controller::execution::notify::{
    ATTEMPT_TIMEOUT, Attempt, AttemptOutcome, CloudEvent, Step, Unanswered, finished_event,
    next_step, record_attempt,
};

/// How long after starting an attempt the execution is looked at again, in case the attempt's
/// status write is lost: the attempt's own timeout, and a margin to write.
const AFTER_AN_ATTEMPT: Duration = ATTEMPT_TIMEOUT.saturating_add(Duration::from_secs(5));

/// Moves the webhook delivery of a terminal `execution` on: starts an attempt in the
/// background when one is due (and none is in flight). Returns when to look again, `None`
/// when there is nothing (more) to deliver. Never fails: a delivery never changes the run.
pub(super) fn deliver_webhook(execution: &AgentExecution, ctx: &Arc<Context>) -> Option<Duration> {
    let webhook = execution.spec.notify.as_ref()?.webhook.clone()?;
    let delivery = execution
        .status
        .as_ref()
        .and_then(|s| s.notify.as_ref())
        .and_then(|n| n.webhook.as_ref());
    match next_step(delivery, Timestamp::now()) {
        Step::Done => None,
        Step::WaitFor(after) => Some(after),
        Step::Attempt => {
            let owner = ExecutionOwner::of(execution).ok()?;
            if ctx.begin_delivery(&owner.uid) {
                let execution = Arc::new(execution.clone());
                tokio::spawn(attempt(execution, owner, webhook, Arc::clone(ctx)));
            }
            Some(AFTER_AN_ATTEMPT)
        }
    }
}

/// One attempt, and its record written to the status.
async fn attempt(
    execution: Arc<AgentExecution>,
    owner: ExecutionOwner,
    webhook: WebhookSink,
    ctx: Arc<Context>,
) {
    let uid = owner.uid.clone();
    if let Some(event) = finished_event(&execution) {
        let event = CloudEvent::of(event);
        let attempt = match (
            secret_value(&ctx, &owner.namespace, &webhook.signing_secret_ref).await,
            webhook_url(&ctx, &owner.namespace, &webhook).await,
        ) {
            (Ok(key), Ok(url)) => ctx.webhooks.attempt(&url, &key, &event).await,
            (Err(error), _) => Attempt {
                outcome: AttemptOutcome::Unanswered(Unanswered::SigningKeyUnreadable),
                detail: Some(error),
            },
            (_, Err(attempt)) => attempt,
        };
        if let Some(detail) = &attempt.detail {
            // The detail names addresses and the controller's view: the log's, never the
            // tenant's.
            warn!(execution = %owner.name, namespace = %owner.namespace, "webhook attempt: {detail}");
        }
        record(&ctx, &execution, owner, &event.id, &attempt.outcome).await;
    }
    ctx.end_delivery(&uid);
}

/// The URL to deliver to: the spec's, or the value of the Secret key `urlFrom` names, read
/// when it is used (and never written anywhere: a failure to read or parse it says which
/// Secret key, not what it holds).
async fn webhook_url(
    ctx: &Context,
    namespace: &str,
    webhook: &WebhookSink,
) -> Result<url::Url, Attempt> {
    let unusable = |why: Unanswered, detail: String| Attempt {
        outcome: AttemptOutcome::Unanswered(why),
        detail: Some(detail),
    };
    match (&webhook.url, &webhook.url_from) {
        (Some(url), _) => crate::resolve::webhook_url(url).map_err(|e| {
            unusable(
                Unanswered::InvalidUrl,
                format!("spec.notify.webhook.url: {e}"),
            )
        }),
        (None, Some(reference)) => {
            let value = secret_value(ctx, namespace, reference)
                .await
                .map_err(|e| unusable(Unanswered::UrlUnreadable, e))?;
            let text = String::from_utf8(value).unwrap_or_default();
            crate::resolve::webhook_url(text.trim()).map_err(|_| {
                unusable(
                    Unanswered::InvalidUrl,
                    format!(
                        "spec.notify.webhook.urlFrom: the value of Secret {:?} key {:?} is not an \
                         absolute http(s) URL without user information",
                        reference.name, reference.key
                    ),
                )
            })
        }
        (None, None) => Err(unusable(
            Unanswered::InvalidUrl,
            "spec.notify.webhook has neither url nor urlFrom".to_owned(),
        )),
    }
}

/// The value of a Secret key in `namespace`, read when it is used.
async fn secret_value(
    ctx: &Context,
    namespace: &str,
    reference: &SecretKeyRef,
) -> Result<Vec<u8>, String> {
    let secret = Api::<Secret>::namespaced(ctx.client.clone(), namespace)
        .get_opt(&reference.name)
        .await
        .map_err(|e| format!("reading Secret {:?}: {e}", reference.name))?
        .ok_or_else(|| format!("Secret {:?} not found", reference.name))?;
    secret
        .data
        .and_then(|mut data| data.remove(&reference.key))
        .map(|value| value.0)
        .ok_or_else(|| format!("Secret {:?} has no key {:?}", reference.name, reference.key))
}

/// Writes the attempt's record into the execution's status (the latest this controller knows).
async fn record(
    ctx: &Context,
    execution: &Arc<AgentExecution>,
    owner: ExecutionOwner,
    event_id: &str,
    outcome: &AttemptOutcome,
) {
    let latest = ctx.latest(Arc::clone(execution));
    let mut status = latest.status.clone().unwrap_or_default();
    let previous = status.notify.as_ref().and_then(|n| n.webhook.as_ref());
    let delivery = record_attempt(previous, event_id, outcome, Timestamp::now());
    let name = owner.name.clone();
    match delivery.state {
        DeliveryState::Delivered => {
            info!(execution = %name, attempts = delivery.attempts, "webhook delivered");
        }
        DeliveryState::Pending => {
            debug!(execution = %name, attempts = delivery.attempts, error = ?delivery.last_error, "webhook attempt failed; retrying");
        }
        DeliveryState::Failed => {
            warn!(execution = %name, attempts = delivery.attempts, error = ?delivery.last_error, "webhook delivery given up");
        }
    }
    status.notify = Some(NotifyStatus {
        webhook: Some(delivery),
    });
    let reconciler = Reconciler {
        api: Api::namespaced(ctx.client.clone(), &owner.namespace),
        execution: &latest,
        owner,
        ctx,
    };
    if let Err(error) = reconciler.write_status(status).await {
        // Looked at again after `AFTER_AN_ATTEMPT`; the same event id lets the receiver drop
        // the repeat.
        warn!(execution = %name, "recording the webhook attempt: {error}");
    }
}
