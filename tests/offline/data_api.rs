//! The data API's request handling against a real file store (and a real S3 server for links), with the cluster's objects and authorizer in memory: listings, downloads with ranges and entity tags, links to presigned URLs, every refusal of the issue's list (401, 403, 404 naming the valid results, 413, 422 naming the entry, an interrupted upload), concurrent pushes, and the front proxy's client certificate checked in a real TLS handshake.

use crate::support;
use errand::cluster::listener::ServerLimits;
use errand::cluster::scope::Namespaces;

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewStatus};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use serde_json::Value;

use crate::support::archives::{sha256_hex, tar_gz, zeros_archive};
use errand::api::{
    AgentExecution, AgentExecutionStatus, Fileset, FilesetStatus, Phase, ResultEntry,
};
use errand::archive::ExtractLimits;
use errand::cluster::ApiError;
use errand::dataapi::UploadLimits;
use errand::dataapi::authn::FrontProxyConfig;
use errand::dataapi::frontproxy::FrontProxy;
use errand::dataapi::handler::{DataApi, ResponseBody};
use errand::dataapi::objects::{Authorizer, Objects};
use errand::store::Store;
use errand::store::keys::{self, ExecutionId, ResultName};

const FRONT_PROXY: &str = "front-proxy-client";
const NS: &str = "team-a";
const BASE: &str = "/apis/data.errand.dev/v1alpha1/namespaces/team-a";

/// The cluster's objects, in memory.
#[derive(Default)]
struct Cluster {
    executions: Mutex<HashMap<String, AgentExecution>>,
    filesets: Mutex<HashMap<String, Fileset>>,
    /// Every status write, in order.
    writes: Mutex<Vec<FilesetStatus>>,
}

struct SharedCluster(Arc<Cluster>);

impl Objects for SharedCluster {
    fn execution<'a>(
        &'a self,
        _namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<AgentExecution>, ApiError>> {
        let found = self.0.executions.lock().unwrap().get(name).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn fileset<'a>(
        &'a self,
        _namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Fileset>, ApiError>> {
        let found = self.0.filesets.lock().unwrap().get(name).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn set_content<'a>(
        &'a self,
        _namespace: &'a str,
        name: &'a str,
        content: &'a FilesetStatus,
    ) -> BoxFuture<'a, Result<Option<Fileset>, ApiError>> {
        self.0.writes.lock().unwrap().push(content.clone());
        let updated = self
            .0
            .filesets
            .lock()
            .unwrap()
            .get_mut(name)
            .map(|fileset| {
                fileset.status = Some(content.clone());
                fileset.clone()
            });
        Box::pin(async move { Ok(updated) })
    }
}

/// RBAC in memory: `user` may `verb` the `resource/subresource` listed, nothing else.
struct Rbac(Vec<(&'static str, &'static str, &'static str)>);

impl Authorizer for Rbac {
    fn review(
        &self,
        review: SubjectAccessReview,
    ) -> BoxFuture<'_, Result<SubjectAccessReviewStatus, ApiError>> {
        let spec = review.spec;
        let attributes = spec.resource_attributes.unwrap();
        let resource = match attributes.subresource {
            Some(sub) => format!("{}/{sub}", attributes.resource.unwrap()),
            None => attributes.resource.unwrap(),
        };
        let user = spec.user.unwrap();
        let allowed = attributes.group.as_deref() == Some("data.errand.dev")
            && self.0.iter().any(|(u, verb, r)| {
                *u == user && Some(*verb) == attributes.verb.as_deref() && *r == resource
            });
        Box::pin(async move {
            Ok(SubjectAccessReviewStatus {
                allowed,
                reason: (!allowed).then(|| "no RBAC rule allows it".to_owned()),
                ..SubjectAccessReviewStatus::default()
            })
        })
    }
}

/// A CA and, when `client` is given, a client certificate with that common name it signed,
/// as (CA PEM, client certificate PEM, client key PEM).
fn ca_and_client(client: &str) -> (String, String, String) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, client);
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    (ca_cert.pem(), leaf_cert.pem(), leaf_key.serialize_pem())
}

struct Fixture {
    api: Arc<DataApi>,
    cluster: Arc<Cluster>,
    store: Store,
    _dir: tempfile::TempDir,
    /// The front-proxy client certificate and key (PEM) the CA in use signed.
    client_pem: (String, String),
}

/// `alice` may read everything of the data API, `carol` may also push, `bob` nothing.
fn rbac() -> Rbac {
    let mut rules = Vec::new();
    for user in ["alice", "carol"] {
        for resource in [
            "agentexecutions",
            "agentexecutions/results",
            "filesets",
            "filesets/content",
        ] {
            rules.push((user, "get", resource));
        }
    }
    rules.push(("carol", "update", "filesets/content"));
    Rbac(rules)
}

fn fixture(limits: UploadLimits) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&format!("file://{}", dir.path().display())).unwrap();
    fixture_on(store, dir, limits)
}

/// A server over `store` (kept in `dir` when it is a file store).
fn fixture_on(store: Store, dir: tempfile::TempDir, limits: UploadLimits) -> Fixture {
    let (ca_pem, cert_pem, key_pem) = ca_and_client(FRONT_PROXY);
    let front_proxy = Arc::new(FrontProxy::default());
    front_proxy
        .load(FrontProxyConfig {
            client_ca_pem: ca_pem,
            allowed_names: vec![FRONT_PROXY.to_owned()],
            username_headers: vec!["X-Remote-User".to_owned()],
            uid_headers: vec![],
            group_headers: vec!["X-Remote-Group".to_owned()],
            extra_header_prefixes: vec!["X-Remote-Extra-".to_owned()],
        })
        .unwrap();
    let cluster = Arc::new(Cluster::default());
    let api = Arc::new(DataApi::new(
        Box::new(SharedCluster(Arc::clone(&cluster))),
        Box::new(rbac()),
        store.clone(),
        front_proxy,
        limits,
        Namespaces::All,
    ));
    Fixture {
        api,
        cluster,
        store,
        _dir: dir,
        client_pem: (cert_pem, key_pem),
    }
}

impl Fixture {
    /// The same server, giving links to downloads that ask when its store presigns.
    fn linking(mut self) -> Self {
        let api = Arc::into_inner(self.api).expect("the only reference");
        self.api = Arc::new(api.linking_to(&self.store));
        self
    }

    /// A finished execution `calc` whose results are in the store and its status.
    async fn finished_execution(&self, results: &[(ResultName, &[u8])]) -> Vec<ResultEntry> {
        let id = ExecutionId {
            namespace: NS.into(),
            name: "calc".into(),
            uid: "uid-1".into(),
        };
        let mut entries = Vec::new();
        for (name, bytes) in results {
            let key = keys::result(&id, *name).unwrap();
            let body =
                futures::stream::once(futures::future::ready(Ok(Bytes::copy_from_slice(bytes))));
            let stored = self.store.put_new(&key, Box::pin(body)).await.unwrap();
            entries.push(ResultEntry {
                name: name.as_str().to_owned(),
                size: stored.size,
                sha256: stored.sha256,
            });
        }
        self.add_execution(Some(Phase::Succeeded), entries.clone());
        entries
    }

    fn add_execution(&self, phase: Option<Phase>, results: Vec<ResultEntry>) {
        let mut execution = AgentExecution::new("calc", Default::default());
        execution.metadata.namespace = Some(NS.into());
        execution.metadata.uid = Some("uid-1".into());
        execution.status = Some(AgentExecutionStatus {
            phase,
            results,
            ..Default::default()
        });
        self.cluster
            .executions
            .lock()
            .unwrap()
            .insert("calc".into(), execution);
    }

    fn add_fileset(&self, name: &str) {
        let mut fileset = Fileset::new(name, Default::default());
        fileset.metadata.namespace = Some(NS.into());
        self.cluster
            .filesets
            .lock()
            .unwrap()
            .insert(name.into(), fileset);
    }

    fn fileset_status(&self, name: &str) -> FilesetStatus {
        self.cluster.filesets.lock().unwrap()[name]
            .status
            .clone()
            .unwrap_or_default()
    }

    /// Keys under the namespace's Fileset prefix: content and leftover uploads alike.
    async fn stored_filesets(&self) -> Vec<String> {
        let prefix = keys::filesets_prefix(NS).unwrap();
        let mut keys: Vec<String> = self
            .store
            .list(&prefix)
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.key)
            .collect();
        keys.sort();
        keys
    }

    /// Sends `request` as `user` through the front proxy.
    async fn send<B>(&self, user: &str, request: Request<B>) -> Answer
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let (mut parts, body) = request.into_parts();
        parts.headers.insert("X-Remote-User", user.parse().unwrap());
        parts
            .headers
            .append("X-Remote-Group", "system:authenticated".parse().unwrap());
        let request = Request::from_parts(parts, body);
        Answer::of(self.api.handle(request, Some(FRONT_PROXY)).await).await
    }

    async fn get(&self, user: &str, path: &str) -> Answer {
        self.get_with(user, path, &[]).await
    }

    async fn get_with(&self, user: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
        let mut request = Request::get(format!("{BASE}/{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(user, request.body(Full::new(Bytes::new())).unwrap())
            .await
    }

    async fn put(&self, user: &str, fileset: &str, body: Vec<u8>) -> Answer {
        let request = Request::put(format!("{BASE}/filesets/{fileset}/content"))
            .header("Content-Type", "application/gzip")
            .header("Content-Length", body.len())
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        self.send(user, request).await
    }
}

/// A response, read whole.
struct Answer {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: Bytes,
}

impl Answer {
    async fn of(response: Response<ResponseBody>) -> Self {
        let (parts, body) = response.into_parts();
        Answer {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.unwrap().to_bytes(),
        }
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    fn header(&self, name: &str) -> &str {
        self.headers[name].to_str().unwrap()
    }

    /// The `Status` message of a refusal.
    fn message(&self) -> String {
        self.json()["message"].as_str().unwrap().to_owned()
    }
}

#[tokio::test]
async fn a_finished_executions_results_are_listed_and_downloaded_whole_or_in_ranges() {
    let f = fixture(UploadLimits::default());
    let workdir: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    let entries = f
        .finished_execution(&[
            (ResultName::OutputWorkdir, &workdir),
            (ResultName::RunResult, br#"{"response":"96"}"#),
        ])
        .await;

    let listing = f.get("alice", "agentexecutions/calc/results").await;
    assert_eq!(listing.status, 200);
    let listing = listing.json();
    assert_eq!(listing["kind"], "AgentExecutionResults");
    assert_eq!(listing["complete"], true);
    assert_eq!(listing["results"][0]["name"], "output_workdir");
    assert_eq!(listing["results"][0]["size"], 5000);
    assert_eq!(listing["results"][0]["sha256"], entries[0].sha256);
    assert_eq!(listing["results"][1]["contentType"], "application/json");

    let whole = f
        .get("alice", "agentexecutions/calc/results/output_workdir")
        .await;
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body.as_ref(), workdir.as_slice());
    assert_eq!(whole.header("content-length"), "5000");
    assert_eq!(whole.header("content-type"), "application/gzip");
    let etag = format!("\"{}\"", sha256_hex(&workdir));
    assert_eq!(whole.header("etag"), etag);
    assert_eq!(whole.header("accept-ranges"), "bytes");

    let part = f
        .get_with(
            "alice",
            "agentexecutions/calc/results/output_workdir",
            &[("Range", "bytes=4000-")],
        )
        .await;
    assert_eq!(part.status, 206);
    assert_eq!(part.header("content-range"), "bytes 4000-4999/5000");
    assert_eq!(part.body.as_ref(), &workdir[4000..]);
    let resumed = f
        .get_with(
            "alice",
            "agentexecutions/calc/results/output_workdir",
            &[("Range", "bytes=10-19"), ("If-Range", &etag)],
        )
        .await;
    assert_eq!(resumed.body.as_ref(), &workdir[10..20]);
    let unchanged = f
        .get_with(
            "alice",
            "agentexecutions/calc/results/output_workdir",
            &[("If-None-Match", &etag)],
        )
        .await;
    assert_eq!(unchanged.status, 304);
    assert!(unchanged.body.is_empty());
    let beyond = f
        .get_with(
            "alice",
            "agentexecutions/calc/results/output_workdir",
            &[("Range", "bytes=5000-")],
        )
        .await;
    assert_eq!(beyond.status, 416);
    assert_eq!(beyond.header("content-range"), "bytes */5000");

    let missing = f
        .get("alice", "agentexecutions/calc/results/run_error")
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.message(),
        "execution \"calc\" has no result \"run_error\"; its results are output_workdir, run_result"
    );
    let nobody = f.get("alice", "agentexecutions/other/results").await;
    assert_eq!(nobody.status, 404);
    assert!(
        nobody
            .message()
            .contains("AgentExecution \"other\" not found")
    );
}

#[tokio::test]
async fn a_download_that_asks_gets_a_link_to_the_s3_stores_presigned_url_after_every_check() {
    let Some(server) = support::s3::server().await else {
        return;
    };
    let options = server.options();
    let options: Vec<(&str, &str)> = options.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = format!("s3://{}/tenant-1", support::s3::BUCKET);
    let store = Store::open_with_options(&url, &options).unwrap();
    let f = fixture_on(
        store.clone(),
        tempfile::tempdir().unwrap(),
        UploadLimits::default(),
    )
    .linking();
    let workdir: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    f.finished_execution(&[(ResultName::OutputWorkdir, &workdir)])
        .await;
    let path = "agentexecutions/calc/results/output_workdir";
    let etag = format!("\"{}\"", sha256_hex(&workdir));

    let before = jiff::Timestamp::now();
    let answer = f.get("alice", &format!("{path}?link=true")).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.header("content-type"),
        "application/vnd.errand.link+json"
    );
    assert_eq!(answer.header("etag"), etag, "the digest still comes along");
    assert_eq!(answer.header("cache-control"), "no-store");
    assert!(!answer.headers.contains_key("location"), "not a redirect");
    let link = answer.json();
    assert_eq!(link["size"], 5000);
    let expires_at: jiff::Timestamp = link["expiresAt"].as_str().unwrap().parse().unwrap();
    let lifetime = expires_at.duration_since(before).as_secs();
    assert!((299..=301).contains(&lifetime), "{lifetime} s");
    let location = link["url"].as_str().unwrap();
    assert!(
        location.starts_with(&format!(
            "{}/{}/tenant-1/results/team-a/calc/uid-1/output_workdir?",
            server.endpoint,
            support::s3::BUCKET
        )),
        "{location}"
    );
    // The URL is the object's, signed by the store: a plain client with no credentials reads
    // it, ranges too; it allows no other method.
    let client = reqwest::Client::new();
    let fetched = client.get(location).send().await.unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(fetched.bytes().await.unwrap().as_ref(), workdir.as_slice());
    let part = client
        .get(location)
        .header("Range", "bytes=4000-")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(part.bytes().await.unwrap().as_ref(), &workdir[4000..]);
    let overwrite = client.put(location).body("x").send().await.unwrap();
    assert_eq!(overwrite.status(), 403, "a GET URL does not allow PUT");

    // Without the parameter, and for HEAD, the bytes stream as always.
    for query in ["", "?link=false"] {
        let streamed = f.get("alice", &format!("{path}{query}")).await;
        assert_eq!(streamed.status, 200, "{query}");
        assert_eq!(streamed.body.as_ref(), workdir.as_slice());
    }
    let request = Request::head(format!("{BASE}/{path}?link=true"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let head = f.send("alice", request).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), "5000");
    // A request the validators answer gets that answer, not a URL.
    let unchanged = f
        .get_with(
            "alice",
            &format!("{path}?link=true"),
            &[("If-None-Match", &etag)],
        )
        .await;
    assert_eq!(unchanged.status, 304);

    // A Fileset's content gets a link the same way.
    f.add_fileset("src");
    let archive = tar_gz(&[("main.py", b"print(1)\n")]);
    assert_eq!(f.put("carol", "src", archive.clone()).await.status, 200);
    let content = f.get("alice", "filesets/src/content?link=true").await;
    assert_eq!(
        content.header("content-type"),
        "application/vnd.errand.link+json"
    );
    assert_eq!(content.json()["size"], archive.len());
    let url = content.json()["url"].as_str().unwrap().to_owned();
    let fetched = client.get(url).send().await.unwrap();
    assert_eq!(fetched.bytes().await.unwrap().as_ref(), archive.as_slice());

    // Every refusal comes first, without a URL: 401, 403, 404, and a bad parameter is a 400.
    let request = Request::get(format!("{BASE}/{path}?link=true"))
        .header("X-Remote-User", "alice")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let anonymous = Answer::of(f.api.handle(request, None).await).await;
    assert_eq!(anonymous.status, 401);
    let denied = f.get("bob", &format!("{path}?link=true")).await;
    assert_eq!(denied.status, 403);
    let missing = f
        .get("alice", "agentexecutions/calc/results/run_error?link=true")
        .await;
    assert_eq!(missing.status, 404);
    let bad = f.get("alice", &format!("{path}?link=yes")).await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.message(),
        "query parameter \"link\" must be true or false, not \"yes\""
    );
    for refused in [&anonymous, &denied, &missing, &bad] {
        assert_eq!(refused.header("content-type"), "application/json");
        assert!(!String::from_utf8_lossy(&refused.body).contains("X-Amz-Signature"));
    }
}

#[tokio::test]
async fn a_file_store_streams_even_when_a_link_is_asked_for() {
    let f = fixture(UploadLimits::default()).linking();
    f.finished_execution(&[(ResultName::RunResult, br#"{"response":"96"}"#)])
        .await;
    let answer = f
        .get("alice", "agentexecutions/calc/results/run_result?link=true")
        .await;
    assert_eq!(
        answer.status, 200,
        "its signed URLs point inside the cluster"
    );
    assert_eq!(answer.body.as_ref(), br#"{"response":"96"}"#);
    assert_eq!(
        answer.header("content-type"),
        "application/json",
        "the result's own type, which a client tells from a link's"
    );
}

#[tokio::test]
async fn a_running_execution_lists_what_is_saved_so_far() {
    let f = fixture(UploadLimits::default());
    f.finished_execution(&[(ResultName::InputWorkdir, b"staged")])
        .await;
    f.add_execution(Some(Phase::Running), Vec::new());
    let listing = f.get("alice", "agentexecutions/calc/results").await.json();
    assert_eq!(listing["complete"], false);
    assert_eq!(listing["results"][0]["name"], "input_workdir");
    assert!(listing["results"][0].get("sha256").is_none());
    let early = f
        .get("alice", "agentexecutions/calc/results/output_workdir")
        .await;
    assert_eq!(early.status, 404);
    assert_eq!(
        early.message(),
        "execution \"calc\" is Running: result \"output_workdir\" is not saved yet; saved so far: input_workdir"
    );
    let staged = f
        .get("alice", "agentexecutions/calc/results/input_workdir")
        .await;
    assert_eq!(staged.body.as_ref(), b"staged");
    assert!(
        staged.headers.get("etag").is_none(),
        "no digest until the run ends"
    );
}

#[tokio::test]
async fn without_the_front_proxy_or_rbac_nothing_is_served() {
    let f = fixture(UploadLimits::default());
    f.finished_execution(&[(ResultName::RunResult, b"{}")])
        .await;
    let request = Request::get(format!("{BASE}/agentexecutions/calc/results"))
        .header("X-Remote-User", "alice")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let anonymous = Answer::of(f.api.handle(request, None).await).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.json()["reason"], "Unauthorized");

    let denied = f
        .get("bob", "agentexecutions/calc/results/run_result")
        .await;
    assert_eq!(denied.status, 403);
    assert_eq!(
        denied.message(),
        "agentexecutions.data.errand.dev \"calc\" is forbidden: User \"bob\" cannot get resource \
         \"agentexecutions/results\" in API group \"data.errand.dev\" in the namespace \"team-a\": \
         no RBAC rule allows it"
    );
    f.add_fileset("src");
    let push = f.put("alice", "src", tar_gz(&[("a", b"a")])).await;
    assert_eq!(push.status, 403);
    assert!(
        push.message()
            .contains("cannot update resource \"filesets/content\"")
    );
    assert!(f.stored_filesets().await.is_empty());

    // Discovery needs only the front proxy's word.
    let request = Request::get("/apis/data.errand.dev/v1alpha1")
        .header("X-Remote-User", "bob")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let discovery = Answer::of(f.api.handle(request, Some(FRONT_PROXY)).await).await;
    assert_eq!(discovery.json()["kind"], "APIResourceList");
}

#[tokio::test]
async fn a_push_is_stored_by_its_digest_recorded_and_downloaded() {
    let f = fixture(UploadLimits::default());
    f.add_fileset("src");
    let empty = f.get("alice", "filesets/src/content").await;
    assert_eq!(empty.status, 404);
    assert!(empty.message().contains("has no content yet"));

    let archive = tar_gz(&[("main.py", b"print(1)\n"), ("lib/util.py", b"x = 1\n")]);
    let pushed = f.put("carol", "src", archive.clone()).await;
    assert_eq!(
        pushed.status,
        200,
        "{}",
        String::from_utf8_lossy(&pushed.body)
    );
    let digest = format!("sha256:{}", sha256_hex(&archive));
    assert_eq!(pushed.json()["digest"], digest);
    assert_eq!(pushed.json()["kind"], "FilesetContent");
    let status = f.fileset_status("src");
    assert_eq!(status.digest.as_deref(), Some(digest.as_str()));
    assert_eq!(status.size, Some(archive.len() as u64));
    assert_eq!(status.file_count, Some(2));
    let hex = sha256_hex(&archive);
    assert_eq!(
        f.stored_filesets().await,
        [
            keys::fileset_paths(NS, &hex).unwrap(),
            keys::fileset(NS, &hex).unwrap()
        ],
        "one blob at its content address and its path index, no upload left over"
    );
    let index = f.store.fileset_paths(NS, &hex).await.unwrap().unwrap();
    for path in ["main.py", "lib/", "lib/util.py"] {
        assert!(index.contains(path), "{path} in the path index");
    }
    assert!(!index.contains("missing/"));
    let downloaded = f.get("alice", "filesets/src/content").await;
    assert_eq!(downloaded.body.as_ref(), archive.as_slice());
    assert_eq!(
        downloaded.header("etag"),
        format!("\"{}\"", sha256_hex(&archive))
    );
    let described = f.get("alice", "filesets/src").await.json();
    assert_eq!(described["fileCount"], 2);

    // The same content again is stored once.
    assert_eq!(f.put("carol", "src", archive.clone()).await.status, 200);
    assert_eq!(f.stored_filesets().await.len(), 2);
}

#[tokio::test]
async fn a_hostile_oversized_or_interrupted_upload_stores_nothing_and_keeps_the_content() {
    let f = fixture(UploadLimits {
        max_bytes: 64 * 1024,
        archive: ExtractLimits {
            max_bytes: 512 * 1024,
            max_entries: 100,
        },
    });
    f.add_fileset("src");
    let good = tar_gz(&[("ok.txt", b"fine")]);
    assert_eq!(f.put("carol", "src", good.clone()).await.status, 200);
    let kept = format!("sha256:{}", sha256_hex(&good));
    let stored = f.stored_filesets().await;

    let hostile = f
        .put(
            "carol",
            "src",
            tar_gz(&[("a.txt", b"a"), ("../../etc/cron.d/x", b"evil")]),
        )
        .await;
    assert_eq!(hostile.status, 422);
    let refusal = hostile.json();
    assert_eq!(
        refusal["details"]["causes"][0]["field"],
        "../../etc/cron.d/x"
    );
    let message = hostile.message();
    assert!(
        message.contains("archive entry \"../../etc/cron.d/x\" is refused"),
        "{message}"
    );
    assert!(
        message.contains(&format!("the Fileset's content is still {kept}")),
        "{message}"
    );

    // 1 MiB of zeros in about a kilobyte: past what staging would extract.
    let bomb = f
        .put("carol", "src", zeros_archive(b"", "zeros.bin", 1 << 20))
        .await;
    assert_eq!(bomb.status, 422);
    assert_eq!(bomb.json()["details"]["causes"][0]["field"], "zeros.bin");
    assert!(
        bomb.message()
            .contains("would pass the limit of 524288 bytes of extracted content"),
        "{}",
        bomb.message()
    );

    let garbage = f.put("carol", "src", b"not a tarball".to_vec()).await;
    assert_eq!(garbage.status, 422);
    assert!(garbage.message().contains("not a readable tar.gz"));

    // Incompressible content past the limit, declared and undeclared.
    let big: Vec<u8> = (0..100_000u32)
        .flat_map(|i| (i.wrapping_mul(2_654_435_761)).to_le_bytes())
        .collect();
    let oversized = tar_gz(&[("big.bin", &big)]);
    assert!(oversized.len() > 64 * 1024);
    let declared = f.put("carol", "src", oversized.clone()).await;
    assert_eq!(declared.status, 413);
    assert!(
        declared.message().contains("65536 bytes"),
        "{}",
        declared.message()
    );
    let chunks: Vec<Result<Frame<Bytes>, io::Error>> = oversized
        .chunks(8192)
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    let streamed = Request::put(format!("{BASE}/filesets/src/content"))
        .body(StreamBody::new(futures::stream::iter(chunks)))
        .unwrap();
    assert_eq!(f.send("carol", streamed).await.status, 413);

    // The connection breaks halfway through a valid archive.
    let half = good.len() / 2;
    let frames: Vec<Result<Frame<Bytes>, io::Error>> = vec![
        Ok(Frame::data(Bytes::copy_from_slice(&good[..half]))),
        Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "connection reset",
        )),
    ];
    let broken = Request::put(format!("{BASE}/filesets/src/content"))
        .body(StreamBody::new(futures::stream::iter(frames)))
        .unwrap();
    let interrupted = f.send("carol", broken).await;
    assert_eq!(interrupted.status, 400);
    assert!(
        interrupted.message().contains("interrupted"),
        "{}",
        interrupted.message()
    );

    assert_eq!(
        f.fileset_status("src").digest.as_deref(),
        Some(kept.as_str())
    );
    assert_eq!(
        f.stored_filesets().await,
        stored,
        "nothing of the refused uploads stays"
    );
    assert_eq!(
        f.cluster.writes.lock().unwrap().len(),
        1,
        "one status write: the good push"
    );
}

#[tokio::test]
async fn of_two_concurrent_pushes_each_is_whole_and_the_last_recorded_one_stays() {
    let f = fixture(UploadLimits::default());
    f.add_fileset("src");
    let first = tar_gz(&[("a.txt", &[b'a'; 300_000])]);
    let second = tar_gz(&[("b.txt", b"b"), ("c.txt", b"c")]);
    let (one, two) = tokio::join!(
        f.put("carol", "src", first.clone()),
        f.put("carol", "src", second.clone())
    );
    assert_eq!((one.status.as_u16(), two.status.as_u16()), (200, 200));
    let writes = f.cluster.writes.lock().unwrap().clone();
    assert_eq!(writes.len(), 2);
    let status = f.fileset_status("src");
    assert_eq!(
        &status,
        writes.last().unwrap(),
        "the last write is the status"
    );
    let (archive, files) =
        if status.digest.as_deref() == Some(&format!("sha256:{}", sha256_hex(&first))) {
            (&first, 1)
        } else {
            (&second, 2)
        };
    assert_eq!(
        status.digest,
        Some(format!("sha256:{}", sha256_hex(archive)))
    );
    assert_eq!(
        (status.size, status.file_count),
        (Some(archive.len() as u64), Some(files))
    );
    assert_eq!(
        f.stored_filesets().await.len(),
        4,
        "both blobs, whole, by digest, each with its path index"
    );
    assert_eq!(
        f.get("alice", "filesets/src/content").await.body.as_ref(),
        archive.as_slice()
    );
}

mod tls {
    //! The front proxy's certificate in a real handshake on a loopback port.

    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};

    use errand::cluster::serving::{certs, tls};
    use errand::dataapi::server;

    use super::*;

    /// Serves the fixture's API over TLS; returns the address and the serving CA.
    async fn serve(f: &Fixture) -> (std::net::SocketAddr, String) {
        let names = certs::service_dns_names("errand", "errand-system");
        let material = certs::generate(&names, jiff::Timestamp::now()).unwrap();
        let certificate = Arc::new(tls::ServingCertificate::default());
        certificate
            .load_pem(&material.cert_pem, &material.key_pem)
            .unwrap();
        let acceptor = server::acceptor(certificate, Arc::clone(&f.api.front_proxy)).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(server::serve(
            listener,
            acceptor,
            ServerLimits::DEFAULT,
            Arc::clone(&f.api),
        ));
        (address, material.ca_pem)
    }

    /// One GET over TLS, with a client certificate when given; the response's status code, or
    /// the handshake's error.
    async fn get(
        address: std::net::SocketAddr,
        server_ca: &str,
        client: Option<&(String, String)>,
        path: &str,
    ) -> Result<String, String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(server_ca.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let builder =
            ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots);
        let config = match client {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cert.as_bytes())
                        .map(Result::unwrap)
                        .collect(),
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
        let name = ServerName::try_from("errand.errand-system.svc").unwrap();
        let mut stream = TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: errand\r\nX-Remote-User: alice\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        // A refused certificate surfaces as an alert on the first read in TLS 1.3.
        stream
            .read_to_end(&mut response)
            .await
            .map_err(|e| e.to_string())?;
        let response = String::from_utf8_lossy(&response).into_owned();
        Ok(response.split(' ').nth(1).unwrap_or_default().to_owned())
    }

    #[tokio::test]
    async fn only_a_client_certificate_the_front_proxy_ca_signed_is_believed() {
        let f = fixture(UploadLimits::default());
        f.finished_execution(&[(ResultName::RunResult, b"{}")])
            .await;
        let (address, server_ca) = serve(&f).await;
        let path = format!("{BASE}/agentexecutions/calc/results");
        assert_eq!(
            get(address, &server_ca, Some(&f.client_pem), &path).await,
            Ok("200".to_owned())
        );
        assert_eq!(
            get(address, &server_ca, None, &path).await,
            Ok("401".to_owned()),
            "no certificate: the headers are not believed"
        );
        let (_, stranger_cert, stranger_key) = ca_and_client(FRONT_PROXY);
        let stranger = get(
            address,
            &server_ca,
            Some(&(stranger_cert, stranger_key)),
            &path,
        )
        .await;
        assert!(
            stranger.is_err(),
            "a certificate of another CA fails the handshake: {stranger:?}"
        );
    }
}
