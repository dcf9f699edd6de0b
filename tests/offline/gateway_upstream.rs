//! The gateway's upstream over real sockets, without a cluster: an agent server that answers with a redirect (to a "metadata" listener on loopback) gets the caller a 502 that carries neither the target's body nor the `Location`, and the target is never called; one that does not answer gets a 502 that names no address.

use crate::support::anyone::Anyone;
use errand::cluster::listener::ServerLimits;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use errand::api::{AgentDeployment, AgentDeploymentSpec, AgentDeploymentStatus, DeploymentPhase};
use errand::gateway::server::{Directory, Gateway, serve};
use errand::gateway::sessions::{SessionLimits, Sessions};

struct OnePod(SocketAddr);

impl Directory for OnePod {
    fn deployments(&self, _: &str) -> Vec<Arc<AgentDeployment>> {
        let mut deployment = AgentDeployment::new("calc", AgentDeploymentSpec::default());
        deployment.metadata.namespace = Some("team".into());
        deployment.status = Some(AgentDeploymentStatus {
            phase: Some(DeploymentPhase::Ready),
            ..AgentDeploymentStatus::default()
        });
        vec![Arc::new(deployment)]
    }

    fn ready_endpoints(&self, _: &str, _: &AgentDeployment) -> Vec<SocketAddr> {
        vec![self.0]
    }
}

/// A listener answering every request with `answer`, counting the requests it got.
async fn answering(answer: String) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            counted.fetch_add(1, Ordering::SeqCst);
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0; 64 * 1024];
                let _ = stream.read(&mut buffer).await;
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (address, calls)
}

fn http_answer(status_line: &str, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status_line}\r\n{headers}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The gateway's paths that reach an agent server.
const PATHS: [&str; 3] = ["invoke", "v1/chat/completions", "chat"];

/// A gateway on loopback in front of the one agent server at `agent`, with its session store;
/// its URL and its serving task.
async fn gateway_to(agent: SocketAddr) -> (String, tokio::task::JoinHandle<()>, tempfile::TempDir) {
    let store = tempfile::tempdir().unwrap();
    let gateway = Arc::new(Gateway {
        authorizer: Box::new(Anyone),
        directory: Box::new(OnePod(agent)),
        sessions: Sessions::new(
            errand::store::Store::open(&format!("file://{}", store.path().display())).unwrap(),
            SessionLimits::default(),
        ),
        client: errand::gateway::agent_client(),
        next: AtomicUsize::new(0),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = tokio::spawn(serve(listener, None, ServerLimits::DEFAULT, gateway));
    (url, served, store)
}

/// A caller's request to `path` of deployment `team/calc` through the gateway at `url`.
async fn post(url: &str, path: &str) -> reqwest::Response {
    let body = match path {
        "invoke" => serde_json::json!({"input": "2+2"}),
        "chat" => serde_json::json!({"session": "s1", "message": "hi"}),
        _ => serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    };
    reqwest::Client::new()
        .post(format!("{url}/v1/namespaces/team/deployments/calc/{path}"))
        .bearer_auth("t")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_agent_server_that_does_not_answer_gets_the_caller_a_502_naming_no_address() {
    // One port that refuses connections, one server that hangs up without an answer.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refusing = closed.local_addr().unwrap();
    drop(closed);
    let (hanging_up, _) = answering(String::new()).await;
    for agent in [refusing, hanging_up] {
        let (url, served, _store) = gateway_to(agent).await;
        for path in PATHS {
            let response = post(&url, path).await;
            assert_eq!(response.status().as_u16(), 502, "{agent} on {path}");
            let text = response.text().await.unwrap();
            assert!(text.contains("did not answer"), "{path}: {text}");
            for detail in [agent.to_string(), agent.ip().to_string(), "http://".into()] {
                assert!(!text.contains(&detail), "{path} names {detail}: {text}");
            }
        }
        served.abort();
    }
}

#[tokio::test]
async fn a_redirecting_agent_server_gets_the_caller_a_502_not_the_metadata() {
    let (metadata, metadata_calls) = answering(http_answer(
        "200 OK",
        "",
        r#"{"AccessKeyId":"node-credentials"}"#,
    ))
    .await;
    let location = format!("http://{metadata}/latest/meta-data/iam/security-credentials/node");
    for status in [
        "302 Found",
        "307 Temporary Redirect",
        "301 Moved Permanently",
    ] {
        let (agent, agent_calls) = answering(http_answer(
            status,
            &format!("location: {location}\r\n"),
            &format!(r#"{{"see":"{location}"}}"#),
        ))
        .await;
        let (url, served, _store) = gateway_to(agent).await;
        for path in PATHS {
            let response = post(&url, path).await;
            assert_eq!(response.status().as_u16(), 502, "{status} on {path}");
            assert!(response.headers().get("location").is_none());
            let text = response.text().await.unwrap();
            assert!(text.contains("redirect"), "{text}");
            assert!(!text.contains("node-credentials"), "{text}");
            assert!(
                !text.contains("meta-data"),
                "the Location is not passed on: {text}"
            );
        }
        assert_eq!(agent_calls.load(Ordering::SeqCst), 3, "{status}");
        served.abort();
    }
    assert_eq!(metadata_calls.load(Ordering::SeqCst), 0, "never followed");
}
