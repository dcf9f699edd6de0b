//! The process's small HTTP server: `/healthz`, `/readyz`, `/metrics`, the grant endpoint pods ask for their signed URLs and, for `file://` stores, the signed-URL blob endpoint.

use crate::cluster::listener::{self, RequestBody, ServerLimits};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;

use super::blobs::{BLOBS_PATH, BlobEndpoint, ResponseBody, text};
use super::grants::GrantEndpoint;
use super::run_ended::RunEndedEndpoint;
use crate::runner::end_report::RUN_ENDED_ENDPOINT;
use crate::store::grant_request::GRANTS_ENDPOINT;

/// What the endpoints report.
#[derive(Clone)]
pub struct Probes {
    /// Set once the caches are filled and the webhook's certificate is loaded, before this
    /// replica contends for the Lease: every replica answers admission reviews, whether or not
    /// it is the one that reconciles.
    pub ready: Arc<AtomicBool>,
    /// Renders the metrics in the Prometheus text format.
    pub metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// The signed-URL blob endpoint, for `file://` stores.
    pub blobs: Option<Arc<BlobEndpoint>>,
    /// The grant endpoint.
    pub grants: Option<Arc<GrantEndpoint>>,
    /// The run-ended endpoint, when the replicas share a signing key.
    pub run_ended: Option<Arc<RunEndedEndpoint>>,
}

/// Answers one request.
pub async fn route(probes: &Probes, request: Request<RequestBody>) -> Response<ResponseBody> {
    let path = request.uri().path();
    if path == GRANTS_ENDPOINT
        && let Some(grants) = &probes.grants
    {
        return grants.handle(request).await;
    }
    if path == RUN_ENDED_ENDPOINT
        && let Some(run_ended) = &probes.run_ended
    {
        return run_ended.handle(request).await;
    }
    if path.starts_with(BLOBS_PATH)
        && let Some(blobs) = &probes.blobs
    {
        return blobs.handle(request).await;
    }
    probe(probes, path)
}

/// Answers the health, readiness and metrics endpoints.
fn probe(probes: &Probes, path: &str) -> Response<ResponseBody> {
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if probes.ready.load(Ordering::Relaxed) => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        "/metrics" => {
            let mut response = text(StatusCode::OK, (probes.metrics)());
            response.headers_mut().insert(
                "content-type",
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// Serves the endpoints on `listener` within `limits` until the task is dropped.
pub async fn serve(listener: TcpListener, limits: ServerLimits, probes: Probes) {
    listener::serve(listener, None, limits, "controller HTTP", move |_| {
        let probes = probes.clone();
        service_fn(move |request: Request<RequestBody>| {
            let probes = probes.clone();
            async move { Ok::<_, Infallible>(route(&probes, request).await) }
        })
    })
    .await;
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    async fn body(response: Response<ResponseBody>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn probes_and_metrics_answer() {
        let probes = Probes {
            ready: Arc::new(AtomicBool::new(false)),
            metrics: Arc::new(|| "errand_controller_reconciles_total 3\n".to_owned()),
            blobs: None,
            grants: None,
            run_ended: None,
        };
        assert_eq!(probe(&probes, "/healthz").status(), StatusCode::OK);
        assert_eq!(
            probe(&probes, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        probes.ready.store(true, Ordering::Relaxed);
        assert_eq!(probe(&probes, "/readyz").status(), StatusCode::OK);
        assert!(
            body(probe(&probes, "/metrics"))
                .await
                .contains("reconciles_total 3")
        );
        assert_eq!(probe(&probes, "/nope").status(), StatusCode::NOT_FOUND);
    }
}
