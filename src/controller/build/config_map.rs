//! The immutable snapshot ConfigMap: the resolved execution (or deployment) and the merged agent config.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{ExecutionOwner, names};
use crate::api::contract;
use crate::controller::config::RESULTS_FINALIZER;
use crate::resolve::Snapshot;

pub use crate::api::contract::SNAPSHOT_KEY;
/// Key of the merged agent config (JSON) in the ConfigMap; `AGENT_CONFIG_PATH` points at it.
pub const AGENT_CONFIG_KEY: &str = "agent-config.json";

/// The snapshot ConfigMap of an execution: immutable, owned by it, annotated with the digest,
/// holding the results finalizer.
pub fn snapshot_config_map(execution: &ExecutionOwner, snapshot: &Snapshot) -> ConfigMap {
    let mut meta = execution.child_meta(
        names::snapshot_config_map_name(&execution.name),
        &snapshot.agent.name,
    );
    meta.annotations = Some(BTreeMap::from([(
        contract::EXECUTION_NAME_ANNOTATION.to_owned(),
        execution.name.clone(),
    )]));
    // Created with the results finalizer, so the results are deleted with the execution
    // without a write of its own (see `controller::results_cleanup`).
    meta.finalizers = Some(vec![RESULTS_FINALIZER.to_owned()]);
    snapshot_holder(meta, snapshot)
}

/// An immutable ConfigMap with `meta` holding `snapshot` (canonical JSON) and its merged agent
/// config: what `AGENT_CONFIG_PATH` points at in every pod errand runs an agent in.
pub fn snapshot_holder(mut meta: ObjectMeta, snapshot: &Snapshot) -> ConfigMap {
    meta.annotations.get_or_insert_with(BTreeMap::new).insert(
        contract::SNAPSHOT_DIGEST_ANNOTATION.to_owned(),
        snapshot.digest(),
    );
    let snapshot_json =
        String::from_utf8(snapshot.canonical_json()).expect("canonical JSON is UTF-8");
    let agent_config = snapshot.agent_config_json();
    ConfigMap {
        metadata: meta,
        immutable: Some(true),
        data: Some(BTreeMap::from([
            (SNAPSHOT_KEY.to_owned(), snapshot_json),
            (AGENT_CONFIG_KEY.to_owned(), agent_config),
        ])),
        ..ConfigMap::default()
    }
}
