//! Benchmark: the `data.errand.dev` API against the store itself, on the real test cluster, in
//! one run with ratios:
//! - downloading a 1 GiB result from an S3 store (s3s-fs, the S3 server of the store tests)
//!   two ways, against a GET of the same object straight from the store with errand's store
//!   client, as an operator holding the store's credentials does: `errand results download`
//!   against the cluster (it asks the data API for a link and GETs the object's presigned URL
//!   it names, writing and checking the file), the ratio the limit applies to;
//!   and streamed through the API server's aggregation layer (client → TLS → kube-apiserver →
//!   TLS → errand → store), as `kubectl get --raw` downloads, printed alongside;
//! - pushing a 1 GiB directory as new content through the API (`errand filesets push` against
//!   the cluster: packed by the command line, streamed in one PUT, vetted and stored by
//!   errand) with errand's server on a `file://` store, the chart's default, against
//!   `errand filesets push --local` of the same directory, the ratio the limit applies to;
//!   and with the server on the S3 store, against `errand filesets push --store s3://…` into
//!   that same store (an operator's push with the store's credentials) and against `--local`,
//!   printed alongside. Every timed push stores its blob anew (the one there is removed
//!   first), as a changed tree does; the server's debug log of each upload's timings is
//!   printed at the end;
//! - the peak RSS of errand's server (the `errand controller` process serving the API) during
//!   each, above its RSS when idle (VmHWM after `clear_refs`, from `/proc/PID/status`).
//!
//! `cargo bench --bench data_api` with the test cluster up (`bash hack/testenv/up.sh`,
//! `source /var/tmp/errand-testenv/env`), under the cluster lock. The controller runs as a
//! process on this host, serving the data API on the pod bridge's address; a Service without a
//! selector and an EndpointSlice for that address stand in for the chart's Service, and the
//! APIService `v1alpha1.data.errand.dev` points at it (it is removed at the end). It runs on
//! the S3 store first and is restarted on a `file://` store for the last pushes.
//! `ERRAND_BENCH_GIB` scales the data (default 1), `ERRAND_BENCH_RUNS` the timed runs per side
//! (default 3, medians and the median of paired ratios), `ERRAND_BENCH_DIR` the scratch
//! directory (default /var/tmp, removed at the end). Exits non-zero when a limit is missed.

#[path = "../tests/support/mod.rs"]
mod support;

mod shared;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{DeleteParams, PostParams};
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::json;

use errand::api::{Agent, AgentExecution, Fileset};
use errand::archive::{PackOptions, pack_dir};
use errand::store::Store;
use errand::store::keys::{self, ResultName};
use shared::{MIB, Rng, Timed, env_or, fmt_mib, fmt_s, generate, summarize, write_blob};
use support::cluster::{self, TestNamespace};
use support::errand::{DATA_API_SERVICE as API_SERVICE, wait_for, wait_for_data_api};
use support::harness::{controller_command, execution_id, wait_until_ready};

/// The Service the APIService points at, standing in for the chart's.
const SERVICE: &str = "errand-data-bench";
/// The Fileset pushed through the API and locally.
const FILESET: &str = "tree";
/// The execution whose result is downloaded.
const EXECUTION: &str = "big-result";

/// Limits the issue sets: time ratios, and the server's peak RSS above idle.
const RATIO_LIMIT: f64 = 1.5;
const RSS_LIMIT: u64 = 64 * MIB;

fn main() {
    shared::run_async("data_api", bench);
}

async fn bench() -> bool {
    let gib: f64 = env_or("ERRAND_BENCH_GIB", 1.0);
    let runs: usize = env_or("ERRAND_BENCH_RUNS", 3);
    let total = (gib * 1024.0 * MIB as f64) as u64;
    let base = std::path::PathBuf::from(env_or("ERRAND_BENCH_DIR", "/var/tmp".to_owned()));
    // Removed on every way out, a panic included: the data is 2-4 GiB.
    let scratch = tempfile::Builder::new()
        .prefix("errand-data-bench-")
        .tempdir_in(&base)
        .expect("a scratch directory");

    let kubeconfig = cluster::kubeconfig_path();
    let client = cluster::client_for(&kubeconfig, true)
        .await
        .expect("the test cluster is reachable");
    support::errand::install_crds(&client).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let namespace = TestNamespace::create(&client, "bench-data").await;
    let ns = namespace.name().to_owned();

    // The store: a real S3 server on this host, which the controller and the CLI both reach.
    let s3 = support::s3::server()
        .await
        .expect("s3s-fs is installed (hack/bench/on-cluster.sh installs it)");
    let options = s3.options();
    let store_url = format!("s3://{}/errand", support::s3::BUCKET);
    let store = {
        let options: Vec<(&str, &str)> = options.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Store::open_with_options(&store_url, &options).expect("an S3 store")
    };
    // The controller, serving the data API on the bridge address the API server reaches.
    let listen = cluster::free_pod_gateway_address();
    let data_api = cluster::free_pod_gateway_address();
    // The APIService first: the controller puts its CA into it as it starts.
    register(&client, &ns, data_api.port()).await;
    let log = scratch.path().join("controller.log");
    let mut controller = start_controller(&ns, &store_url, listen, data_api, &log, &options);
    let pid = controller.id();
    wait_until_ready(listen, "the controller", Duration::from_secs(60)).await;
    wait_for_data_api(&client).await;
    let http = Http::new(&kubeconfig).await;

    // (a) A 1 GiB result: put into the store as a run would have left it.
    let execution = create_execution(&client, &ns).await;
    let key = keys::result(&execution_id(&ns, &execution), ResultName::OutputWorkdir).unwrap();
    let mut rng = Rng(0x5eed_0fda_7a00_0001);
    let blob = scratch.path().join("result");
    write_blob(&blob, total, |buf| rng.fill(buf));
    let file = std::fs::File::open(&blob).expect("the result");
    let body = futures::stream::iter(std::iter::from_fn({
        let mut file = file;
        move || {
            let mut buf = vec![0; 8 * MIB as usize];
            match std::io::Read::read(&mut file, &mut buf) {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some(Ok(bytes::Bytes::from(buf)))
                }
                Err(e) => Some(Err(e)),
            }
        }
    }));
    store
        .put_new(&key, Box::pin(body))
        .await
        .expect("the result in the store");
    std::fs::remove_file(&blob).expect("removing the scratch result");
    let downloaded = scratch.path().join("downloaded");
    let results = format!(
        "/apis/data.errand.dev/v1alpha1/namespaces/{ns}/agentexecutions/{EXECUTION}/results"
    );
    // Warm-up: the page cache, the connections, the caches of both sides (the listing answers
    // once the controller's cache holds the execution).
    assert_eq!(read_from_store(&store, &key).await, total);
    wait_for("the results listing", Duration::from_secs(60), || {
        http.download(&results)
    })
    .await;
    let pki = kubeconfig
        .parent()
        .expect("the test environment")
        .join("pki");
    let direct = Http::front_proxy(&pki, data_api);
    assert_eq!(direct.download(&format!("{results}/run_error")).await, None);
    assert_eq!(
        cli_download(&kubeconfig, &ns, &downloaded),
        total,
        "the CLI's warm-up download"
    );
    let idle = rss(pid).current;
    let mut downloads = Vec::new();
    let mut streamed = Vec::new();
    let mut download_peak = 0;
    let mut direct_downloads = Vec::new();
    for run in 0..runs {
        direct_downloads.push(
            timed(async {
                let bytes = direct.download(&format!("{results}/output_workdir")).await;
                assert_eq!(bytes, Some(total), "the whole result from errand itself");
            })
            .await
            .0,
        );
        shared::sync();
        reset_peak(pid);
        let store_get = || async {
            let (wall, bytes) = timed(read_from_store(&store, &key)).await;
            assert_eq!(bytes, total);
            wall
        };
        downloads.push(
            paired_async(run, store_get, || async {
                let (wall, bytes) =
                    timed(async { cli_download(&kubeconfig, &ns, &downloaded) }).await;
                assert_eq!(bytes, total, "the whole result through the CLI");
                std::fs::remove_file(&downloaded).expect("removing the download");
                wall
            })
            .await,
        );
        streamed.push(
            paired_async(run, store_get, || async {
                let (wall, bytes) =
                    timed(http.download(&format!("{results}/output_workdir"))).await;
                assert_eq!(bytes, Some(total), "the whole result through the API");
                wall
            })
            .await,
        );
        download_peak = download_peak.max(rss(pid).peak);
    }
    store.delete(&key).await.expect("removing the result");

    // (b) A 1 GiB directory: the runner benchmark's mixed tree, stored as new content by every
    // timed push: the blob each side stores is removed before it pushes, as for a changed tree
    // (an unchanged one finds its blob in place and stores nothing, which on a cloud store also
    // skips the copy to the content address).
    let tree = scratch.path().join("tree");
    let (files, bytes) = generate(&tree, total);
    eprintln!(
        "tree: {files} files, {}; idle server RSS {}",
        fmt_mib(bytes),
        fmt_mib(idle)
    );
    create_fileset(&client, &ns).await;
    let content =
        format!("/apis/data.errand.dev/v1alpha1/namespaces/{ns}/filesets/{FILESET}/content");
    let home = scratch.path().join("home");
    // `errand filesets push --local` stores into its data directory's store, namespace default.
    let local =
        Store::open(&format!("file://{}", home.join("store").display())).expect("the local store");
    let local = (&local, "default");
    let pushes = Pushes {
        kubeconfig: &kubeconfig,
        ns: &ns,
        tree: &tree,
        home: &home,
    };

    // (b1) The server on the S3 store: against the same store pushed straight into by an
    // operator's command line, and against `--local`.
    let s3_side = (&store, ns.as_str());
    let digest = pushes.warm_up(&client).await;
    let mut s3_direct = Vec::new();
    let mut s3_same_store = Vec::new();
    let mut s3_against_local = Vec::new();
    let mut s3_peak = 0;
    for run in 0..runs {
        remove_blob(s3_side, &digest).await;
        s3_direct.push(timed(direct.push(&content, &tree)).await.0);
        shared::sync();
        reset_peak(pid);
        s3_same_store.push(
            paired_async(
                run,
                || async {
                    remove_blob(s3_side, &digest).await;
                    pushes.to_store(&store_url, &options)
                },
                || async {
                    remove_blob(s3_side, &digest).await;
                    pushes.through_the_api()
                },
            )
            .await,
        );
        s3_against_local.push(pushes.against_local(run, local, s3_side, &digest).await);
        s3_peak = s3_peak.max(rss(pid).peak);
    }
    let _ = controller.kill();
    let _ = controller.wait();

    // (b2) The server on a `file://` store, the chart's default (a PersistentVolumeClaim): the
    // same controller restarted on it, against `--local`, the pair the limit applies to.
    let file_store_dir = scratch.path().join("server-store");
    let file_store_url = format!("file://{}", file_store_dir.display());
    let file_store = Store::open(&file_store_url).expect("the server's file:// store");
    let file_side = (&file_store, ns.as_str());
    let mut controller = start_controller(&ns, &file_store_url, listen, data_api, &log, &[]);
    let file_pid = controller.id();
    wait_until_ready(
        listen,
        "the controller on a file:// store",
        Duration::from_secs(60),
    )
    .await;
    // The aggregator answers 503 until its availability check has seen the new process.
    wait_for(
        "the data API of the controller on a file:// store",
        Duration::from_secs(180),
        || http.download(&results),
    )
    .await;
    let file_idle = rss(file_pid).current;
    pushes.warm_up(&client).await;
    let mut file_direct = Vec::new();
    let mut file_against_local = Vec::new();
    let mut file_peak = 0;
    for run in 0..runs {
        remove_blob(file_side, &digest).await;
        file_direct.push(timed(direct.push(&content, &tree)).await.0);
        shared::sync();
        reset_peak(file_pid);
        file_against_local.push(pushes.against_local(run, local, file_side, &digest).await);
        file_peak = file_peak.max(rss(file_pid).peak);
    }
    let pushed = Api::<Fileset>::namespaced(client.clone(), &ns)
        .get(FILESET)
        .await
        .expect("the Fileset");
    let status = pushed.status.expect("the push recorded the content");
    eprintln!(
        "pushed through the API: {} ({}, {} files)",
        status.digest.unwrap_or_default(),
        fmt_mib(status.size.unwrap_or_default()),
        status.file_count.unwrap_or_default()
    );

    let _ = controller.kill();
    let _ = controller.wait();
    unregister(&client).await;
    namespace.delete().await;

    let gib_label = format!("{gib} GiB");
    let s3_label = "S3 (s3s-fs on this host)";
    let file_label = "`file://` (the chart's default)";
    let mut ok = true;
    println!(
        "\n| benchmark | the server's store | through the API (median) | baseline (median) | ratio (median of paired runs) | limit | ok |\n|---|---|---|---|---|---|---|"
    );
    for (what, store, baseline, runs, limited) in [
        (
            format!(
                "download a {gib_label} result: `errand results download` (asks for a link, GETs the store's presigned URL; file written and checked)"
            ),
            s3_label,
            "S3 GET from the same store",
            &downloads,
            true,
        ),
        (
            format!(
                "download a {gib_label} result streamed through the API server (as `kubectl get --raw`)"
            ),
            s3_label,
            "S3 GET from the same store",
            &streamed,
            false,
        ),
        (
            format!("push a {gib_label} directory as new content"),
            file_label,
            "`errand filesets push --local` (its own `file://` store, same disk)",
            &file_against_local,
            true,
        ),
        (
            format!("push a {gib_label} directory as new content"),
            s3_label,
            "`errand filesets push --store s3://…` to the same store (operator's credentials; same-store ratio)",
            &s3_same_store,
            false,
        ),
        (
            format!("push a {gib_label} directory as new content"),
            s3_label,
            "`errand filesets push --local` (its own `file://` store)",
            &s3_against_local,
            false,
        ),
    ] {
        let (theirs, ours, ratio) = summarize(runs);
        let pass = ratio <= RATIO_LIMIT;
        let (limit, verdict) = if limited {
            ok &= pass;
            (format!("≤ {RATIO_LIMIT}"), yes(pass))
        } else {
            ("-".to_owned(), "-")
        };
        println!(
            "| {what} | {store} | {} | {} ({baseline}) | {ratio:.2} | {limit} | {verdict} |",
            fmt_s(ours),
            fmt_s(theirs),
        );
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    for (what, store, baseline, direct, runs) in [
        (
            "streamed download",
            s3_label,
            "S3 GET from the same store",
            direct_downloads,
            &streamed,
        ),
        (
            "push",
            file_label,
            "`errand filesets push --local`",
            file_direct,
            &file_against_local,
        ),
        (
            "push",
            s3_label,
            "`errand filesets push --store s3://…`",
            s3_direct,
            &s3_same_store,
        ),
    ] {
        let (theirs, ours, _) = summarize(runs);
        let direct = median(direct);
        println!(
            "| {what} from errand itself, without the aggregator (front-proxy certificate; where the time goes) | {store} | {} ({:.2} of the way through the API) | {} ({baseline}) | {:.2} | - | - |",
            fmt_s(direct),
            direct.as_secs_f64() / ours.as_secs_f64(),
            fmt_s(theirs),
            direct.as_secs_f64() / theirs.as_secs_f64(),
        );
    }
    for (what, store, peak, idle) in [
        ("downloads", s3_label, download_peak, idle),
        ("pushes", s3_label, s3_peak, idle),
        ("pushes", file_label, file_peak, file_idle),
    ] {
        let above = peak.saturating_sub(idle);
        let pass = above <= RSS_LIMIT;
        ok &= pass;
        println!(
            "| server peak RSS during the {what} | {store} | {} above idle ({} peak, {} idle) | - | - | ≤ {} | {} |",
            fmt_mib(above),
            fmt_mib(peak),
            fmt_mib(idle),
            fmt_mib(RSS_LIMIT),
            yes(pass)
        );
    }
    let walls = |runs: &[(Timed, Timed)]| {
        runs.iter()
            .map(|(theirs, ours)| {
                format!(
                    "{:.2}/{:.2}",
                    theirs.wall.as_secs_f64(),
                    ours.wall.as_secs_f64()
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "\nper run, baseline/API in s: CLI downloads {}; streamed downloads {}; pushes on file:// vs --local {}; pushes on S3 vs --store s3:// {}; pushes on S3 vs --local {}",
        walls(&downloads),
        walls(&streamed),
        walls(&file_against_local),
        walls(&s3_same_store),
        walls(&s3_against_local),
    );
    println!(
        "\nwhere errand's server spent each push's time (its debug log, in order: S3, then file://):"
    );
    for line in server_timings(&log) {
        println!("- {line}");
    }
    drop(scratch);
    ok
}

/// The controller on `store_url` (with the store's `options` as environment variables),
/// serving its health at `listen` and the data API at `data_api`, logging into `log`: warnings,
/// and the timings of each Fileset upload.
fn start_controller(
    ns: &str,
    store_url: &str,
    listen: SocketAddr,
    data_api: SocketAddr,
    log: &Path,
    options: &[(&str, String)],
) -> Child {
    controller_command(ns, store_url, &format!("http://{listen}"), listen, log)
        .args(["--leader-elect", "false", "--lease-namespace", ns])
        .args(["--data-api-listen", &data_api.to_string()])
        .args(["--serving-service", SERVICE])
        .envs(options.iter().map(|(k, v)| (k.to_uppercase(), v)))
        .env(
            "RUST_LOG",
            "warn,errand::dataapi::upload=debug,errand::store=debug",
        )
        .spawn()
        .expect("errand controller starts")
}

/// The timings of each Fileset upload the controller logged into `log` (see
/// `dataapi::upload` and `store`), one line per log line, in order.
fn server_timings(log: &Path) -> Vec<String> {
    const TIMINGS: [&str; 3] = [
        "multipart upload complete",
        "placed a fileset upload at its content address",
        "timings of a Fileset upload",
    ];
    let text = std::fs::read_to_string(log).expect("the controller's log");
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|entry| {
            let fields = entry.get("fields")?.as_object()?;
            let message = fields.get("message")?.as_str()?;
            TIMINGS.contains(&message).then(|| {
                let values = fields
                    .iter()
                    .filter(|(name, _)| {
                        !["message", "key", "namespace", "fileset"].contains(&name.as_str())
                    })
                    .map(|(name, value)| {
                        format!(
                            "{name} {}",
                            value
                                .as_str()
                                .map_or_else(|| value.to_string(), str::to_owned)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("{message}: {values}")
            })
        })
        .collect()
}

/// Removes the blob `digest` and its path index from `store`'s `namespace` (a `(store,
/// namespace)` pair), so that the next push there stores it anew.
async fn remove_blob((store, namespace): (&Store, &str), digest: &str) {
    store
        .remove_pushed_fileset(namespace, digest)
        .await
        .expect("removing a pushed blob");
}

/// The pushes of the tree, each run to its end and timed.
struct Pushes<'a> {
    kubeconfig: &'a Path,
    ns: &'a str,
    tree: &'a Path,
    /// The data directory of `--local`.
    home: &'a Path,
}

impl Pushes<'_> {
    /// An untimed push through the API (connections, caches, the page cache); the digest of
    /// the content it recorded, without its `sha256:`.
    async fn warm_up(&self, client: &Client) -> String {
        self.through_the_api();
        let fileset = Api::<Fileset>::namespaced(client.clone(), self.ns)
            .get(FILESET)
            .await
            .expect("the Fileset");
        let digest = fileset
            .status
            .and_then(|status| status.digest)
            .expect("the push recorded a digest");
        digest
            .strip_prefix("sha256:")
            .expect("a sha256 digest")
            .to_owned()
    }

    /// `errand filesets push --local` into its own data directory.
    /// One paired run of a push through the API (into `server`'s store) against
    /// `errand filesets push --local` (into `local`), each storing `digest` anew.
    async fn against_local(
        &self,
        run: usize,
        local: (&Store, &str),
        server: (&Store, &str),
        digest: &str,
    ) -> (Timed, Timed) {
        paired_async(
            run,
            || async {
                remove_blob(local, digest).await;
                self.locally()
            },
            || async {
                remove_blob(server, digest).await;
                self.through_the_api()
            },
        )
        .await
    }

    fn locally(&self) -> Duration {
        let mut command = Command::new(env!("CARGO_BIN_EXE_errand"));
        command
            .args(["filesets", "push", FILESET])
            .arg(self.tree)
            .args(["--local", "-o", "json"])
            .env("ERRAND_HOME", self.home);
        timed_push(command, "errand filesets push --local")
    }

    /// `errand filesets push` to the cluster: packed by the command line and streamed through
    /// the API server to errand's data API, as a tenant pushes (no store URL).
    fn through_the_api(&self) -> Duration {
        let mut command = self.to_cluster();
        command
            .env_remove("ERRAND_BACKEND")
            .env_remove("ERRAND_STORE");
        timed_push(command, "errand filesets push (through the data API)")
    }

    /// `errand filesets push --store URL` to the cluster: an operator's push straight into the
    /// cluster's store with its credentials (`options`, as environment variables), recorded in
    /// the Fileset's status.
    fn to_store(&self, url: &str, options: &[(&str, String)]) -> Duration {
        let mut command = self.to_cluster();
        command
            .args(["--store", url])
            .env_remove("ERRAND_BACKEND")
            .envs(options.iter().map(|(k, v)| (k.to_uppercase(), v)));
        timed_push(command, "errand filesets push --store")
    }

    fn to_cluster(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_errand"));
        command
            .arg("--kubeconfig")
            .arg(self.kubeconfig)
            .args(["--namespace", self.ns, "filesets", "push", FILESET])
            .arg(self.tree)
            .args(["-o", "json"]);
        command
    }
}

fn yes(pass: bool) -> &'static str {
    if pass { "yes" } else { "NO" }
}

/// Runs `work`, returning its wall time and result.
async fn timed<T>(work: impl Future<Output = T>) -> (Duration, T) {
    let started = Instant::now();
    let out = work.await;
    (started.elapsed(), out)
}

/// One paired run of `baseline` and `ours`: the baseline first on even runs, second on odd ones.
async fn paired_async<B, O, FB, FO>(run: usize, baseline: B, ours: O) -> (Timed, Timed)
where
    B: FnOnce() -> FB,
    O: FnOnce() -> FO,
    FB: Future<Output = Duration>,
    FO: Future<Output = Duration>,
{
    let timed = |wall| Timed {
        wall,
        cpu: Duration::ZERO,
    };
    shared::sync();
    if run.is_multiple_of(2) {
        let theirs = baseline().await;
        shared::sync();
        (timed(theirs), timed(ours().await))
    } else {
        let ours = ours().await;
        shared::sync();
        (timed(baseline().await), timed(ours))
    }
}

/// Reads the whole object at `key` as the data API reads it from the store; its size.
async fn read_from_store(store: &Store, key: &str) -> u64 {
    let mut stream = store.get_range(key, None).await.expect("the result");
    let mut bytes = 0;
    while let Some(chunk) = stream.next().await {
        bytes += chunk.expect("reading the store").len() as u64;
    }
    bytes
}

/// `errand results download` of the execution's `output_workdir` into `file` from the cluster
/// of `kubeconfig`, namespace `ns`, as a tenant downloads (no store URL); the file's size.
fn cli_download(kubeconfig: &Path, ns: &str, file: &Path) -> u64 {
    let output = Command::new(env!("CARGO_BIN_EXE_errand"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--namespace", ns, "results", "download", "output_workdir"])
        .args(["--execution", EXECUTION, "-o", "json", "--out"])
        .arg(file)
        .env_remove("ERRAND_BACKEND")
        .env_remove("ERRAND_STORE")
        .output()
        .expect("errand runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "errand results download: {}{stderr}",
        String::from_utf8_lossy(&output.stdout),
    );
    // Said on stderr when the link's URL could not be reached and the bytes streamed through
    // the API server instead: then this row would measure the streamed row again.
    assert!(
        stderr.trim().is_empty(),
        "errand results download did not use the link: {stderr}"
    );
    std::fs::metadata(file).expect("the downloaded file").len()
}

/// Runs a push `command` to its end; its wall time.
fn timed_push(mut command: Command, what: &str) -> Duration {
    let started = Instant::now();
    let output = command.output().expect("errand runs");
    let wall = started.elapsed();
    assert!(
        output.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    wall
}

/// The API server as a tenant's HTTP client meets it, with the kubeconfig's credentials.
struct Http {
    client: reqwest::Client,
    base: String,
}

impl Http {
    async fn new(kubeconfig: &Path) -> Http {
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(kubeconfig).expect("the kubeconfig"),
            &KubeConfigOptions::default(),
        )
        .await
        .expect("the kubeconfig's cluster");
        let tls = config.rustls_client_config().expect("its TLS settings");
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .build()
            .expect("an HTTP client");
        Http {
            client,
            base: config
                .cluster_url
                .to_string()
                .trim_end_matches('/')
                .to_owned(),
        }
    }

    /// errand's data API itself at `address`, as the aggregator calls it: with the front
    /// proxy's client certificate and the user in headers. Where the time goes, not what a
    /// tenant can do.
    fn front_proxy(pki: &Path, address: std::net::SocketAddr) -> Http {
        let mut pem = std::fs::read(pki.join("front-proxy-client.crt"))
            .expect("the front proxy's certificate");
        pem.extend(std::fs::read(pki.join("front-proxy-client.key")).expect("its key"));
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-remote-user", "errand-testenv-admin".parse().unwrap());
        headers.insert("x-remote-group", "system:masters".parse().unwrap());
        let client = reqwest::Client::builder()
            .identity(reqwest::Identity::from_pem(&pem).expect("a client identity"))
            // errand's self-signed serving certificate; only the timing matters here.
            .danger_accept_invalid_certs(true)
            .default_headers(headers)
            .build()
            .expect("an HTTP client");
        Http {
            client,
            base: format!("https://{address}"),
        }
    }

    /// GETs `path` to its end; the bytes received, `None` for an answer other than 200.
    async fn download(&self, path: &str) -> Option<u64> {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("the API server answers");
        if response.status() != 200 {
            return None;
        }
        let mut stream = response.bytes_stream();
        let mut bytes = 0;
        while let Some(chunk) = stream.next().await {
            bytes += chunk.expect("the download").len() as u64;
        }
        Some(bytes)
    }

    /// Packs `tree` as `errand filesets push` does and PUTs the stream to `path`; the status.
    async fn push(&self, path: &str, tree: &Path) -> u16 {
        let packing = pack_dir(
            tree,
            PackOptions {
                stageable: true,
                ..PackOptions::default()
            },
        )
        .expect("packing the tree");
        let response = self
            .client
            .put(format!("{}{path}", self.base))
            .header("content-type", "application/gzip")
            .body(reqwest::Body::wrap_stream(packing.stream))
            .send()
            .await
            .expect("the API server answers");
        let status = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        packing.done.wait().await.expect("packing the tree");
        assert_eq!(status, 200, "{body}");
        status
    }
}

/// The resident set of a process now and at its peak since [`reset_peak`], in bytes.
struct Rss {
    current: u64,
    peak: u64,
}

fn rss(pid: u32) -> Rss {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server runs");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    Rss {
        current: field("VmRSS:"),
        peak: field("VmHWM:"),
    }
}

/// Resets the process's peak RSS to its current RSS.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("resetting VmHWM");
}

/// The chart's Service and APIService for a data API on this host's bridge address at `port`.
/// The Service and its EndpointSlice go with the namespace; [`unregister`] removes the rest.
async fn register(client: &Client, ns: &str, port: u16) {
    let services = Api::<APIService>::all(client.clone());
    let _ = services.delete(API_SERVICE, &DeleteParams::default()).await;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": SERVICE},
        "spec": {"ports": [{"port": 443, "targetPort": port, "protocol": "TCP"}]},
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .expect("the Service");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {
            "name": format!("{SERVICE}-host"),
            "labels": {"kubernetes.io/service-name": SERVICE},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [cluster::POD_GATEWAY], "conditions": {"ready": true}}],
        "ports": [{"port": port, "protocol": "TCP"}],
    }))
    .unwrap();
    Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &slice)
        .await
        .expect("the EndpointSlice");
    let api_service: APIService = serde_json::from_value(json!({
        "metadata": {"name": API_SERVICE},
        "spec": {
            "group": "data.errand.dev",
            "version": "v1alpha1",
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
            "service": {"name": SERVICE, "namespace": ns, "port": 443},
        },
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &api_service)
        .await
        .expect("the APIService");
}

async fn unregister(client: &Client) {
    let _ = Api::<APIService>::all(client.clone())
        .delete(API_SERVICE, &DeleteParams::default())
        .await;
}

/// An execution whose Job stays suspended (a Kueue queue nobody admits), so the run never
/// starts and the result written into the store is what the API serves.
async fn create_execution(client: &Client, ns: &str) -> AgentExecution {
    let agent = json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": "bench"},
        "spec": {
            "runtime": {"image": support::cluster::BUSYBOX_IMAGE, "command": ["true"]},
            "config": {"config_format": "agents-spec-v1", "name": "bench"},
        },
    });
    Api::<Agent>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(agent).unwrap(),
        )
        .await
        .expect("the Agent");
    let execution: AgentExecution = serde_json::from_value(json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution",
        "metadata": {"name": EXECUTION},
        "spec": {
            "agentRef": {"name": "bench"}, "input": "x",
            "queueName": "nobody-admits", "startTimeoutSeconds": 3600,
        },
    }))
    .unwrap();
    Api::<AgentExecution>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &execution)
        .await
        .expect("the AgentExecution")
}

async fn create_fileset(client: &Client, ns: &str) {
    let fileset: Fileset = serde_json::from_value(json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "Fileset",
        "metadata": {"name": FILESET},
        "spec": {},
    }))
    .unwrap();
    Api::<Fileset>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &fileset)
        .await
        .expect("the Fileset");
}
