//! The reconciler's work-queue depth: executions a watch event asked to reconcile whose reconcile has not started yet.
//!
//! kube's controller queues an execution once however many events name it before its turn, so
//! the depth is the number of distinct executions waiting. Requeues after a delay (a retry, a
//! deadline to watch) are not waiting for a worker and are not counted.

use std::collections::HashSet;
use std::sync::Mutex;

use kube::runtime::reflector::ObjectRef;
use prometheus_client::metrics::gauge::Gauge;

use crate::api::AgentExecution;
use crate::cluster::metrics::MetricsRegistry;

/// The executions waiting for a reconcile, exported as the gauge `work_queue_depth`.
#[derive(Default)]
pub struct WorkQueue {
    waiting: Mutex<HashSet<ObjectRef<AgentExecution>>>,
    depth: Gauge,
}

impl WorkQueue {
    /// Registers the depth gauge on `registry`.
    pub fn register(&self, registry: &mut MetricsRegistry) {
        registry.register(
            "work_queue_depth",
            "AgentExecutions a watch event asked to reconcile whose reconcile has not started",
            self.depth.clone(),
        );
    }

    /// A watch event asked to reconcile `execution`; passes it on.
    pub fn wants(&self, execution: ObjectRef<AgentExecution>) -> ObjectRef<AgentExecution> {
        self.update(|waiting| {
            waiting.insert(execution.clone());
        });
        execution
    }

    /// The reconcile of the execution `name` in `namespace` started, or the controller dropped
    /// it (it was deleted before its turn).
    pub fn taken(&self, name: &str, namespace: Option<&str>) {
        let execution = ObjectRef::<AgentExecution>::new(name);
        let execution = match namespace {
            Some(namespace) => execution.within(namespace),
            None => execution,
        };
        self.update(|waiting| {
            waiting.remove(&execution);
        });
    }

    /// How many executions wait.
    pub fn depth(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn update(&self, change: impl FnOnce(&mut HashSet<ObjectRef<AgentExecution>>)) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut waiting);
        self.depth
            .set(i64::try_from(waiting.len()).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_execution_waits_once_until_its_reconcile_takes_it() {
        let queue = WorkQueue::default();
        let run = ObjectRef::<AgentExecution>::new("run").within("team");
        queue.wants(run.clone());
        queue.wants(run);
        queue.wants(ObjectRef::new("other").within("team"));
        assert_eq!(queue.depth(), 2);
        queue.taken("run", Some("team"));
        assert_eq!(queue.depth(), 1);
        queue.taken("other", Some("elsewhere"));
        assert_eq!(queue.depth(), 1);
        queue.taken("other", Some("team"));
        assert_eq!(queue.depth(), 0);
    }
}
