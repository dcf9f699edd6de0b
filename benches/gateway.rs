//! The gateway's added latency: 1,000 small invoke requests to a deployment's pod directly and the same through errand's gateway (TokenReview and SubjectAccessReview cached, EndpointSlice routing), interleaved one for one so both see the same machine, with p50 and p99 of each and their ratios (limits 1.5 and 2).
//!
//! Needs the test cluster up with the test images (`bash hack/testenv/up.sh`, under the
//! cluster lock) and `source /var/tmp/errand-testenv/env`; the controller and its gateway run
//! in this process, as in `tests/cluster/gateway.rs`. The agent server is
//! `hack/images/agent-server.sh` (busybox sh, one process per request), the same for both
//! paths; the absolute added time is printed beside the ratios, since a slower server makes
//! any ratio look better.
//!
//! `cargo bench --bench gateway` (`REQUESTS=N` for another count).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;

use errand::api::DeploymentPhase;
use support::deployments::{
    allow_invoke, create_deployment, create_server_agent, pod_ip, token_of, wait_for_phase,
};
use support::harness::{Harness, RUN_WAIT};

/// The median's limit: the gateway's p50 over the direct p50.
const P50_LIMIT: f64 = 1.5;
/// The 99th percentile's limit.
const P99_LIMIT: f64 = 2.0;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("gateway benchmark: skipped outside `cargo bench --bench gateway`");
        return;
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(bench());
}

/// The `q` quantile of sorted durations.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index]
}

async fn timed(request: reqwest::RequestBuilder) -> Duration {
    let started = Instant::now();
    let response = request.send().await.expect("the request is answered");
    assert_eq!(response.status().as_u16(), 200, "the request succeeds");
    response.bytes().await.expect("the body arrives");
    started.elapsed()
}

async fn bench() {
    let requests: usize = std::env::var("REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let harness = Harness::start_with_gateway("gateway-bench")
        .await
        .expect("the test cluster (bash hack/testenv/up.sh)");
    let token = token_of(&harness, "caller").await;
    allow_invoke(&harness, "caller").await;
    create_server_agent(&harness, "echo").await;
    create_deployment(&harness, "echo", "echo", json!({})).await;
    let ready = wait_for_phase(&harness, "echo", DeploymentPhase::Ready, RUN_WAIT).await;
    let ip = pod_ip(&harness, &ready).await;
    let direct_url = format!("http://{ip}:8000/invoke");
    let gateway_url = format!(
        "{}/v1/namespaces/{}/deployments/echo/invoke",
        harness.gateway_url(),
        harness.namespace.name()
    );
    let client = reqwest::Client::new();
    let body = json!({"input": "ping"}).to_string();
    let direct = || {
        client
            .post(&direct_url)
            .header("content-type", "application/json")
            .body(body.clone())
    };
    let through_gateway = || {
        client
            .post(&gateway_url)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(body.clone())
    };
    // Until the gateway's caches route to the pod, then a warm-up of both paths.
    let deadline = Instant::now() + Duration::from_secs(60);
    while through_gateway()
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
        != 200
    {
        assert!(
            Instant::now() < deadline,
            "the gateway never routed to the pod"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for _ in 0..20 {
        timed(direct()).await;
        timed(through_gateway()).await;
    }
    let (mut direct_times, mut gateway_times) = (Vec::new(), Vec::new());
    for i in 0..requests {
        // Alternate which goes first, so neither always follows the other.
        if i % 2 == 0 {
            direct_times.push(timed(direct()).await);
            gateway_times.push(timed(through_gateway()).await);
        } else {
            gateway_times.push(timed(through_gateway()).await);
            direct_times.push(timed(direct()).await);
        }
    }
    direct_times.sort();
    gateway_times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (d50, d99) = (quantile(&direct_times, 0.5), quantile(&direct_times, 0.99));
    let (g50, g99) = (
        quantile(&gateway_times, 0.5),
        quantile(&gateway_times, 0.99),
    );
    let (r50, r99) = (ms(g50) / ms(d50), ms(g99) / ms(d99));
    println!("gateway benchmark: {requests} invoke requests each, interleaved");
    println!(
        "  direct to the pod: p50 {:.2} ms, p99 {:.2} ms",
        ms(d50),
        ms(d99)
    );
    println!(
        "  through the gateway: p50 {:.2} ms, p99 {:.2} ms",
        ms(g50),
        ms(g99)
    );
    println!(
        "  added: p50 {:.2} ms, p99 {:.2} ms; ratio p50 {r50:.2} (limit {P50_LIMIT}), p99 {r99:.2} (limit {P99_LIMIT})",
        ms(g50) - ms(d50),
        ms(g99) - ms(d99)
    );
    harness.finish().await;
    assert!(r50 <= P50_LIMIT && r99 <= P99_LIMIT, "over the limits");
}
