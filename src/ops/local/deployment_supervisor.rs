//! The supervisor of one local AgentDeployment (`errand __serve-deployment NAME`): runs its agent servers as child processes on assigned loopback ports, probes their `/health` as a kubelet would, rolls them to a new snapshot, and writes the status the controller's pure decision gives.
//!
//! [`probe`] and [`roll`] are pure; the loop around them starts, probes and stops processes.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;

use crate::api::SnapshotRef;
use crate::api::contract::{ENV_AGENT_CONFIG_PATH, ENV_PORT};
use crate::local::{
    DataDir, DeploymentRecord, DeploymentRecords, DeploymentState, ProcessIdentity, ServerState,
    agent_env,
};
use crate::ops::Error;
use crate::resolve::deployment::status::{Observed, decide};

/// Seconds between readiness probes (the cluster probes every 5 s; a local server is nearer).
const PROBE_PERIOD: Duration = Duration::from_secs(1);
/// How long a server taken out of the gateway's view keeps running, for requests already sent.
const DRAIN: Duration = Duration::from_millis(500);
/// Time between SIGTERM and SIGKILL when a server is stopped.
const GRACE: Duration = Duration::from_secs(5);

/// A server's readiness after one probe: ready at its first success, unready after
/// `failure_threshold` failures in a row (as a kubelet's readiness probe). Returns the new
/// readiness and the failures in a row.
pub fn probe(ready: bool, failures: u32, passed: bool, failure_threshold: u32) -> (bool, u32) {
    if passed {
        return (true, 0);
    }
    let failures = failures.saturating_add(1);
    (ready && failures < failure_threshold.max(1), failures)
}

/// What to do with the servers in one round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roll {
    /// How many servers of the current snapshot to start.
    pub start: usize,
    /// The servers to stop (indices into the list given).
    pub stop: Vec<usize>,
    /// Whether servers of an earlier snapshot are still running.
    pub rolling: bool,
}

/// Decides the round from the servers' (snapshot is current, ready) and the replicas asked
/// for: start what the current snapshot lacks; once all of its replicas are ready, stop the
/// servers of earlier snapshots (so requests are served throughout a redeploy); stop current
/// servers beyond the replicas.
pub fn roll(servers: &[(bool, bool)], replicas: usize) -> Roll {
    let current: Vec<usize> = (0..servers.len()).filter(|&i| servers[i].0).collect();
    let old: Vec<usize> = (0..servers.len()).filter(|&i| !servers[i].0).collect();
    let ready_current = current.iter().filter(|&&i| servers[i].1).count();
    let mut stop: Vec<usize> = current.iter().skip(replicas).copied().collect();
    let rolled = ready_current >= replicas;
    if rolled {
        stop.extend(&old);
    }
    Roll {
        start: replicas.saturating_sub(current.len()),
        stop,
        rolling: !rolled && !old.is_empty(),
    }
}

/// One running server with what only this process knows.
struct Server {
    state: ServerState,
    child: Child,
    failures: u32,
}

/// Serves deployment `name` until it is undeployed or this process is told to stop.
pub async fn serve_deployment(data: DataDir, namespace: &str, name: &str) -> Result<(), Error> {
    let records = DeploymentRecords::new(data.clone());
    let stop = crate::runner::signals::cancel_on_stop_signal();
    let mut state = records.state(namespace, name);
    state.supervisor = ProcessIdentity::current();
    state.servers.clear();
    // Servers an earlier supervisor ran are gone: readiness is lost until one of ours is ready.
    if let Ok(record) = records.read(namespace, name) {
        settle(&mut state, &record, false);
    }
    write_state(&records, namespace, name, &state);
    let http = crate::gateway::agent_client();
    let mut servers: Vec<Server> = Vec::new();
    loop {
        let record = match records.read(namespace, name) {
            Ok(record) if !record.deleting => record,
            _ => break,
        };
        reap(&mut servers, &records, namespace, name);
        let spec = &record.object.spec;
        for server in &mut servers {
            let url = format!(
                "http://127.0.0.1:{}{}",
                server.state.port, spec.readiness.path
            );
            let timeout =
                Duration::from_secs(spec.readiness.timeout_seconds.max(1).unsigned_abs().into());
            let passed = http
                .get(url)
                .timeout(timeout)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            let threshold = spec.readiness.failure_threshold.max(1).unsigned_abs();
            (server.state.ready, server.failures) =
                probe(server.state.ready, server.failures, passed, threshold);
        }
        let facts: Vec<(bool, bool)> = servers
            .iter()
            .map(|s| {
                (
                    s.state.snapshot_digest == record.snapshot_digest,
                    s.state.ready,
                )
            })
            .collect();
        let round = roll(&facts, usize::try_from(spec.replicas).unwrap_or(1));
        let mut stopping: Vec<Server> = Vec::new();
        for index in round.stop.iter().rev() {
            stopping.push(servers.remove(*index));
        }
        if !stopping.is_empty() {
            // The gateway stops sending to them before they are told to stop.
            state.servers = servers.iter().map(|s| s.state.clone()).collect();
            write_state(&records, namespace, name, &state);
            tokio::time::sleep(DRAIN).await;
        }
        for server in stopping {
            stop_server(server).await;
        }
        for _ in 0..round.start {
            match start_server(&data, &records, &record, namespace, name) {
                Ok(server) => servers.push(server),
                Err(message) => eprintln!("starting an agent server of {name}: {message}"),
            }
        }
        state.servers = servers.iter().map(|s| s.state.clone()).collect();
        settle(&mut state, &record, round.rolling);
        write_state(&records, namespace, name, &state);
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(PROBE_PERIOD) => {}
        }
    }
    state.servers.clear();
    if let Ok(record) = records.read(namespace, name)
        && !record.deleting
    {
        settle(&mut state, &record, false);
    }
    write_state(&records, namespace, name, &state);
    for server in servers {
        stop_server(server).await;
    }
    Ok(())
}

/// Decides the status from the servers in `state`, as the controller decides it.
fn settle(state: &mut DeploymentState, record: &DeploymentRecord, rolling: bool) {
    let previous = state.status.clone();
    state.status = decide(&previous, &observe(record, state, &previous, rolling)).status;
}

/// What the controller's decision needs, as this supervisor sees it. While servers of an
/// earlier snapshot still serve, the new generation is not observed yet, so whoever waits for
/// a redeploy waits for the roll to finish.
fn observe(
    record: &DeploymentRecord,
    state: &DeploymentState,
    previous: &crate::api::AgentDeploymentStatus,
    rolling: bool,
) -> Observed {
    let object = &record.object;
    let ready: Vec<&ServerState> = state.servers.iter().filter(|s| s.ready).collect();
    let address = ready
        .first()
        .copied()
        .or(state.servers.first())
        .map_or_else(String::new, |s| format!("http://127.0.0.1:{}", s.port));
    let generation = if rolling {
        previous.observed_generation.or(object.metadata.generation)
    } else {
        object.metadata.generation
    };
    let agent = object
        .spec
        .agent_ref
        .as_ref()
        .map(|r| r.name.clone())
        .unwrap_or_default();
    Observed {
        generation,
        agent: if rolling {
            previous.agent.clone().unwrap_or(agent)
        } else {
            agent
        },
        snapshot: SnapshotRef {
            config_map: format!(
                "snapshots/{}.json",
                record.snapshot_digest.trim_start_matches("sha256:")
            ),
            digest: record.snapshot_digest.clone(),
        },
        source_digest: crate::resolve::source_digest(&object.spec),
        replicas: object.spec.replicas,
        ready_replicas: i32::try_from(ready.len()).unwrap_or(i32::MAX),
        address,
        refused_redeploy: None,
        timeout: u64::try_from(object.spec.starting_timeout_seconds)
            .ok()
            .filter(|seconds| *seconds > 0)
            .map(Duration::from_secs),
        now: jiff::Timestamp::now(),
    }
}

fn write_state(records: &DeploymentRecords, namespace: &str, name: &str, state: &DeploymentState) {
    if let Err(e) = records.write_state(namespace, name, state) {
        eprintln!("writing the state of {name}: {e}");
    }
}

/// Forgets servers that exited (they are started again this round, as a kubelet restarts a
/// container), noting each in the server log.
fn reap(servers: &mut Vec<Server>, records: &DeploymentRecords, namespace: &str, name: &str) {
    servers.retain_mut(|server| match server.child.try_wait() {
        Ok(None) => true,
        Ok(Some(status)) => {
            append_log(
                records,
                namespace,
                name,
                &format!(
                    "errand: the agent server on port {} exited ({status}); starting another\n",
                    server.state.port
                ),
            );
            false
        }
        Err(_) => false,
    });
}

fn append_log(records: &DeploymentRecords, namespace: &str, name: &str, line: &str) {
    use std::io::Write;
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(records.server_log(namespace, name))
    {
        let _ = log.write_all(line.as_bytes());
    }
}

/// Starts one agent server of the record's snapshot on a free loopback port, in the
/// deployment's workspace, with the agent's environment (secrets included) as a pod gets it.
fn start_server(
    data: &DataDir,
    records: &DeploymentRecords,
    record: &DeploymentRecord,
    namespace: &str,
    name: &str,
) -> Result<Server, String> {
    let digest = &record.snapshot_digest;
    let snapshot = records
        .snapshot(namespace, name, digest)
        .map_err(|e| e.to_string())?;
    let command = snapshot.command();
    let Some((program, args)) = command.split_first() else {
        return Err("the agent has no command".to_owned());
    };
    let mut env = agent_env(data, &snapshot, false).map_err(|e| e.to_string())?;
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("assigning a port: {e}"))?
        .port();
    env.push((ENV_PORT.to_owned(), port.to_string()));
    env.push((
        ENV_AGENT_CONFIG_PATH.to_owned(),
        records
            .agent_config(namespace, name, digest)
            .display()
            .to_string(),
    ));
    let workspace = records.dir(namespace, name).join("workspace");
    std::fs::create_dir_all(&workspace).map_err(|e| format!("{}: {e}", workspace.display()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(records.server_log(namespace, name))
        .map_err(|e| format!("the server log: {e}"))?;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(env)
        .current_dir(&workspace)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .process_group(0);
    let child = tokio::process::Command::from(command)
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let pid = child.id().ok_or("the server exited at once")?;
    append_log(
        records,
        namespace,
        name,
        &format!("errand: started an agent server (pid {pid}) on port {port} serving {digest}\n"),
    );
    let process = ProcessIdentity::of(pid).ok_or("the server exited at once")?;
    Ok(Server {
        state: ServerState {
            process,
            port,
            snapshot_digest: digest.clone(),
            ready: false,
        },
        child,
        failures: 0,
    })
}

/// Stops a server's process group: SIGTERM, then SIGKILL after the grace period.
async fn stop_server(mut server: Server) {
    let Ok(pid) = i32::try_from(server.state.process.pid) else {
        return;
    };
    let group = Pid::from_raw(pid);
    let _ = killpg(group, Signal::SIGTERM);
    if tokio::time::timeout(GRACE, server.child.wait())
        .await
        .is_err()
    {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = server.child.wait().await;
    }
    // Whatever the server left in its group.
    let _ = killpg(group, Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_ready_at_its_first_success_and_unready_after_the_threshold() {
        assert_eq!(probe(false, 0, false, 3), (false, 1));
        assert_eq!(probe(false, 5, true, 3), (true, 0));
        assert_eq!(probe(true, 0, false, 3), (true, 1));
        assert_eq!(probe(true, 1, false, 3), (true, 2));
        assert_eq!(probe(true, 2, false, 3), (false, 3));
        assert_eq!(probe(true, 0, false, 1), (false, 1));
    }

    #[test]
    fn a_roll_keeps_the_old_servers_until_every_new_replica_is_ready() {
        // First round: nothing runs.
        assert_eq!(
            roll(&[], 2),
            Roll {
                start: 2,
                stop: vec![],
                rolling: false
            }
        );
        // A redeploy: one old ready server, the new one not ready yet.
        let during = roll(&[(false, true), (true, false)], 1);
        assert_eq!(
            during,
            Roll {
                start: 0,
                stop: vec![],
                rolling: true
            }
        );
        // The new one is ready: the old one goes.
        let done = roll(&[(false, true), (true, true)], 1);
        assert_eq!(
            done,
            Roll {
                start: 0,
                stop: vec![0],
                rolling: false
            }
        );
        // Scaled down.
        assert_eq!(roll(&[(true, true), (true, true)], 1).stop, vec![1]);
    }
}
