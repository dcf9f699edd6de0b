//! The gateway recipe from a workstation: behind `kubectl port-forward … 9443:gateway`, errand's own gateway client trusting only the serving CA (`ERRAND_GATEWAY_CA`) verifies the controller's self-signed serving certificate for `https://localhost` and `https://127.0.0.1`, as it does for the Service's DNS names; a certificate with only those names fails there.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use errand::cluster::serving::{certs, tls};
use errand::ops::{GatewayClient, GatewayEndpoint};

/// Serves HTTPS on a loopback port with a certificate for `names`, answering every request
/// `{"ok": true}`; its port and the CA that signed the certificate.
async fn serve(names: &[String]) -> (u16, String) {
    let material = certs::generate(names, jiff::Timestamp::now()).unwrap();
    let certificate = Arc::new(tls::ServingCertificate::default());
    certificate
        .load_pem(&material.cert_pem, &material.key_pem)
        .unwrap();
    let acceptor = tls::acceptor(certificate).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1
                {
                    head.push(byte[0]);
                }
                let body = br#"{"ok":true}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.write_all(body).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (port, material.ca_pem)
}

/// `GET /` through errand's gateway client at `url`, trusting only the CA in `ca`.
async fn get(url: String, ca: &std::path::Path) -> Result<serde_json::Value, errand::ops::Error> {
    let endpoint = GatewayEndpoint {
        url: Some(url),
        token: Some("a-token".into()),
        token_file: None,
        ca: Some(ca.to_owned()),
    };
    GatewayClient::new(&endpoint, None)?.get("/").await
}

#[tokio::test]
async fn a_port_forward_to_localhost_verifies_the_serving_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let (port, ca_pem) = serve(&certs::serving_names("errand", "errand-system")).await;
    std::fs::write(&ca, ca_pem).unwrap();
    for host in ["localhost", "127.0.0.1"] {
        let answer = get(format!("https://{host}:{port}"), &ca).await;
        assert_eq!(
            answer.map_err(|e| e.to_string()),
            Ok(serde_json::json!({"ok": true})),
            "https://{host}:{port}"
        );
    }

    // With the Service's names only (as before), the same recipe fails hostname verification.
    let (port, ca_pem) = serve(&certs::service_dns_names("errand", "errand-system")).await;
    std::fs::write(&ca, ca_pem).unwrap();
    let refused = get(format!("https://localhost:{port}"), &ca)
        .await
        .unwrap_err();
    assert_eq!(
        refused.code,
        errand::ops::ErrorCode::GatewayUnreachable,
        "{refused}"
    );
}
