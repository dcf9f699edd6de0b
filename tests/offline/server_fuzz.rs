//! Property tests of every server's request parsing with arbitrary methods, paths, headers and bodies: the gateway, the controller's HTTP endpoint (probes, grants, blobs) and the egress proxy over real sockets, within their limits, and the pure parsers of the webhook, the data API and the gateway. No panic, an answer or a closed connection in bounded time, and the server still serves afterwards.

use crate::support::anyone::Anyone;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use errand::api::{AgentDeployment, AgentDeploymentSpec, AgentDeploymentStatus, DeploymentPhase};
use errand::cluster::listener::ServerLimits;
use errand::gateway::server::{Directory, Gateway};
use errand::gateway::sessions::{SessionLimits, Sessions};
use errand::resolve::run_tokens::RunTokens;
use errand::runner::end_report::RunEndReport;
use errand::serve::blobs::BlobEndpoint;
use errand::serve::http::Probes;
use errand::serve::run_ended::{RecordError, Recorded, Recorder, RunEndedEndpoint};
use errand::store::grants::HmacSigner;

const SOCKET_CASES: u32 = 200;
const PARSER_CASES: u32 = 2000;
/// The name of the threads the servers under test run on: a panic on one is counted.
const SERVER_THREAD: &str = "fuzzed-server";

static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_server_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(SERVER_THREAD) {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

/// One deployment, `calc`, whose pod is an address nobody listens on.
struct Nowhere;

impl Directory for Nowhere {
    fn deployments(&self, _: &str) -> Vec<Arc<AgentDeployment>> {
        let mut deployment = AgentDeployment::new("calc", AgentDeploymentSpec::default());
        deployment.metadata.namespace = Some("team".into());
        deployment.status = Some(AgentDeploymentStatus {
            phase: Some(DeploymentPhase::Ready),
            agent: Some("calc".into()),
            ..AgentDeploymentStatus::default()
        });
        vec![Arc::new(deployment)]
    }

    fn ready_endpoints(&self, _: &str, _: &AgentDeployment) -> Vec<std::net::SocketAddr> {
        vec!["127.0.0.1:9".parse().unwrap()]
    }
}

const LIMITS: ServerLimits = ServerLimits {
    header_read_timeout: Duration::from_millis(500),
    handshake_timeout: Duration::from_millis(500),
    body_idle_timeout: Duration::from_millis(500),
    max_connections: 64,
};

/// Resolves every name to a closed loopback port, at once.
struct Closed;

impl errand::egress_proxy::Resolver for Closed {
    fn resolve(
        &self,
        _host: &str,
        _port: u16,
    ) -> futures::future::BoxFuture<'static, std::io::Result<Vec<std::net::SocketAddr>>> {
        Box::pin(async { Ok(vec!["127.0.0.1:1".parse().unwrap()]) })
    }
}

/// The egress proxy, its one caller a running pod at 127.0.0.1 listing `api.example.test`.
fn egress_proxy(listener: TcpListener) {
    use k8s_openapi::api::core::v1::{Pod, PodStatus};
    let mut pod = Pod::default();
    pod.metadata.name = Some("run".into());
    pod.metadata.annotations = Some(
        [(
            errand::api::contract::EGRESS_HOSTS_ANNOTATION.to_owned(),
            r#"[{"host":"api.example.test"}]"#.to_owned(),
        )]
        .into(),
    );
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("127.0.0.1".into()),
        ..PodStatus::default()
    });
    let (pods, mut writer) = kube::runtime::reflector::store();
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(pod));
    let policy = errand::outbound::OutboundPolicy::default().allow("127.0.0.0/8".parse().unwrap());
    let proxy =
        errand::egress_proxy::EgressProxy::new(pods, Arc::new(policy), Arc::default(), LIMITS)
            .with_resolver(Arc::new(Closed));
    let mut tasks = tokio::task::JoinSet::new();
    errand::egress_proxy::start(proxy, listener, LIMITS, &mut tasks);
    tasks.detach_all();
}

/// A run-ended endpoint's record that keeps nothing: a fuzzed report never gets this far.
struct Unrecorded;

#[async_trait::async_trait]
impl Recorder for Unrecorded {
    async fn record(&self, _: &RunEndReport) -> Result<Recorded, RecordError> {
        Err(RecordError::Unavailable(
            "a fuzzed report was believed".into(),
        ))
    }
}

/// The gateway, the controller's HTTP endpoint and the egress proxy, on a runtime of their
/// own; their addresses. The runtime lives as long as the test.
fn servers(store: &std::path::Path) -> (tokio::runtime::Runtime, [String; 3]) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(SERVER_THREAD)
        .enable_all()
        .build()
        .unwrap();
    let store = errand::store::Store::open(&format!("file://{}", store.display())).unwrap();
    let addresses = runtime.block_on(async {
        let gateway_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addresses = [
            gateway_listener.local_addr().unwrap().to_string(),
            http_listener.local_addr().unwrap().to_string(),
            proxy_listener.local_addr().unwrap().to_string(),
        ];
        egress_proxy(proxy_listener);
        let gateway = Arc::new(Gateway {
            authorizer: Box::new(Anyone),
            directory: Box::new(Nowhere),
            sessions: Sessions::new(store.clone(), SessionLimits::default()),
            client: errand::gateway::agent_client(),
            next: AtomicUsize::new(0),
        });
        tokio::spawn(errand::gateway::server::serve(
            gateway_listener,
            None,
            LIMITS,
            gateway,
        ));
        let signer = Arc::new(HmacSigner::new(
            "http://errand",
            b"fuzz-key-0123456789abcdef",
        ));
        let probes = Probes {
            ready: Arc::new(AtomicBool::new(true)),
            metrics: Arc::new(String::new),
            grants: None,
            run_ended: Some(Arc::new(RunEndedEndpoint::new(
                store.clone(),
                RunTokens::run_ended(b"fuzz-key-0123456789abcdef0123456"),
                Arc::new(Unrecorded),
                Arc::default(),
            ))),
            blobs: Some(Arc::new(
                BlobEndpoint::new(store, signer).with_max_put_bytes(1024),
            )),
        };
        tokio::spawn(errand::serve::http::serve(http_listener, LIMITS, probes));
        addresses
    });
    (runtime, addresses)
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GET".to_owned()),
        Just("POST".to_owned()),
        Just("PUT".to_owned()),
        Just("DELETE".to_owned()),
        Just("CONNECT".to_owned()),
        "[A-Z]{1,8}",
        "[ -~]{0,12}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    let known = prop_oneof![
        Just("/healthz".to_owned()),
        Just("/metrics".to_owned()),
        Just("/grants".to_owned()),
        Just("/run-ended".to_owned()),
        Just("/blobs/results/a/b/c/run_result?expires=1&signature=00".to_owned()),
        Just("/v1/namespaces/team/deployments/calc/invoke".to_owned()),
        Just("/v1/namespaces/team/deployments/calc/chat".to_owned()),
        Just("/v1/namespaces/team/deployments/calc/sessions/s1".to_owned()),
        Just("/v1/namespaces/team/agents/calc/v1/chat/completions".to_owned()),
        Just("api.example.test:443".to_owned()),
        Just("http://api.example.test/v1/models".to_owned()),
        Just("169.254.169.254:80".to_owned()),
    ];
    prop_oneof![
        known.clone(),
        (known, "[ -~]{0,40}").prop_map(|(p, tail)| format!("{p}{tail}")),
        "/[ -~]{0,80}",
    ]
}

fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let name = prop_oneof![
        Just("content-length".to_owned()),
        Just("transfer-encoding".to_owned()),
        Just("authorization".to_owned()),
        Just("content-type".to_owned()),
        Just("range".to_owned()),
        Just("connection".to_owned()),
        "[a-z-]{1,20}",
        "[ -~]{0,20}",
    ];
    let value = prop_oneof![
        Just(b"chunked".to_vec()),
        Just(b"Bearer t".to_vec()),
        Just(b"application/json".to_vec()),
        Just(b"bytes=0-".to_vec()),
        Just(b"18446744073709551616".to_vec()),
        "[0-9]{1,6}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    (name, value)
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"{\"input\":\"2+2\"}".to_vec()),
        Just(b"{\"session\":\"s1\",\"message\":\"hi\"}".to_vec()),
        Just(b"0\r\n\r\n".to_vec()),
        Just(b"ffffffffffffffff\r\nx".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..2048),
    ]
}

/// Sends one raw request and reads whatever comes back until the server closes, for at most 3 s: the server answers
/// or closes the connection within its limits.
async fn exchange(address: &str, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    // The write side stays open: hyper closes a connection whose client shut it down.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut answer))
        .await
        .expect("the server answers or closes within its limits")
        .ok();
    answer
}

proptest! {
    #![proptest_config(ProptestConfig { cases: SOCKET_CASES, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_requests_never_panic_a_server_and_it_serves_on(
        method in method(),
        path in path(),
        headers in proptest::collection::vec(header(), 0..8),
        body in body(),
        server in 0..3usize,
    ) {
        count_server_panics();
        let store = tempfile::tempdir().unwrap();
        let (runtime, addresses) = servers(store.path());
        let address = &addresses[server];
        let mut request = format!("{method} {path} HTTP/1.1\r\nhost: x\r\n").into_bytes();
        for (name, value) in &headers {
            request.extend_from_slice(name.as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(value);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(&body);
        let answer = runtime.block_on(exchange(address, &request));
        prop_assert!(answer.is_empty() || answer.starts_with(b"HTTP/1.1 "), "{:?}", String::from_utf8_lossy(&answer));
        let healthy = runtime.block_on(exchange(
            &addresses[1],
            b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        ));
        prop_assert!(healthy.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&healthy));
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a server thread panicked");
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: PARSER_CASES, ..ProptestConfig::default() })]

    #[test]
    fn the_pure_parsers_take_any_input(
        method in method(),
        path in path(),
        bytes in body(),
        text in "[ -~]{0,40}",
    ) {
        let _ = errand::webhook::review::parse(&bytes);
        let _ = errand::dataapi::route::route(&method, &path);
        if let Ok(method) = hyper::Method::from_bytes(method.as_bytes()) {
            let _ = errand::gateway::route::route(&method, &path);
        }
        let _ = errand::gateway::requests::invoke(&bytes);
        let _ = errand::gateway::requests::chat_turn(&bytes);
        let _ = errand::gateway::requests::chat_completions(&bytes);
        let _ = errand::gateway::requests::session_name(&text);
        let asked = errand::dataapi::ranges::Asked {
            if_none_match: Some(&text),
            range: Some(&text),
            if_range: Some(&text),
        };
        let _ = errand::dataapi::ranges::plan(1000, Some("\"abc\""), asked);
        let _ = errand::dataapi::ranges::plan(0, None, asked);
    }
}
