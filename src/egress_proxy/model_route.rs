//! The egress proxy's model route: a run's call to one of its proxied models, sent on over TLS to the model's real `base_url` with the key from the run's Secret in place of the placeholder token, and the answer (a stream of server-sent events too) passed back as it comes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::listener::read_body;
use futures::TryStreamExt;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{self, HeaderMap, HeaderName};
use hyper::{Request, Response};
use k8s_openapi::api::core::v1::Secret;
use tracing::debug;

use super::ProxyBody;
use super::decide::{MAX_MODEL_REQUEST_BYTES, ModelCall, Refusal};
use crate::cluster::listener::RequestBody;
use crate::outbound::OutboundPolicy;
use crate::outbound::client::{Failure, check_literal, tenant_builder};
use crate::outbound::resolver::Resolver;
use crate::resolve::run_tokens::RunTokens;

/// How long connecting to a model's endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a model's answer may go quiet (a reasoning model may think a while before its
/// first token).
const READ_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a key read from its Secret is used before it is read again (a rotated key is
/// picked up within this).
const KEY_TTL: Duration = Duration::from_secs(10);

/// Headers never passed on: the hop's own, the host (the upstream's is set), and every way a
/// client sends a key (the real one replaces them).
const DROPPED_HEADERS: [&str; 13] = [
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
    "api-key",
    "x-api-key",
    "content-length",
];

/// Where the model route reads a model's real key.
pub trait KeySource: Send + Sync {
    /// The value of `key` in Secret `secret` of `namespace`, trimmed.
    fn key(&self, namespace: &str, secret: &str, key: &str) -> BoxFuture<'static, Option<String>>;
}

/// A key's place: namespace, Secret, key.
type KeyId = (String, String, String);

/// The cluster's Secrets, each value kept for [`KEY_TTL`].
pub struct SecretKeys {
    client: kube::Client,
    cache: Arc<Mutex<HashMap<KeyId, (Instant, String)>>>,
}

impl SecretKeys {
    /// Reads through `client` (the controller's: it may get Secrets).
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: Arc::default(),
        }
    }
}

impl KeySource for SecretKeys {
    fn key(&self, namespace: &str, secret: &str, key: &str) -> BoxFuture<'static, Option<String>> {
        let id = (namespace.to_owned(), secret.to_owned(), key.to_owned());
        let cache = Arc::clone(&self.cache);
        let secrets = kube::Api::<Secret>::namespaced(self.client.clone(), namespace);
        Box::pin(async move {
            if let Some((read, value)) = cache.lock().expect("not poisoned").get(&id)
                && read.elapsed() < KEY_TTL
            {
                return Some(value.clone());
            }
            let found = match secrets.get(&id.1).await {
                Ok(found) => found,
                Err(e) => {
                    debug!(namespace = %id.0, secret = %id.1, "reading a model key: {e}");
                    return None;
                }
            };
            let value = found.data?.remove(&id.2)?;
            let value = String::from_utf8(value.0).ok()?.trim().to_owned();
            cache
                .lock()
                .expect("not poisoned")
                .insert(id, (Instant::now(), value.clone()));
            Some(value)
        })
    }
}

/// What the model route needs: the tokens it checks, where keys are read, and the client
/// that carries calls (the outbound policy's, over TLS).
pub struct ModelRoute {
    pub(super) tokens: RunTokens,
    keys: Arc<dyn KeySource>,
    http: reqwest::Client,
    policy: Arc<OutboundPolicy>,
}

impl ModelRoute {
    /// A route checking `tokens`, reading keys from `keys`, connecting only where `policy`
    /// allows (names found by `resolver`) and trusting the native roots and `roots`.
    pub fn new(
        tokens: RunTokens,
        keys: Arc<dyn KeySource>,
        policy: Arc<OutboundPolicy>,
        resolver: Arc<dyn Resolver>,
        roots: Vec<reqwest::Certificate>,
    ) -> Self {
        let mut builder = tenant_builder(Arc::clone(&policy), resolver, CONNECT_TIMEOUT)
            .https_only(true)
            .read_timeout(READ_TIMEOUT)
            .tcp_nodelay(true);
        for root in roots {
            builder = builder.add_root_certificate(root);
        }
        let http = builder.build().expect("a TLS client builds");
        Self {
            tokens,
            keys,
            http,
            policy,
        }
    }

    /// Sends `call` from `namespace` on with the model's real key, and returns the answer as
    /// it comes.
    pub(super) async fn carry(
        &self,
        namespace: &str,
        call: &ModelCall,
        request: Request<RequestBody>,
    ) -> Result<Response<ProxyBody>, Refusal> {
        let url = url::Url::parse(&call.upstream).map_err(|_| Refusal::Unreachable)?;
        check_literal(&self.policy, &url).map_err(|refused| {
            debug!("{refused}");
            Refusal::DeniedAddress
        })?;
        let model = &call.model;
        let key = self
            .keys
            .key(namespace, &model.secret, &model.key)
            .await
            .ok_or(Refusal::KeyUnavailable)?;
        let (parts, body) = request.into_parts();
        let body = read_body(body, MAX_MODEL_REQUEST_BYTES)
            .await
            .map_err(|_| Refusal::TooLarge)?;
        let answer = self
            .http
            .request(parts.method, url)
            .headers(passed_on(parts.headers))
            .bearer_auth(key)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                debug!(upstream = %call.upstream, "calling a model: {e}");
                match Failure::of(&e) {
                    Failure::RefusedByPolicy => Refusal::DeniedAddress,
                    Failure::Timeout | Failure::Unreachable => Refusal::Unreachable,
                }
            })?;
        let mut response = Response::builder().status(answer.status());
        if let Some(headers) = response.headers_mut() {
            *headers = passed_on(answer.headers().clone());
        }
        let stream = answer
            .bytes_stream()
            .map_ok(Frame::data)
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
        Ok(response
            .body(BodyExt::boxed(StreamBody::new(stream)))
            .expect("a status and headers from a response make one"))
    }
}

/// `headers` without [`DROPPED_HEADERS`] and those the `Connection` header names.
fn passed_on(mut headers: HeaderMap) -> HeaderMap {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in DROPPED_HEADERS {
        headers.remove(name);
    }
    headers
}
