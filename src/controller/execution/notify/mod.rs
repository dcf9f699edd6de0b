//! Webhook notifications of finished executions: the CloudEvent and its signature ([`cloudevent`]), when to try and what each try leaves in status ([`delivery`]) — both pure — and the HTTP client that makes one attempt ([`sender`]).
//!
//! The reconciler ([`crate::controller::execution::reconcile`]) asks [`delivery::next_step`] what to do
//! once an execution is terminal, makes the attempt in the background (a slow or failing
//! endpoint never holds a reconcile, nor changes the run's outcome), and records each attempt
//! with [`delivery::record_attempt`] in `status.notify.webhook`, which is where the retry
//! schedule lives: a controller that restarts picks it up where it stood.

pub mod cloudevent;
pub mod delivery;
pub mod sender;

pub use cloudevent::{
    CLOUDEVENTS_CONTENT_TYPE, CloudEvent, SIGNATURE_HEADER, finished_event, sign, verify,
};
pub use delivery::{
    ATTEMPT_TIMEOUT, AttemptOutcome, MAX_ATTEMPTS, Step, Unanswered, next_step, record_attempt,
    retry_delay,
};
pub use sender::{Attempt, WebhookSender};
