//! The controller under fire on the real test cluster (issue 12, parts 1, 2 and 7): two
//! `errand controller` replicas with leader election, behind a stand-in for their Service, run
//! a stream of executions in real pods while the leader is SIGKILLed again and again.
//!
//! Each kill cuts off whatever the leader was doing, the pods' result uploads to it included.
//! The test asserts that the other replica takes over within the lease duration of the dead
//! leader's last renewal, that no execution gets a second Job, ends anything but `Succeeded` or
//! loses a result, and that no reconcile stalls; it prints the figures. The defaults keep it to
//! a couple of minutes; `ERRAND_CHAOS_EXECUTIONS` and `ERRAND_CHAOS_KILLS` scale it up, e.g.
//! `ERRAND_CHAOS_EXECUTIONS=200 ERRAND_CHAOS_KILLS=10 bash hack/test.sh --test cluster chaos::`.

use errand::api::contract::COMPLETED_RUN_RESULTS;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use crate::support::cluster::{self, POD_GATEWAY, TestNamespace};
use crate::support::errand::{create, install_crds, wait_for};
use crate::support::harness::{controller_command, execution_id, record_uids, wait_until_ready};
use crate::support::store::collect;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};

use errand::api::{AgentExecution, Phase};
use errand::store::Store;
use errand::store::keys::{self, ResultName};

/// The Lease the replicas elect their leader with (`errand controller`'s).
const LEASE: &str = "errand-controller";
/// How much later than the lease duration a takeover may come: the new leader's own read and
/// write of the Lease.
const TAKEOVER_SLACK: SignedDuration = SignedDuration::from_millis(500);
/// How long a leader reconciles before the next kill.
const LEADING_BEFORE_KILL: Duration = Duration::from_secs(4);
/// The lease duration of `errand controller` (`LeaseSettings::new`).
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// What a controller logs when a reconcile hangs until its timeout.
const STALLED_RECONCILE: &str = "the reconcile did not finish within";
/// Bytes of random data each agent leaves, so that its uploads take a moment.
const OUTPUT_BYTES: u64 = 4_000_000;
/// How long the executions may take to end after the last kill.
const DRAIN_WAIT: Duration = Duration::from_secs(300);

fn from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
        })
        .unwrap_or(default)
}

/// One `errand controller` process with leader election on.
struct Replica {
    identity: String,
    address: SocketAddr,
    process: Option<Child>,
}

impl Replica {
    fn start(&mut self, namespace: &str, store_url: &str, blob_url: &str, log: &Path) {
        let child = controller_command(namespace, store_url, blob_url, self.address, log)
            .args(["--leader-elect", "true"])
            .args(["--lease-namespace", namespace])
            .args(["--identity", &self.identity])
            .args(["--staging-budget-seconds", "300"])
            .spawn()
            .expect("the errand binary starts");
        self.process = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn wait_ready(&self) {
        wait_until_ready(self.address, &self.identity, DRAIN_WAIT).await;
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What the replicas' Service does for the pods: each connection goes to the replicas in
/// turn, to the next one when a replica does not answer, and breaks when its replica dies.
async fn serve_like_a_service(listener: TcpListener, replicas: Vec<SocketAddr>) {
    for turn in 0.. {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        let order: Vec<SocketAddr> = (0..replicas.len())
            .map(|i| replicas[(turn + i) % replicas.len()])
            .collect();
        tokio::spawn(async move {
            for replica in order {
                if let Ok(mut outbound) = TcpStream::connect(replica).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    return;
                }
            }
        });
    }
}

/// The Lease's holder, last renewal and acquisition.
async fn lease_state(api: &Api<Lease>) -> Option<(String, Timestamp, Timestamp)> {
    let spec = api.get_opt(LEASE).await.ok()??.spec?;
    Some((
        spec.holder_identity?,
        spec.renew_time?.0,
        spec.acquire_time?.0,
    ))
}

/// Whether every result the execution's status lists is in the store, whole: its size and
/// sha256 as listed. Returns what is wrong, if anything.
async fn missing_results(
    store: &Store,
    namespace: &str,
    execution: &AgentExecution,
) -> Vec<String> {
    let id = execution_id(namespace, execution);
    let listed = execution
        .status
        .as_ref()
        .map(|s| s.results.clone())
        .unwrap_or_default();
    let mut wrong = Vec::new();
    let names: Vec<&str> = listed.iter().map(|r| r.name.as_str()).collect();
    let expected = COMPLETED_RUN_RESULTS;
    if names != expected {
        wrong.push(format!("{}: results {names:?}", id.name));
    }
    for entry in &listed {
        let key = keys::result(&id, ResultName::parse(&entry.name).unwrap()).unwrap();
        let bytes = match store.get(&key).await {
            Ok(body) => collect(body.into_stream()).await,
            Err(e) => {
                wrong.push(format!("{}: {} is missing: {e}", id.name, entry.name));
                continue;
            }
        };
        if bytes.len() as u64 != entry.size || hex::encode(Sha256::digest(&bytes)) != entry.sha256 {
            wrong.push(format!(
                "{}: {} differs from its listing",
                id.name, entry.name
            ));
        }
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_again_and_again_loses_no_run_and_no_result() {
    let executions = from_env("ERRAND_CHAOS_EXECUTIONS", 16);
    let kills = from_env("ERRAND_CHAOS_KILLS", 3);
    let Some(client) = cluster::client().await else {
        return;
    };
    install_crds(&client).await;
    let namespace = TestNamespace::create(&client, "chaos").await;
    let ns = namespace.name().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let store_url = format!("file://{}", dir.path().join("store").display());
    let store = Store::open(&store_url).unwrap();
    let log_of = |identity: &str| dir.path().join(format!("{identity}.log"));

    let mut replicas: Vec<Replica> = ["replica-a", "replica-b"]
        .into_iter()
        .map(|identity| Replica {
            identity: identity.to_owned(),
            address: cluster::free_pod_gateway_address(),
            process: None,
        })
        .collect();
    let service = TcpListener::bind((POD_GATEWAY, 0)).await.unwrap();
    let blob_url = format!("http://{}", service.local_addr().unwrap());
    let proxy = tokio::spawn(serve_like_a_service(
        service,
        replicas.iter().map(|r| r.address).collect(),
    ));
    for replica in &mut replicas {
        replica.start(&ns, &store_url, &blob_url, &log_of(&replica.identity));
    }
    for replica in &replicas {
        replica.wait_ready().await;
    }

    let (jobs_seen, job_watch) = record_uids(namespace.api::<Job>());
    create(&client, &ns, json!({
        "apiVersion": "errand.dev/v1alpha1", "kind": "Agent",
        "metadata": {"name": "steady"},
        "spec": {
            "runtime": {
                "image": cluster::BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", format!("head -c {OUTPUT_BYTES} /dev/urandom > out.bin; sleep 3; echo 96")],
            },
            "config": {"config_format": "agents-spec-v1", "name": "steady"},
        },
    }))
    .await;
    let names: Vec<String> = (0..executions).map(|i| format!("run-{i}")).collect();
    // The executions arrive throughout the kills and takeovers.
    let kill_period = (LEADING_BEFORE_KILL + LEASE_DURATION) * u32::try_from(kills).unwrap();
    let spacing = kill_period / u32::try_from(executions.max(1)).unwrap();
    let creating = {
        let (client, ns, names) = (client.clone(), ns.clone(), names.clone());
        tokio::spawn(async move {
            for name in names {
                create(&client, &ns, json!({
                    "apiVersion": "errand.dev/v1alpha1", "kind": "AgentExecution",
                    "metadata": {"name": name},
                    "spec": {"agentRef": {"name": "steady"}, "input": "What is 12 multiplied by 8?"},
                }))
                .await;
                tokio::time::sleep(spacing).await;
            }
        })
    };

    let leases = namespace.api::<Lease>();
    let mut takeovers = Vec::new();
    let mut last_kill = tokio::time::Instant::now();
    for _ in 0..kills {
        let (leader, _, _) = wait_for("a leader", DRAIN_WAIT, || lease_state(&leases)).await;
        tokio::time::sleep(LEADING_BEFORE_KILL).await;
        let replica = replicas.iter_mut().find(|r| r.identity == leader).unwrap();
        replica.kill();
        let killed_at = Timestamp::now();
        last_kill = tokio::time::Instant::now();
        // The dead leader renews no more: this is its last renewal.
        let (holder, last_renewal, _) = lease_state(&leases).await.unwrap();
        assert_eq!(holder, leader, "the leadership moved before the kill");
        let (successor, _, acquired) = wait_for("another leader", DRAIN_WAIT, || async {
            lease_state(&leases)
                .await
                .filter(|(holder, _, _)| *holder != leader)
        })
        .await;
        let after_renewal = acquired.duration_since(last_renewal);
        let after_kill = acquired.duration_since(killed_at);
        println!(
            "killed {leader}; {successor} took over {:.2}s after the kill, {:.2}s after the last renewal",
            after_kill.as_secs_f64(),
            after_renewal.as_secs_f64(),
        );
        takeovers.push((after_kill, after_renewal));
        assert!(
            after_renewal <= SignedDuration::try_from(LEASE_DURATION).unwrap() + TAKEOVER_SLACK,
            "{successor} took over {after_renewal:?} after {leader}'s last renewal: not within the lease duration"
        );
        replica.start(&ns, &store_url, &blob_url, &log_of(&leader));
        replica.wait_ready().await;
    }
    creating.await.unwrap();

    let api = namespace.api::<AgentExecution>();
    let ended = wait_for("every execution to end", DRAIN_WAIT, || async {
        let all = api.list(&Default::default()).await.ok()?.items;
        let terminal = all.iter().all(|e| {
            e.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(Phase::is_terminal)
        });
        (all.len() == executions && terminal).then_some(all)
    })
    .await;
    let drained = last_kill.elapsed();
    job_watch.abort();

    let jobs = jobs_seen.lock().unwrap().clone();
    let duplicated: Vec<_> = jobs.iter().filter(|(_, uids)| uids.len() > 1).collect();
    let not_succeeded: Vec<_> = ended
        .iter()
        .filter(|e| e.status.as_ref().and_then(|s| s.phase) != Some(Phase::Succeeded))
        .map(|e| {
            (
                e.name_any(),
                e.status.as_ref().and_then(|s| s.message.clone()),
            )
        })
        .collect();
    let mut lost = Vec::new();
    for execution in &ended {
        lost.extend(missing_results(&store, &ns, execution).await);
    }
    let logs: String = replicas
        .iter()
        .map(|r| std::fs::read_to_string(log_of(&r.identity)).unwrap_or_default())
        .collect();
    let stalled = logs.matches(STALLED_RECONCILE).count();
    println!(
        "chaos: {executions} executions, {kills} leader kills, {} takeovers (slowest {:.2}s after a kill); \
         duplicates {}, not succeeded {}, lost results {}, stalled reconciles {stalled}; \
         all terminal {:.1}s after the last kill",
        takeovers.len(),
        takeovers
            .iter()
            .map(|(k, _)| k.as_secs_f64())
            .fold(0.0, f64::max),
        duplicated.len(),
        not_succeeded.len(),
        lost.len(),
        drained.as_secs_f64(),
    );
    assert!(
        duplicated.is_empty(),
        "executions with more than one Job: {duplicated:?}"
    );
    assert!(
        not_succeeded.is_empty(),
        "executions that did not succeed: {not_succeeded:?}"
    );
    assert!(lost.is_empty(), "lost results: {lost:?}");
    assert_eq!(stalled, 0, "reconciles stalled until their timeout");
    assert_eq!(jobs.len(), executions, "one Job for each execution");

    proxy.abort();
    drop(replicas);
    namespace.delete().await;
}
