//! The proxy's I/O shell on loopback: a listed name is reached by CONNECT and by forwarding (a streamed answer passes through chunk by chunk, without the proxy's own headers going upstream, also to a client that shut its write side after its request), and everything else is answered with a refusal.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use futures::future::BoxFuture;

use super::*;
use crate::api::contract::EGRESS_HOSTS_ANNOTATION;

const LISTED: &str = "api.example.test";

/// An upstream that answers each connection's one request with its head echoed back,
/// streamed as two chunks a moment apart.
async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).replace("\r\n", "|");
                let first = format!("seen {head}\n");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{first}\r\n",
                    first.len()
                );
                stream.write_all(answer.as_bytes()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
                stream.write_all(b"5\r\ndone\n\r\n0\r\n\r\n").await.unwrap();
            });
        }
    });
    address
}

/// A proxy whose one caller is a running pod at `caller_ip` listing [`LISTED`] and
/// `metadata.example.test` on `port`; [`LISTED`] resolves to the upstream and the other to
/// the metadata address.
async fn proxy(caller_ip: &str, upstream: SocketAddr) -> SocketAddr {
    let hosts = format!(
        r#"[{{"host":"{LISTED}","ports":[{0}]}},{{"host":"metadata.example.test","ports":[{0}]}}]"#,
        upstream.port()
    );
    let pod = loopback::running_pod(
        "team",
        "run",
        caller_ip,
        &[],
        &[(EGRESS_HOSTS_ANNOTATION, hosts)],
    );
    let names = loopback::FixedNames(vec![
        (LISTED.into(), upstream.ip()),
        (
            "metadata.example.test".into(),
            "169.254.169.254".parse().unwrap(),
        ),
    ]);
    loopback::serve(vec![pod], names, None).await
}

/// Sends `request` to the proxy at `proxy`, shuts the write side as `nc` does, and reads
/// until the proxy closes (or 5 s pass).
async fn exchange(proxy: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_listed_name_is_reached_by_connect_and_by_forwarding_with_the_answer_streamed() {
    let upstream = upstream().await;
    let proxy = proxy("127.0.0.1", upstream).await;
    let port = upstream.port();

    let tunnel = exchange(
        proxy,
        &format!(
            "CONNECT {LISTED}:{port} HTTP/1.1\r\nHost: {LISTED}:{port}\r\n\r\n\
             GET /v1/models HTTP/1.1\r\nHost: {LISTED}\r\n\r\n"
        ),
    )
    .await;
    assert!(tunnel.starts_with("HTTP/1.1 200"), "{tunnel}");
    assert!(tunnel.contains("seen GET /v1/models HTTP/1.1|"), "{tunnel}");
    assert!(tunnel.contains("done"), "{tunnel}");

    let forwarded = exchange(
        proxy,
        &format!(
            "GET http://{LISTED}:{port}/v1/chat?stream=1 HTTP/1.0\r\nHost: {LISTED}:{port}\r\n\
             Proxy-Authorization: Basic c2VjcmV0\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(forwarded.starts_with("HTTP/1.0 200"), "{forwarded}");
    assert!(
        forwarded.contains("seen GET /v1/chat?stream=1 HTTP/1.0|"),
        "origin form upstream: {forwarded}"
    );
    assert!(
        !forwarded
            .to_ascii_lowercase()
            .contains("proxy-authorization"),
        "the proxy's own header stays with the proxy: {forwarded}"
    );
    assert!(forwarded.contains("done"), "both chunks pass: {forwarded}");
}

#[tokio::test]
async fn everything_else_is_answered_with_a_refusal_that_says_why() {
    let upstream = upstream().await;
    let port = upstream.port();
    let proxy_for_us = proxy("127.0.0.1", upstream).await;
    let proxy_for_another = proxy("10.1.2.3", upstream).await;
    let connect =
        |authority: String| format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    for (proxy, request, status, says) in [
        (
            proxy_for_another,
            connect(format!("{LISTED}:{port}")),
            "403",
            "serves only the running pods of runs",
        ),
        (
            proxy_for_us,
            connect(format!("other.example.test:{port}")),
            "403",
            "not in this run's egress.hosts",
        ),
        (
            proxy_for_us,
            connect(format!("{LISTED}:{}", port.wrapping_add(1).max(1))),
            "403",
            "not in this run's egress.hosts",
        ),
        (
            proxy_for_us,
            connect(format!("127.0.0.1:{port}")),
            "403",
            "reaches host names only",
        ),
        (
            proxy_for_us,
            connect(format!("metadata.example.test:{port}")),
            "403",
            "resolves only to addresses runs may not reach",
        ),
        (
            proxy_for_us,
            "GET /relative HTTP/1.1\r\nHost: x\r\n\r\n".to_owned(),
            "400",
            "not a proxy request",
        ),
    ] {
        let answer = exchange(proxy, &request).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")) && answer.contains(says),
            "{request:?}: {answer}"
        );
    }
}

/// Keys of one Secret: `team/openai` holds `OPENAI_API_KEY`.
struct OneSecret;

impl model_route::KeySource for OneSecret {
    fn key(&self, namespace: &str, secret: &str, key: &str) -> BoxFuture<'static, Option<String>> {
        let found = (namespace == "team" && secret == "openai" && key == "OPENAI_API_KEY")
            .then(|| "sk-real-key".to_owned());
        Box::pin(async move { found })
    }
}

#[tokio::test]
async fn a_run_calls_its_model_with_its_placeholder_and_only_the_model_sees_the_real_key() {
    use crate::api::contract::{EXECUTION_UID_LABEL, MODEL_ROUTES_ANNOTATION};
    use crate::resolve::run_tokens::RunTokens;
    use loopback::{FixedNames, running_pod, serve, stand_in_model};

    let model = stand_in_model(
        "127.0.0.1:0".parse().unwrap(),
        &["model.example.test".to_owned()],
    )
    .await;
    let port = model.address.port();
    let names = || {
        FixedNames(vec![
            ("model.example.test".into(), "127.0.0.1".parse().unwrap()),
            (
                "metadata.example.test".into(),
                "169.254.169.254".parse().unwrap(),
            ),
        ])
    };
    let routes = serde_json::json!([
        {"alias": "default", "baseUrl": format!("https://model.example.test:{port}/v1"),
         "env": "OPENAI_API_KEY", "secret": "openai", "key": "OPENAI_API_KEY"},
        {"alias": "meta", "baseUrl": format!("https://metadata.example.test:{port}/v1"),
         "env": "OPENAI_API_KEY", "secret": "openai", "key": "OPENAI_API_KEY"},
        {"alias": "gone", "baseUrl": format!("https://model.example.test:{port}/v1"),
         "env": "OTHER_KEY", "secret": "deleted", "key": "OTHER_KEY"},
    ])
    .to_string();
    let tokens = RunTokens::models(b"0123456789abcdef0123456789abcdef");
    let route = || {
        model_route::ModelRoute::new(
            tokens.clone(),
            Arc::new(OneSecret),
            loopback::loopback_policy(),
            Arc::new(names()),
            vec![reqwest::Certificate::from_pem(model.ca_pem.as_bytes()).unwrap()],
        )
    };
    let pod = |ip: &str| {
        running_pod(
            "team",
            "run",
            ip,
            &[(EXECUTION_UID_LABEL, "uid-1")],
            &[(MODEL_ROUTES_ANNOTATION, routes.clone())],
        )
    };
    let proxy = serve(vec![pod("127.0.0.1")], names(), Some(route())).await;
    let elsewhere = serve(vec![pod("10.1.2.3")], names(), Some(route())).await;
    let token = tokens.mint("team", "uid-1");
    let agent = reqwest::Client::builder().no_proxy().build().unwrap();
    let call = |proxy: SocketAddr, alias: &str, token: &str, stream: bool| {
        agent
            .post(format!("http://{proxy}/models/{alias}/chat/completions"))
            .bearer_auth(token)
            .header("x-api-key", "sent-by-the-agent")
            .header("content-type", "application/json")
            .body(
                serde_json::json!({"model": "m", "stream": stream,
                                   "messages": [{"role": "user", "content": "12 * 8?"}]})
                .to_string(),
            )
            .send()
    };

    let answer = call(proxy, "default", &token, false).await.unwrap();
    assert_eq!(answer.status(), 200);
    let answer: serde_json::Value = serde_json::from_str(&answer.text().await.unwrap()).unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "96");

    let streamed = call(proxy, "default", &token, true).await.unwrap();
    assert_eq!(streamed.status(), 200);
    assert_eq!(streamed.headers()["content-type"], "text/event-stream");
    let events = streamed.text().await.unwrap();
    let data: Vec<&str> = events.lines().filter(|l| l.starts_with("data: ")).collect();
    assert_eq!(data.len(), 3, "two chunks and [DONE]: {events}");
    assert_eq!(data[2], "data: [DONE]");

    let other_run = tokens.mint("team", "uid-2");
    for (proxy, alias, token, status, says) in [
        (
            proxy,
            "default",
            other_run.as_str(),
            401,
            "not this run's placeholder",
        ),
        (
            proxy,
            "default",
            "sk-real-key",
            401,
            "not this run's placeholder",
        ),
        (
            proxy,
            "missing",
            token.as_str(),
            404,
            "no model of this run",
        ),
        (
            proxy,
            "meta",
            token.as_str(),
            403,
            "addresses runs may not reach",
        ),
        (
            proxy,
            "gone",
            token.as_str(),
            502,
            "cannot be read from its Secret",
        ),
        (
            elsewhere,
            "default",
            token.as_str(),
            403,
            "serves only the running pods",
        ),
    ] {
        let refused = call(proxy, alias, token, false).await.unwrap();
        assert_eq!(refused.status(), status, "{alias} {token}");
        let text = refused.text().await.unwrap();
        assert!(text.contains(says), "{alias}: {text}");
    }
    let oversized = agent
        .post(format!("http://{proxy}/models/default/chat/completions"))
        .bearer_auth(&token)
        .body(vec![b'x'; decide::MAX_MODEL_REQUEST_BYTES + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(oversized.status(), 413);
    assert!(
        oversized
            .text()
            .await
            .unwrap()
            .contains("larger than the model route carries")
    );

    // Sent as written (a URL library would resolve the dots before sending).
    let escape = exchange(
        proxy,
        &format!(
            "GET /models/default/%2e%2e/admin HTTP/1.1\r\nHost: x\r\n\
             Authorization: Bearer {token}\r\n\r\n"
        ),
    )
    .await;
    assert!(escape.starts_with("HTTP/1.1 400"), "{escape}");

    let seen = model.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        ["Bearer sk-real-key", "Bearer sk-real-key"],
        "only the two allowed calls arrived, each with the real key"
    );
}
