//! Asking the controller for an execution's grants, as `errand stage` does when its pod starts: the pod's projected ServiceAccount token proves which pod asks.
//!
//! A controller that is down, restarting or cannot reach the API server for now (no answer,
//! a 5xx) is asked again ([`Backoff`]) until a deadline, the pod's start timeout; a refusal
//! (4xx) is final. The token file is read for each attempt, since the kubelet renews it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

use super::grants::Grants;
use super::keys::ExecutionId;
use super::signed::{Backoff, failure_text};

/// Path of the controller's grant endpoint (the server side is `crate::serve::grants`).
pub const GRANTS_ENDPOINT: &str = "/grants";
/// How long one attempt may take; the controller answers within 20 s or says why not.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// What to ask and whom.
#[derive(Clone, Debug)]
pub struct GrantRequest {
    /// The controller's base URL as pods reach it.
    pub controller_url: String,
    /// The projected token file.
    pub token: PathBuf,
    /// The execution the pod runs.
    pub execution: ExecutionId,
}

/// Why no grants were obtained.
#[derive(Debug, thiserror::Error)]
pub enum GrantRequestError {
    /// The controller refused (the token is not this execution's pod's, say).
    #[error("the controller at {url} refused the grants ({status}): {message}")]
    Refused {
        /// The endpoint.
        url: String,
        /// Its answer.
        status: StatusCode,
        /// Its reason.
        message: String,
    },
    /// The deadline passed while the controller could not answer.
    #[error("no grants from the controller at {url} before the start timeout: {last}")]
    Unanswered {
        /// The endpoint.
        url: String,
        /// The last attempt's failure.
        last: String,
    },
    /// The pod is being stopped.
    #[error("stopped while asking for the grants")]
    Stopped,
    /// The HTTP client could not be built.
    #[error("the HTTP client: {0}")]
    Client(String),
}

/// The outcome of one attempt.
enum Attempt {
    Granted(Box<Grants>),
    Refused(StatusCode, String),
    Failed(String),
}

impl GrantRequest {
    fn url(&self) -> String {
        format!(
            "{}{GRANTS_ENDPOINT}",
            self.controller_url.trim_end_matches('/')
        )
    }

    /// Asks until the grants come, the controller refuses, `until` passes or `stop` fires.
    pub async fn send(
        &self,
        until: Timestamp,
        stop: &CancellationToken,
    ) -> Result<Grants, GrantRequestError> {
        // The controller, reached directly: never through the agent's egress proxy.
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(ATTEMPT_TIMEOUT)
            .build()
            .map_err(|e| GrantRequestError::Client(e.to_string()))?;
        let url = self.url();
        let mut backoff = Backoff::until(until);
        loop {
            let last = match self.attempt(&client, &url).await {
                Attempt::Granted(grants) => return Ok(*grants),
                Attempt::Refused(status, message) => {
                    return Err(GrantRequestError::Refused {
                        url,
                        status,
                        message,
                    });
                }
                Attempt::Failed(reason) => reason,
            };
            let Some(wait) = backoff.next(Timestamp::now()) else {
                return Err(GrantRequestError::Unanswered { url, last });
            };
            tracing::warn!(%url, error = %last, "asking for the grants again in {wait:?}");
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => return Err(GrantRequestError::Stopped),
            }
        }
    }

    async fn attempt(&self, client: &reqwest::Client, url: &str) -> Attempt {
        let token = match read_token(&self.token) {
            Ok(token) => token,
            Err(e) => return Attempt::Failed(e),
        };
        let response = match client
            .post(url)
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&self.execution).expect("an execution id serializes"))
            .send()
            .await
        {
            Ok(response) => response,
            Err(e) => return Attempt::Failed(format!("{e:#}")),
        };
        if response.status().is_success() {
            let grants = match response.bytes().await {
                Ok(body) => serde_json::from_slice::<Grants>(&body).map_err(|e| e.to_string()),
                Err(e) => Err(format!("{e:#}")),
            };
            return match grants {
                Ok(grants) => Attempt::Granted(Box::new(grants)),
                Err(e) => Attempt::Failed(format!("reading the grants: {e}")),
            };
        }
        let (status, message) = failure_text(response).await;
        if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
            Attempt::Refused(status, message)
        } else {
            Attempt::Failed(format!("{status}: {message}"))
        }
    }
}

/// The token, which the kubelet writes before the container starts.
fn read_token(path: &Path) -> Result<String, String> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the token {}: {e}", path.display()))?;
    Ok(token.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::Full;
    use hyper::body::{Bytes, Incoming};
    use hyper::service::service_fn;
    use hyper::{Request, Response};
    use hyper_util::rt::TokioIo;
    use jiff::SignedDuration;

    use super::*;
    use crate::store::grants::UploadMode;

    fn grants() -> Grants {
        Grants {
            execution: ExecutionId::test(),
            inputs: Default::default(),
            results: Default::default(),
            uploads: UploadMode::Chunked,
            put_headers: Default::default(),
            expires_at: Timestamp::from_second(1_800_000_000).unwrap(),
            extension: None,
            report: None,
        }
    }

    /// A server answering each request with the next of `answers` (the last one repeats),
    /// recording the bearer token and body it got.
    async fn server(answers: Vec<(u16, String)>) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&count);
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (answers, seen) = (answers.clone(), Arc::clone(&seen));
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let n = seen.fetch_add(1, Ordering::SeqCst);
                        let (status, body) = answers[n.min(answers.len() - 1)].clone();
                        let authorized = request.headers()["authorization"] == "Bearer tok-1"
                            && request.uri().path() == GRANTS_ENDPOINT;
                        async move {
                            let status = if authorized { status } else { 400 };
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from(body)))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (url, count)
    }

    fn request(url: &str, dir: &tempfile::TempDir) -> GrantRequest {
        let token = dir.path().join("token");
        std::fs::write(&token, "tok-1\n").unwrap();
        GrantRequest {
            controller_url: format!("{url}/"),
            token,
            execution: ExecutionId::test(),
        }
    }

    fn in_seconds(seconds: i64) -> Timestamp {
        Timestamp::now() + SignedDuration::from_secs(seconds)
    }

    #[tokio::test]
    async fn an_unavailable_controller_is_asked_again_until_it_grants() {
        let json = serde_json::to_string(&grants()).unwrap();
        let (url, count) = server(vec![
            (503, "reviewing the token: connection refused".into()),
            (503, String::new()),
            (200, json),
        ])
        .await;
        let dir = tempfile::tempdir().unwrap();
        let got = request(&url, &dir)
            .send(in_seconds(30), &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(got, grants());
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_refusal_is_final() {
        let (url, count) = server(vec![(403, "not the execution's pod\n".into())]).await;
        let dir = tempfile::tempdir().unwrap();
        let error = request(&url, &dir)
            .send(in_seconds(30), &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            matches!(&error, GrantRequestError::Refused { status, message, .. }
                if *status == StatusCode::FORBIDDEN && message == "not the execution's pod"),
            "{error}"
        );
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn no_controller_until_the_deadline_is_an_error_naming_the_last_failure() {
        let dir = tempfile::tempdir().unwrap();
        // A port nothing listens on.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let error = request(&url, &dir)
            .send(in_seconds(2), &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            matches!(error, GrantRequestError::Unanswered { .. }),
            "{error}"
        );
        assert!(
            error.to_string().contains("before the start timeout"),
            "{error}"
        );
    }
}
