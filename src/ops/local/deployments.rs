//! AgentDeployments on this machine: the local side of the deployment commands, each deployment served by a detached supervisor and reached through errand's gateway code run in this process.
//!
//! A deployment is admitted as the API server would admit it ([`admit_deployment`]) and its
//! snapshot kept beside its record; its supervisor (`supervisor.rs`) runs the agent servers
//! and writes the status. Reading a deployment whose supervisor is gone (a reboot, a kill)
//! starts a new one, as the cluster's controllers would bring its pods back.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::Local;
use super::detached::start_supervisor;
use crate::api::AgentDeployment;
use crate::api::contract::REPLACED_AGENT_ANNOTATION;
use crate::cluster::access::UserInfo;
use crate::gateway::auth::Authorizer;
use crate::gateway::refusal::Refusal;
use crate::gateway::server::{Directory, Gateway, serve};
use crate::gateway::sessions::{SessionLimits, Sessions};
use crate::local::{
    DeploymentRecord, DeploymentRecords, DeploymentState, ServerState, admit_deployment,
};
use crate::ops::backend::Deployments;
use crate::ops::{Error, ErrorCode};
use crate::ops::{GatewayClient, GatewayEndpoint};

/// How long `undeploy` waits for a supervisor to stop its servers.
const SUPERVISOR_EXIT: Duration = Duration::from_secs(30);
/// How often `logs --follow` looks for more.
const LOG_POLL: Duration = Duration::from_millis(200);
/// How often waits look again.
const POLL: Duration = Duration::from_millis(100);

impl Local {
    /// The deployment records.
    pub fn deployment_records(&self) -> DeploymentRecords {
        DeploymentRecords::new(self.data.clone())
    }

    /// Starts a supervisor for deployment `name` unless one runs or it is being deleted;
    /// servers a lost supervisor left behind are stopped first.
    fn ensure_supervised(&self, name: &str) -> Result<(), Error> {
        let records = self.deployment_records();
        let record = records.read(&self.namespace, name).map_err(Error::from)?;
        let state = records.state(&self.namespace, name);
        if record.deleting || state.supervisor.is_some_and(|s| s.is_running()) {
            return Ok(());
        }
        stop_orphans(&state.servers);
        let log_path = records.dir(&self.namespace, name).join("supervisor.log");
        start_supervisor(self, "__serve-deployment", name, &log_path, |pid| {
            records
                .state(&self.namespace, name)
                .supervisor
                .is_some_and(|s| s.pid == pid)
        })
    }

    /// Deployment `name` with its status, supervised.
    fn supervised(&self, name: &str) -> Result<AgentDeployment, Error> {
        self.ensure_supervised(name)?;
        self.deployment_records()
            .deployment(&self.namespace, name)
            .map_err(Error::from)
    }
}

/// Prints what `file` holds past `offset` and returns how many bytes that was.
fn print_from(file: &std::path::Path, offset: u64) -> u64 {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut grown = Vec::new();
    let read = std::fs::File::open(file).and_then(|mut file| {
        file.seek(SeekFrom::Start(offset))?;
        file.read_to_end(&mut grown)
    });
    if read.is_err() || grown.is_empty() {
        return 0;
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&grown).and_then(|()| stdout.flush());
    grown.len() as u64
}

/// Stops agent servers whose supervisor is gone (their process groups).
fn stop_orphans(servers: &[ServerState]) {
    for server in servers.iter().filter(|s| s.process.is_running()) {
        if let Ok(pid) = i32::try_from(server.process.pid) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

#[async_trait]
impl Deployments for Local {
    async fn create_deployment(
        &self,
        deployment: &AgentDeployment,
    ) -> Result<AgentDeployment, Error> {
        let snapshot = admit_deployment(&self.data, deployment)?;
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let records = self.deployment_records();
        let mut record = DeploymentRecord {
            object: deployment.clone(),
            snapshot_digest: snapshot.digest(),
            deleting: false,
        };
        records.create(&mut record).map_err(Error::from)?;
        records
            .write_snapshot(&self.namespace, &name, &snapshot)
            .map_err(Error::from)?;
        self.supervised(&name)
    }

    async fn deployment(&self, name: &str) -> Result<AgentDeployment, Error> {
        self.supervised(name)
    }

    async fn deployments(&self) -> Result<Vec<AgentDeployment>, Error> {
        let names = self.deployment_records().names(&self.namespace);
        names.iter().map(|name| self.supervised(name)).collect()
    }

    async fn point_at_agent(
        &self,
        name: &str,
        agent: &str,
        replaced: &str,
        dry_run: bool,
    ) -> Result<(), Error> {
        let records = self.deployment_records();
        let mut record = records.read(&self.namespace, name).map_err(Error::from)?;
        let object = &mut record.object;
        object.spec.agent_ref = Some(crate::api::Reference::named(agent));
        object.spec.agent = None;
        object
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(REPLACED_AGENT_ANNOTATION.to_owned(), replaced.to_owned());
        let snapshot = admit_deployment(&self.data, object)?;
        if dry_run {
            return Ok(());
        }
        object.metadata.generation = Some(object.metadata.generation.unwrap_or(1) + 1);
        record.snapshot_digest = snapshot.digest();
        records
            .write_snapshot(&self.namespace, name, &snapshot)
            .map_err(Error::from)?;
        records.write(&record).map_err(Error::from)?;
        self.ensure_supervised(name)
    }

    async fn forget_replaced_agent(&self, name: &str) -> Result<(), Error> {
        let records = self.deployment_records();
        let mut record = records.read(&self.namespace, name).map_err(Error::from)?;
        if let Some(annotations) = record.object.metadata.annotations.as_mut() {
            annotations.remove(REPLACED_AGENT_ANNOTATION);
        }
        records.write(&record).map_err(Error::from)
    }

    async fn delete_deployment(&self, name: &str) -> Result<(), Error> {
        let records = self.deployment_records();
        let mut record = records.read(&self.namespace, name).map_err(Error::from)?;
        record.deleting = true;
        records.write(&record).map_err(Error::from)?;
        let deadline = tokio::time::Instant::now() + SUPERVISOR_EXIT;
        loop {
            let state = records.state(&self.namespace, name);
            let supervised = state.supervisor.is_some_and(|s| s.is_running());
            if !supervised {
                stop_orphans(&state.servers);
                return records.remove(&self.namespace, name).map_err(Error::from);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorCode::Timeout,
                    format!(
                        "the supervisor of AgentDeployment {name:?} did not stop its servers \
                         within {}s",
                        SUPERVISOR_EXIT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn gateway(&self, args: &GatewayEndpoint) -> Result<GatewayClient, Error> {
        if args.url.is_some() {
            return Err(Error::argument(
                "--gateway: the local backend serves its gateway in the command itself; leave \
                 --gateway out with --local",
            ));
        }
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| {
                Error::new(
                    ErrorCode::IoError,
                    format!("serving the local gateway: {e}"),
                )
            })?;
        let address = listener.local_addr().map_err(|e| {
            Error::new(
                ErrorCode::IoError,
                format!("serving the local gateway: {e}"),
            )
        })?;
        let gateway = Arc::new(Gateway {
            authorizer: Box::new(ThisUser),
            directory: Box::new(LocalDirectory {
                records: self.deployment_records(),
            }),
            sessions: Sessions::new(self.store()?, SessionLimits::default()),
            client: crate::gateway::agent_client(),
            next: AtomicUsize::new(0),
        });
        // It lives as long as this command.
        tokio::spawn(serve(
            listener,
            None,
            crate::cluster::listener::ServerLimits::DEFAULT,
            gateway,
        ));
        Ok(GatewayClient::local(format!("http://{address}")))
    }

    async fn logs(&self, name: &str, lines: usize, follow: bool) -> Result<(), Error> {
        let records = self.deployment_records();
        records.read(&self.namespace, name).map_err(Error::from)?;
        let log = records.server_log(&self.namespace, name);
        let bytes = std::fs::read(&log).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let all: Vec<&str> = text.lines().collect();
        for line in &all[all.len().saturating_sub(lines)..] {
            crate::ops::stdout::write_line(line);
        }
        let mut offset = bytes.len() as u64;
        // Until the deployment is removed (or the command interrupted).
        while follow && records.read(&self.namespace, name).is_ok() {
            tokio::time::sleep(LOG_POLL).await;
            offset += print_from(&log, offset);
        }
        Ok(())
    }
}

/// The local gateway's caller is the user running the command, who owns the data directory:
/// there is no one else to refuse, and every session is theirs.
struct ThisUser;

impl Authorizer for ThisUser {
    fn authorize<'a>(
        &'a self,
        _token: Option<&'a str>,
        _namespace: &'a str,
        _name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<UserInfo, Refusal>> {
        Box::pin(async {
            Ok(UserInfo {
                username: "local".to_owned(),
                ..UserInfo::default()
            })
        })
    }
}

/// The local gateway's directory: the deployments' records and the servers their supervisors
/// found ready.
struct LocalDirectory {
    records: DeploymentRecords,
}

impl Directory for LocalDirectory {
    fn deployments(&self, namespace: &str) -> Vec<Arc<AgentDeployment>> {
        self.records
            .names(namespace)
            .iter()
            .filter_map(|name| self.records.deployment(namespace, name).ok())
            .map(Arc::new)
            .collect()
    }

    fn ready_endpoints(&self, namespace: &str, deployment: &AgentDeployment) -> Vec<SocketAddr> {
        let name = deployment.metadata.name.as_deref().unwrap_or_default();
        let DeploymentState {
            supervisor,
            servers,
            ..
        } = self.records.state(namespace, name);
        if !supervisor.is_some_and(|s| s.is_running()) {
            return Vec::new();
        }
        servers
            .iter()
            .filter(|s| s.ready && s.process.is_running())
            .map(|s| SocketAddr::from((Ipv4Addr::LOCALHOST, s.port)))
            .collect()
    }
}
