//! Sending the run-ended report: `run-agent` tells the controller that the run ended once its results are saved, so the execution ends without waiting for the kubelet.
//!
//! It is an early word, never the only one: the pod's end says the same moments later, so a
//! report that cannot be delivered within [`SEND_BUDGET`] is given up and logged, and the run
//! ends as it did before. A refusal (4xx) is final; a controller that cannot answer (no answer,
//! a 5xx) is asked again within the budget.

use std::time::Duration;

use jiff::Timestamp;
use reqwest::StatusCode;

use super::end_report::RunEndReport;
use super::termination::TerminationSummary;
use crate::runner::RunSummary;
use crate::store::grants::{Grants, ReportGrant};
use crate::store::signed::{Backoff, failure_text};

/// How long the runner spends reporting before it exits anyway.
pub const SEND_BUDGET: Duration = Duration::from_secs(5);

/// Why a report did not get through.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The HTTP client could not be built.
    #[error("the HTTP client: {0}")]
    Client(String),
    /// The controller refused it (4xx): final.
    #[error("the controller refused the report ({status}): {message}")]
    Refused {
        /// Its answer.
        status: StatusCode,
        /// Its reason.
        message: String,
    },
    /// No answer within [`SEND_BUDGET`], or only 5xx ones.
    #[error("no answer within {SEND_BUDGET:?}: {last}")]
    Unanswered {
        /// The last attempt's failure.
        last: String,
    },
}

/// The report of `summary`, which `run-agent` exits with `exit_code` for, if the run saved its
/// manifest and its grants say where to report.
pub fn report_of(
    grants: &Grants,
    summary: &RunSummary,
    exit_code: i32,
) -> Option<(ReportGrant, RunEndReport)> {
    let grant = grants.report.clone()?;
    let report = RunEndReport {
        execution: grants.execution.clone(),
        finished_at: Timestamp::now(),
        runner_exit_code: exit_code,
        summary: TerminationSummary::from_run(summary),
    };
    report.manifest_entry().ok()?;
    Some((grant, report))
}

/// Sends `report` to `grant`'s endpoint; says why not if it could not.
pub async fn send(grant: &ReportGrant, report: &RunEndReport) -> Result<(), SendError> {
    // The controller, reached directly: never through the agent's egress proxy.
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(SEND_BUDGET)
        .build()
        .map_err(|e| SendError::Client(e.to_string()))?;
    let body = serde_json::to_vec(report).expect("a report always serializes");
    let until = Timestamp::now() + SEND_BUDGET;
    let mut backoff = Backoff::until(until);
    loop {
        let sent = client
            .post(&grant.url)
            .bearer_auth(&grant.token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .send()
            .await;
        let last = match sent {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) => {
                let (status, message) = failure_text(response).await;
                if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
                    return Err(SendError::Refused { status, message });
                }
                format!("{status}: {message}")
            }
            Err(e) => format!("{e:#}"),
        };
        let Some(wait) = backoff.next(Timestamp::now()) else {
            return Err(SendError::Unanswered { last });
        };
        tokio::time::sleep(wait).await;
    }
}
