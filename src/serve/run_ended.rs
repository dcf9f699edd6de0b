//! The run-ended endpoint: a runner reports that its run ended and its results are saved; the report is believed once the saved manifest backs it, and recorded on the execution for the reconciling replica.
//!
//! The runner proves which run it reports with the bearer token its grants carry (minted for
//! the run's namespace and uid under the signing key, [`Purpose::RunEnded`]), which only
//! errand's runner ever holds: the grants come over the pod-bound token's TokenReview and are
//! removed before the agent starts. Every replica answers, leader or not: the check needs only
//! the store and the key, and the record is an annotation on the execution, sealed, which the
//! leader's watch brings to its reconcile ([`crate::runner::end_report`]).
//!
//! [`Purpose::RunEnded`]: crate::resolve::run_tokens::Purpose::RunEnded

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use hyper::body::{Body, Bytes};
use hyper::{Method, Request, Response, StatusCode};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use super::blobs::{ResponseBody, text};
use crate::api::AgentExecution;
use crate::api::contract::RUN_ENDED_ANNOTATION;
use crate::cluster::listener::{bearer_token, read_body};
use crate::controller::execution::handed_reports::HandedReports;
use crate::controller::metrics::Metrics;
use crate::resolve::run_tokens::RunTokens;
use crate::runner::end_report::{
    MANIFEST_READ_LIMIT, REPORT_BODY_LIMIT, ReportRefusal, RunEndReport,
};
use crate::store::keys::{self, ExecutionId, ResultName};
use crate::store::{Store, StoreError};

/// How long one request may take, the store read and the record included; the runner gives up
/// before, and the pod's end tells.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a checked report went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// To this replica's reconciler, in memory.
    HandedOver,
    /// Onto the execution, sealed.
    OnExecution,
    /// Nowhere: the execution is gone (or another of the same name took its place).
    Gone,
}

impl Recorded {
    /// The outcome's label in the `run_ended_reports` metric.
    fn label(self) -> &'static str {
        match self {
            Recorded::HandedOver => "handed_over",
            Recorded::OnExecution => "recorded",
            Recorded::Gone => "gone",
        }
    }
}

/// Why a checked report could not be recorded now (the runner may send it again).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The API server did not take the record.
    #[error("recording the report on the execution: {0}")]
    Api(#[from] kube::Error),
    /// Another recorder could not take it.
    #[error("recording the report: {0}")]
    Unavailable(String),
}

/// Records a checked report where the reconciling replica finds it.
#[async_trait::async_trait]
pub trait Recorder: Send + Sync {
    /// Records `report`; says where it went.
    async fn record(&self, report: &RunEndReport) -> Result<Recorded, RecordError>;
}

/// Hands the report to this replica's reconciler while it leads (no API write), else records
/// it on the execution.
pub struct HandOver {
    /// This replica's reconciler's reports.
    pub handed: Arc<HandedReports>,
    /// Where the report goes when this replica does not reconcile.
    pub otherwise: ExecutionAnnotation,
}

#[async_trait::async_trait]
impl Recorder for HandOver {
    async fn record(&self, report: &RunEndReport) -> Result<Recorded, RecordError> {
        if self.handed.hand_over(report.clone()) {
            return Ok(Recorded::HandedOver);
        }
        self.otherwise.record(report).await
    }
}

/// Records the report, sealed with the tokens, as the execution's [`RUN_ENDED_ANNOTATION`],
/// with its uid as a precondition.
pub struct ExecutionAnnotation {
    /// The API client.
    pub client: Client,
    /// Seals the report.
    pub tokens: RunTokens,
}

#[async_trait::async_trait]
impl Recorder for ExecutionAnnotation {
    async fn record(&self, report: &RunEndReport) -> Result<Recorded, RecordError> {
        let execution = &report.execution;
        let sealed = report.seal(&self.tokens);
        let api = Api::<AgentExecution>::namespaced(self.client.clone(), &execution.namespace);
        let patch = serde_json::json!({
            "metadata": {
                "uid": execution.uid,
                "annotations": {RUN_ENDED_ANNOTATION: sealed},
            }
        });
        match api
            .patch(
                &execution.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(Recorded::OnExecution),
            // Gone, or another execution of that name now (the uid precondition).
            Err(kube::Error::Api(e)) if matches!(e.code, 404 | 409 | 422) => Ok(Recorded::Gone),
            Err(e) => Err(e.into()),
        }
    }
}

/// How a report was answered.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// Checked and handed over or recorded.
    Recorded(Recorded),
    /// Not believed, for good.
    Refused(StatusCode, String),
    /// Could not be checked or recorded now; the runner may send it again.
    Unavailable(String),
}

/// Answers runners' run-ended reports at
/// [`RUN_ENDED_ENDPOINT`](crate::runner::end_report::RUN_ENDED_ENDPOINT).
pub struct RunEndedEndpoint {
    store: Store,
    tokens: RunTokens,
    recorder: Arc<dyn Recorder>,
    metrics: Arc<Metrics>,
}

impl RunEndedEndpoint {
    /// The endpoint: it checks tokens with `tokens`, reads manifests from `store`, records
    /// with `recorder` and counts the outcomes in `metrics`.
    pub fn new(
        store: Store,
        tokens: RunTokens,
        recorder: Arc<dyn Recorder>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            store,
            tokens,
            recorder,
            metrics,
        }
    }

    /// Answers one request: 204 once recorded; 401 without the run's token, 400 for a body
    /// that is no report, 409 when the saved manifest does not back it, 404 when the execution
    /// is gone (the runner gives up); 503 when the store or the API server could not answer.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        if request.method() != Method::POST {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only POST\n");
        }
        let answer = tokio::time::timeout(REQUEST_TIMEOUT, self.answer(request))
            .await
            .unwrap_or_else(|_| {
                Answer::Unavailable(format!("no answer within {REQUEST_TIMEOUT:?}"))
            });
        match answer {
            Answer::Recorded(recorded) => {
                self.metrics.run_ended_report(recorded.label());
                text(StatusCode::NO_CONTENT, "")
            }
            Answer::Refused(status, why) => {
                self.metrics.run_ended_report("refused");
                tracing::warn!(%status, %why, "refused a run-ended report");
                text(status, format!("{why}\n"))
            }
            Answer::Unavailable(why) => {
                self.metrics.run_ended_report("unavailable");
                tracing::warn!(%why, "could not take a run-ended report");
                text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"))
            }
        }
    }

    async fn answer<B>(&self, request: Request<B>) -> Answer
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let Some(token) = bearer_token(request.headers()) else {
            return refused(
                StatusCode::UNAUTHORIZED,
                "no bearer token: send the run's token from its grants",
            );
        };
        let body = match read_body(request.into_body(), REPORT_BODY_LIMIT).await {
            Ok(body) => body,
            Err(e) => {
                return refused(
                    StatusCode::BAD_REQUEST,
                    ReportRefusal::Malformed(e.to_string()),
                );
            }
        };
        let report = match RunEndReport::parse(&body) {
            Ok(report) => report,
            Err(e) => return refused(StatusCode::BAD_REQUEST, e),
        };
        let execution = &report.execution;
        if !self
            .tokens
            .verify(&execution.namespace, &execution.uid, &token)
        {
            return refused(
                StatusCode::UNAUTHORIZED,
                format!(
                    "the token is not the one of execution {}/{} (uid {})",
                    execution.namespace, execution.name, execution.uid
                ),
            );
        }
        let manifest = match self.manifest(execution).await {
            Ok(Some(manifest)) => manifest,
            Ok(None) => {
                return refused(
                    StatusCode::CONFLICT,
                    ReportRefusal::Mismatch(format!("no {} is saved", ResultName::Manifest)),
                );
            }
            Err(e) => return Answer::Unavailable(e),
        };
        if let Err(e) = report.check_manifest(&manifest) {
            return refused(StatusCode::CONFLICT, e);
        }
        match self.recorder.record(&report).await {
            Ok(Recorded::Gone) => refused(
                StatusCode::NOT_FOUND,
                format!(
                    "execution {}/{} is gone",
                    execution.namespace, execution.name
                ),
            ),
            Ok(recorded) => {
                tracing::info!(
                    namespace = %execution.namespace,
                    execution = %execution.name,
                    how = recorded.label(),
                    "recorded a run-ended report"
                );
                Answer::Recorded(recorded)
            }
            Err(e) => Answer::Unavailable(e.to_string()),
        }
    }

    /// The execution's saved manifest, `None` if there is none; at most
    /// [`MANIFEST_READ_LIMIT`] bytes and one more, so a larger one fails the check.
    async fn manifest(&self, execution: &ExecutionId) -> Result<Option<Vec<u8>>, String> {
        let key = keys::result(execution, ResultName::Manifest).map_err(|e| e.to_string())?;
        let body = match self.store.get(&key).await {
            Ok(body) => body,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let mut stream = body.into_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.try_next().await.map_err(|e| e.to_string())? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() > MANIFEST_READ_LIMIT {
                break;
            }
        }
        Ok(Some(bytes))
    }
}

fn refused(status: StatusCode, why: impl ToString) -> Answer {
    Answer::Refused(status, why.to_string())
}
