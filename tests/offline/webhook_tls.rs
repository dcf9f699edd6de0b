//! The webhook's HTTPS endpoint on a real socket: a client that trusts only the generated CA and checks the Service's DNS name (as the API server does) posts AdmissionReviews and reads the verdicts.

use errand::cluster::listener::ServerLimits;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};

use errand::api::AgentExecutionSpec;
use errand::cluster::ApiError;
use errand::cluster::metrics::MetricsRegistry;
use errand::cluster::serving::{certs, tls};
use errand::resolve::{InMemoryCatalog, InvalidSpec, RunLimits, Snapshot, resolve_execution};
use errand::webhook::metrics::AdmissionMetrics;
use errand::webhook::server::{self, Admission, Resolver, VALIDATE_PATH};

const SERVICE_NAME: &str = "errand-webhook.errand-system.svc";

struct InMemory(InMemoryCatalog);

impl Resolver for InMemory {
    fn resolve<'a>(
        &'a self,
        namespace: &'a str,
        spec: &'a AgentExecutionSpec,
    ) -> BoxFuture<'a, Result<Result<Snapshot, InvalidSpec>, ApiError>> {
        Box::pin(async move { Ok(resolve_execution(namespace, spec, &self.0)) })
    }
}

/// Starts the webhook on a loopback port, answering the paths that end with `path_token` (the
/// plain ones without); returns its address, the CA to trust and the registry its metrics are
/// on.
async fn start_with(path_token: Option<&str>) -> (std::net::SocketAddr, String, MetricsRegistry) {
    let names = certs::service_dns_names("errand-webhook", "errand-system");
    let material = certs::generate(&names, jiff::Timestamp::now()).unwrap();
    let certificate = Arc::new(tls::ServingCertificate::default());
    certificate
        .load_pem(&material.cert_pem, &material.key_pem)
        .unwrap();
    let acceptor = tls::acceptor(certificate).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let agent = serde_json::from_value(json!({
        "runtime": {"image": "errand.local/busybox:test", "command": ["sh", "-c", "echo 96"]},
        "config": {"config_format": "agents-spec-v1", "name": "calculator"},
    }))
    .unwrap();
    let metrics = Arc::new(AdmissionMetrics::default());
    let mut registry = MetricsRegistry::default();
    metrics.register(&mut registry);
    let admission = Arc::new(Admission {
        resolver: Box::new(InMemory(InMemoryCatalog::default().with_agent(
            "team-a",
            "calculator",
            agent,
        ))),
        metrics,
        limits: RunLimits::default(),
        path_token: path_token.map(str::to_owned),
    });
    tokio::spawn(server::serve(
        listener,
        acceptor,
        ServerLimits::DEFAULT,
        admission,
    ));
    (address, material.ca_pem, registry)
}

async fn start() -> (std::net::SocketAddr, String, MetricsRegistry) {
    start_with(None).await
}

/// One HTTPS request with a client that trusts only `ca_pem`; returns the status line and body.
async fn post(
    address: std::net::SocketAddr,
    ca_pem: &str,
    path: &str,
    body: &[u8],
) -> (String, String) {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut stream = connector
        .connect(ServerName::try_from(SERVICE_NAME).unwrap(), tcp)
        .await
        .expect("the handshake verifies the certificate for the Service's name");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {SERVICE_NAME}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    // The server closes the TLS session without close_notify at times; what was read counts.
    let _ = stream.read_to_end(&mut answer).await;
    let answer = String::from_utf8(answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

fn create_review(agent: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "b1c2",
            "kind": {"group": "errand.dev", "version": "v1alpha1", "kind": "AgentExecution"},
            "resource": {"group": "errand.dev", "version": "v1alpha1", "resource": "agentexecutions"},
            "name": "calc",
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution",
                "metadata": {"name": "calc", "namespace": "team-a"},
                "spec": {"agentRef": {"name": agent}, "input": "What is 12 multiplied by 8?", "timeoutSeconds": 3600},
            },
            "oldObject": null,
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn the_webhook_answers_admission_reviews_over_verified_tls() {
    let (address, ca, registry) = start().await;

    let (status, body) = post(address, &ca, VALIDATE_PATH, &create_review("calculator")).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let review: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(review["response"]["uid"], "b1c2");
    assert_eq!(review["response"]["allowed"], true, "{review}");

    let (status, body) = post(address, &ca, VALIDATE_PATH, &create_review("nope")).await;
    assert_eq!(status, "HTTP/1.1 200 OK", "a refusal is a normal answer");
    let review: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(review["response"]["allowed"], false);
    assert!(
        review["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains(r#"spec.agentRef.name: Agent "nope" not found"#),
        "{review}"
    );

    let (status, _) = post(address, &ca, "/elsewhere", b"{}").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");

    let text = registry.render();
    assert!(
        text.contains("errand_controller_admission_reviews_total{verdict=\"allowed\"} 1"),
        "{text}"
    );
    assert!(text.contains("errand_controller_admission_reviews_total{verdict=\"invalid\"} 1"));
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_ca_cannot_connect() {
    let (address, _, _) = start().await;
    let other_ca = certs::generate(
        &certs::service_dns_names("errand-webhook", "errand-system"),
        jiff::Timestamp::now(),
    )
    .unwrap()
    .ca_pem;
    let result = tokio::spawn(async move {
        post(
            address,
            &other_ca,
            VALIDATE_PATH,
            &create_review("calculator"),
        )
        .await
    })
    .await;
    assert!(result.is_err(), "the handshake must fail with a foreign CA");
}

#[tokio::test]
async fn a_caller_without_the_path_token_learns_nothing_about_any_object() {
    let token = errand::cluster::serving::caller::path_token(b"0123456789abcdef0123456789abcdef");
    let (address, ca, _) = start_with(Some(&token)).await;
    // Whether the agent exists or not, a caller without the token gets the same answer, made
    // without a review: no oracle for object names.
    for agent in ["calculator", "nope"] {
        for path in [
            VALIDATE_PATH.to_owned(),
            format!("{VALIDATE_PATH}/{}", "0".repeat(32)),
            format!("{VALIDATE_PATH}/{}x", token),
        ] {
            let (status, body) = post(address, &ca, &path, &create_review(agent)).await;
            assert_eq!(status, "HTTP/1.1 403 Forbidden", "{path}");
            assert_eq!(
                body,
                "admission reviews are answered for the API server only, on the path of the \
                 webhook configuration\n"
            );
        }
    }
    // The API server's path (as the controller writes it into the configuration) is answered.
    let path = errand::cluster::serving::caller::authenticated_path(VALIDATE_PATH, &token);
    let (status, body) = post(address, &ca, &path, &create_review("nope")).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let review: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(review["response"]["allowed"], false, "{review}");
    let (_, body) = post(address, &ca, "/elsewhere", b"{}").await;
    assert_eq!(body, "not found\n");
}
