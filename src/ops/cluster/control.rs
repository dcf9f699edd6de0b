//! Changing an execution on the cluster while or before it runs: kill, deadline changes, deferred start, and the refused restart.
//!
//! Each is a change to the AgentExecution's spec that the controller carries out: `kill` is a
//! cancel without grace, a deadline change is accepted (or refused) by the controller in
//! `status.deadline`, and `start` clears `held`.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{Cluster, api_error, phase};
use crate::api::{AgentExecution, Phase};
use crate::ops::Execution;
use crate::ops::backend::DeadlineChanged;
use crate::ops::{Error, ErrorCode};

/// How long `deadline` waits for the controller to answer a change.
const DEADLINE_ANSWER: Duration = Duration::from_secs(60);

impl Cluster {
    async fn patch_spec(
        &self,
        name: &str,
        spec: serde_json::Value,
    ) -> Result<AgentExecution, Error> {
        self.executions()
            .patch(
                name,
                &PatchParams::apply(super::FIELD_MANAGER),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
            .map_err(api_error)
    }

    /// `kill --signal KILL`: a cancel whose agent gets SIGKILL at once; waits until the results
    /// are saved. Other signals cannot reach a pod's processes through the API.
    pub(super) async fn kill(
        &self,
        record: &Execution,
        signal: nix::sys::signal::Signal,
    ) -> Result<Execution, Error> {
        if signal != nix::sys::signal::Signal::SIGKILL {
            return Err(Error::argument(format!(
                "--signal {}: on a cluster only TERM (a cancel: SIGTERM, the grace period, SIGKILL) and KILL (a cancel without the grace period) can be sent; errand reaches the agent's pod only through the API server, which can stop a pod but not signal its processes",
                signal.as_str().trim_start_matches("SIG")
            )));
        }
        self.patch_spec(&record.name, json!({"cancel": true, "kill": true}))
            .await?;
        let done = self.wait(&record.name).await?;
        Ok(self.record(&done).await)
    }

    /// `deadline set|clear`: writes the change with a fresh request id, then waits for the
    /// controller's answer in `status.deadline`.
    pub(super) async fn change_deadline(
        &self,
        record: &Execution,
        in_seconds: Option<u64>,
    ) -> Result<DeadlineChanged, Error> {
        let name = &record.name;
        let current = self.executions().get(name).await.map_err(api_error)?;
        if let Some(phase) = phase(&current).filter(|p| p.is_terminal()) {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!("execution {name} already ended {phase:?}; its deadline cannot change"),
            ));
        }
        if current.spec.cancel {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!(
                    "execution {name} is already being stopped (it was cancelled); the change came after termination began"
                ),
            ));
        }
        let request = request_id();
        let change = json!({"request": request, "inSeconds": in_seconds});
        self.patch_spec(name, json!({ "deadline": change })).await?;
        let deadline = tokio::time::Instant::now() + DEADLINE_ANSWER;
        loop {
            let execution = self.executions().get(name).await.map_err(api_error)?;
            let status = execution.status.as_ref();
            if let Some(answer) = status
                .and_then(|s| s.deadline.as_ref())
                .filter(|d| d.request == request)
            {
                if let Some(refused) = &answer.refused {
                    return Err(Error::new(ErrorCode::InvalidState, refused.clone()));
                }
                // Cleared: the deadline timeoutSeconds gives, once the agent started.
                let timeout = u64::try_from(execution.spec.timeout_seconds).unwrap_or(0);
                let own = status
                    .and_then(|s| s.start_time.as_ref())
                    .map(|started| started.0 + Duration::from_secs(timeout));
                return Ok(DeadlineChanged {
                    execution: name.clone(),
                    accepted_at: answer
                        .accepted_at
                        .as_ref()
                        .map_or_else(jiff::Timestamp::now, |t| t.0),
                    deadline_at: answer.deadline.as_ref().map(|t| t.0).or(own),
                    cleared: in_seconds.is_none(),
                });
            }
            if let Some(phase) = phase(&execution).filter(|p| p.is_terminal()) {
                return Err(Error::new(
                    ErrorCode::InvalidState,
                    format!(
                        "execution {name} ended {phase:?} before the controller took the deadline change"
                    ),
                ));
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::new(
                    ErrorCode::Timeout,
                    format!(
                        "the controller did not answer the deadline change of execution {name} within {}s; is it running?",
                        DEADLINE_ANSWER.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(super::POLL).await;
        }
    }

    /// `start`: clears `held` of a created execution.
    pub(super) async fn start_held(&self, record: &Execution) -> Result<Execution, Error> {
        let current = self
            .executions()
            .get(&record.name)
            .await
            .map_err(api_error)?;
        if !current.spec.held {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!(
                    "execution {} is {:?}, not Created: only a created execution can be started",
                    record.name,
                    phase(&current).unwrap_or(Phase::Pending)
                ),
            ));
        }
        let started = self
            .patch_spec(&record.name, json!({"held": false}))
            .await?;
        Ok(self.record(&started).await)
    }
}

/// `restart` on a cluster: refused, naming `rerun`.
pub(super) fn restart_refused(name: &str) -> Error {
    Error::new(
        ErrorCode::NotSupported,
        format!(
            "restart: on a cluster a run happens at most once (its Job never starts a second pod, since an agent run is not idempotent); run it again from its snapshot as a new execution with `errand rerun {name}`"
        ),
    )
}

/// A fresh id for one deadline change.
fn request_id() -> String {
    format!(
        "{:x}-{:x}",
        jiff::Timestamp::now().as_nanosecond(),
        std::process::id()
    )
}
