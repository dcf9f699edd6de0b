//! The content of every immutable snapshot ConfigMap: the resolved execution (or deployment) and the merged agent config.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::contract;
use crate::controller::config::ControllerConfig;
use crate::resolve::Snapshot;

pub use crate::api::contract::SNAPSHOT_KEY;
/// Key of the merged agent config (JSON) in the ConfigMap; `AGENT_CONFIG_PATH` points at it.
pub const AGENT_CONFIG_KEY: &str = "agent-config.json";

/// An immutable ConfigMap with `meta` holding `snapshot` (canonical JSON) and its merged agent
/// config, its proxied models pointed at the egress proxy: what `AGENT_CONFIG_PATH` points at
/// in every pod errand runs an agent in.
pub fn snapshot_holder(
    mut meta: ObjectMeta,
    snapshot: &Snapshot,
    config: &ControllerConfig,
) -> ConfigMap {
    meta.annotations.get_or_insert_with(BTreeMap::new).insert(
        contract::SNAPSHOT_DIGEST_ANNOTATION.to_owned(),
        snapshot.digest(),
    );
    let snapshot_json =
        String::from_utf8(snapshot.canonical_json()).expect("canonical JSON is UTF-8");
    let agent_config = super::model_credentials::agent_config_json(snapshot, config);
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
