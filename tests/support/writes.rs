//! The API writes a client makes, tallied by verb and resource: what the cluster tests and benchmarks count.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use kube::Client;

/// The resource a TokenReview goes to: the API server answers it without storing anything, so
/// it is tallied but not counted as a write.
const TOKEN_REVIEWS: &str = "tokenreviews";

/// A tally of writes, shared by the clients that record into it.
#[derive(Clone, Default)]
pub struct Writes(Arc<Mutex<BTreeMap<String, usize>>>);

impl Writes {
    /// A client of `kubeconfig` that tallies here each of its requests other than a GET
    /// (reads, lists and watches).
    pub async fn client(&self, kubeconfig: &Path) -> Client {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(kubeconfig).expect("the kubeconfig reads"),
            &Default::default(),
        )
        .await
        .expect("a client config");
        let tally = Arc::clone(&self.0);
        let record =
            tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
                if let Some(write) = write_of(request.method(), request.uri().path()) {
                    *tally.lock().unwrap().entry(write).or_default() += 1;
                }
                request
            });
        kube::client::ClientBuilder::try_from(config)
            .expect("a client")
            .with_layer(&record)
            .build()
    }

    /// The writes so far.
    pub fn tally(&self) -> Tally {
        Tally(self.0.lock().unwrap().clone())
    }

    /// The writes so far, starting a new tally.
    pub fn take(&self) -> Tally {
        Tally(std::mem::take(&mut *self.0.lock().unwrap()))
    }
}

/// Writes by `<verb> <resource>` (`create configmaps`, `patch agentexecutions/status`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally(pub BTreeMap<String, usize>);

impl Tally {
    /// The writes the API server stores: all but TokenReviews.
    pub fn total(&self) -> usize {
        self.0
            .iter()
            .filter(|(write, _)| !write.ends_with(TOKEN_REVIEWS))
            .map(|(_, n)| n)
            .sum()
    }

    /// The tally as `write × per execution` over `executions`, for a benchmark's table.
    pub fn per(&self, executions: usize) -> String {
        self.0
            .iter()
            .map(|(write, n)| format!("{write} {:.2}", *n as f64 / executions as f64))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The writes in this tally that `earlier`, an earlier reading of the same tally, did not
    /// have yet.
    pub fn minus(&self, earlier: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(write, n)| {
                    let before = earlier.0.get(write).copied().unwrap_or(0);
                    (write.clone(), n.saturating_sub(before))
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
        )
    }

    /// A tally of these writes, for comparison.
    pub fn of(writes: &[(&str, usize)]) -> Self {
        Self(writes.iter().map(|(w, n)| ((*w).to_owned(), *n)).collect())
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.per(1))
    }
}

/// The write a request of `method` to `path` is, as `<verb> <resource>[/<subresource>]`, or
/// `None` for a read.
fn write_of(method: &http::Method, path: &str) -> Option<String> {
    let verb = match *method {
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => return None,
    };
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // `/api/v1/...` or `/apis/<group>/<version>/...`, then `namespaces/<ns>/` when namespaced.
    let mut rest = match segments.first() {
        Some(&"api") => &segments[2.min(segments.len())..],
        _ => &segments[3.min(segments.len())..],
    };
    if rest.len() > 2 && rest[0] == "namespaces" {
        rest = &rest[2..];
    }
    let resource = match rest {
        [resource, _, subresource, ..] => format!("{resource}/{subresource}"),
        [resource, ..] => (*resource).to_owned(),
        [] => path.to_owned(),
    };
    Some(format!("{verb} {resource}"))
}
