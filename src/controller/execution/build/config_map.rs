//! The execution's immutable snapshot ConfigMap, which also holds the results finalizer.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::child_meta;
use crate::api::contract;
use crate::controller::build::{ExecutionOwner, snapshot_holder};
use crate::controller::config::{ControllerConfig, RESULTS_FINALIZER};
use crate::controller::names;
use crate::resolve::Snapshot;

/// The snapshot ConfigMap of an execution: immutable, owned by it, annotated with the digest,
/// holding the results finalizer.
pub fn snapshot_config_map(
    execution: &ExecutionOwner,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> ConfigMap {
    let mut meta = child_meta(
        execution,
        names::snapshot_config_map_name(&execution.name),
        &snapshot.agent.name,
    );
    meta.annotations = Some(BTreeMap::from([(
        contract::EXECUTION_NAME_ANNOTATION.to_owned(),
        execution.name.clone(),
    )]));
    // Created with the results finalizer, so the results are deleted with the execution
    // without a write of its own (see `controller::execution::results_cleanup`).
    meta.finalizers = Some(vec![RESULTS_FINALIZER.to_owned()]);
    snapshot_holder(meta, snapshot, config)
}
