//! Run-ended reports handed to this replica's reconciler in memory while it leads, so a report that reaches the leader costs no API write.
//!
//! The run-ended endpoint (`crate::serve::run_ended`) answers on every replica. On the one that
//! reconciles, it hands a checked report over here and the execution is reconciled at once;
//! elsewhere [`HandedReports::hand_over`] refuses and the endpoint records the report on the
//! execution instead, where the leader's watch finds it. A report stays until the pod's own end
//! has been seen (it corrects the status where it disagrees), the execution is gone, or the
//! replica stops leading; at most [`HandedReports::LIMIT`] are held, and past that the endpoint
//! records on the execution too.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::Stream;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

use crate::api::AgentExecution;
use crate::runner::end_report::RunEndReport;

/// The reports handed over and the reconciler's trigger.
#[derive(Default)]
pub struct HandedReports {
    /// Sends an execution to the reconciler; `None` until it runs here.
    trigger: Mutex<Option<mpsc::UnboundedSender<ObjectRef<AgentExecution>>>>,
    /// The reports, by execution uid.
    reports: Mutex<HashMap<String, RunEndReport>>,
}

impl HandedReports {
    /// The most reports held at once (each a few KiB): runs whose pods end within seconds of
    /// their reports hold far fewer.
    pub const LIMIT: usize = 10_000;

    /// Hands `report` to the reconciler and has its execution reconciled; `false` when no
    /// reconciler runs here (this replica does not lead) or [`Self::LIMIT`] reports are held.
    pub fn hand_over(&self, report: RunEndReport) -> bool {
        let trigger = self
            .trigger
            .lock()
            .expect("no panics while holding the lock");
        let Some(trigger) = trigger.as_ref().filter(|t| !t.is_closed()) else {
            return false;
        };
        let execution = ObjectRef::new(&report.execution.name).within(&report.execution.namespace);
        {
            let mut reports = self
                .reports
                .lock()
                .expect("no panics while holding the lock");
            if reports.len() >= Self::LIMIT && !reports.contains_key(&report.execution.uid) {
                return false;
            }
            reports.insert(report.execution.uid.clone(), report);
        }
        trigger.send(execution).is_ok()
    }

    /// The reconciler's side: the executions to reconcile for a report handed over. Reports
    /// are taken while the stream lives; the reports of a reconciler that stopped go with it.
    pub fn open(&self) -> impl Stream<Item = ObjectRef<AgentExecution>> + Send + 'static {
        let (sender, mut receiver) = mpsc::unbounded_channel();
        *self
            .trigger
            .lock()
            .expect("no panics while holding the lock") = Some(sender);
        self.reports
            .lock()
            .expect("no panics while holding the lock")
            .clear();
        futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
    }

    /// The report handed over for the execution with `uid`.
    pub fn get(&self, uid: &str) -> Option<RunEndReport> {
        self.reports
            .lock()
            .expect("no panics while holding the lock")
            .get(uid)
            .cloned()
    }

    /// Drops the report of the execution with `uid`.
    pub fn forget(&self, uid: &str) {
        self.reports
            .lock()
            .expect("no panics while holding the lock")
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::runner::RunState;
    use crate::runner::termination::TerminationSummary;
    use crate::store::keys::ExecutionId;

    fn report(uid: &str) -> RunEndReport {
        RunEndReport {
            execution: ExecutionId {
                uid: uid.into(),
                ..ExecutionId::test()
            },
            finished_at: jiff::Timestamp::UNIX_EPOCH,
            runner_exit_code: 0,
            summary: TerminationSummary {
                state: RunState::Succeeded,
                exit_code: Some(0),
                timed_out: false,
                stderr_tail: String::new(),
                results: Vec::new(),
                results_error: None,
                gpu_devices: Vec::new(),
            },
        }
    }

    #[tokio::test]
    async fn only_a_running_reconciler_takes_reports_and_each_triggers_its_execution() {
        let handed = HandedReports::default();
        assert!(
            !handed.hand_over(report("a")),
            "no reconciler runs here yet"
        );
        assert_eq!(handed.get("a"), None);
        let mut triggers = handed.open();
        assert!(handed.hand_over(report("a")));
        assert_eq!(handed.get("a"), Some(report("a")));
        let triggered = triggers.next().await.unwrap();
        assert_eq!(triggered.name, ExecutionId::test().name);
        assert_eq!(triggered.namespace, Some(ExecutionId::test().namespace));
        handed.forget("a");
        assert_eq!(handed.get("a"), None);
        drop(triggers);
        assert!(!handed.hand_over(report("b")), "the reconciler stopped");
    }

    #[tokio::test]
    async fn past_the_limit_a_report_is_refused_so_it_is_recorded_elsewhere() {
        let handed = HandedReports::default();
        let _triggers = handed.open();
        for n in 0..HandedReports::LIMIT {
            assert!(handed.hand_over(report(&n.to_string())));
        }
        assert!(!handed.hand_over(report("one more")));
        assert!(
            handed.hand_over(report("0")),
            "a report held already is replaced"
        );
    }
}
