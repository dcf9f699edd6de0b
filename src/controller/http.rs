//! The controller's small HTTP server: `/healthz`, `/readyz` and `/metrics`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::debug;

/// What the endpoints report.
#[derive(Clone)]
pub struct Probes {
    /// Set once the caches are filled and this replica reconciles.
    pub ready: Arc<AtomicBool>,
    /// Renders the metrics in the Prometheus text format.
    pub metrics: Arc<dyn Fn() -> String + Send + Sync>,
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a response from valid parts")
}

/// Answers one request.
pub fn route(probes: &Probes, path: &str) -> Response<Full<Bytes>> {
    match path {
        "/healthz" => respond(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if probes.ready.load(Ordering::Relaxed) => {
            respond(StatusCode::OK, "text/plain", "ready\n".into())
        }
        "/readyz" => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not ready\n".into(),
        ),
        "/metrics" => respond(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            (probes.metrics)(),
        ),
        _ => respond(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Serves the endpoints on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, probes: Probes) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                debug!("accepting a connection: {e}");
                continue;
            }
        };
        let probes = probes.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let response = route(&probes, request.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(%peer, "serving a connection: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    async fn body(response: Response<Full<Bytes>>) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn probes_and_metrics_answer() {
        let probes = Probes {
            ready: Arc::new(AtomicBool::new(false)),
            metrics: Arc::new(|| "errand_controller_reconciles_total 3\n".to_owned()),
        };
        assert_eq!(route(&probes, "/healthz").status(), StatusCode::OK);
        assert_eq!(
            route(&probes, "/readyz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        probes.ready.store(true, Ordering::Relaxed);
        assert_eq!(route(&probes, "/readyz").status(), StatusCode::OK);
        assert!(
            body(route(&probes, "/metrics"))
                .await
                .contains("reconciles_total 3")
        );
        assert_eq!(route(&probes, "/nope").status(), StatusCode::NOT_FOUND);
    }
}
