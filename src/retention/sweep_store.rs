//! The store sweep's shell: lists the store under the layout's prefixes, lets [`super::sweep`] decide, deletes what nothing references (unless it is a dry run) and reports.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use super::sweep::{Group, Kind, References, plan};
use crate::store::{Store, StoreError};

/// The prefixes the sweep looks under; anything else in the store is never listed.
const SWEPT_PREFIXES: [&str; 7] = [
    "results/",
    "sessions/",
    "filesets/",
    "uploads/",
    "partial/results/",
    "partial/filesets/",
    "partial/uploads/",
];

/// Objects and bytes of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Tally {
    /// Groups (executions' results, blobs, uploads).
    pub groups: usize,
    /// Objects.
    pub objects: usize,
    /// Bytes.
    pub bytes: u64,
}

/// What a sweep did (or, in a dry run, would do).
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct SweepReport {
    /// Whether it only reported.
    pub dry_run: bool,
    /// Seconds an unreferenced object is kept after it was written.
    pub grace_seconds: i64,
    /// What it removed (or would remove), by kind: `results`, `fileset`, `upload`, `partial`.
    pub removed: BTreeMap<&'static str, Tally>,
    /// The groups removed (or that would be), each with its keys.
    pub groups: Vec<Group>,
    /// Unreferenced groups kept because they are younger than the grace period.
    pub in_grace: usize,
    /// Referenced groups.
    pub referenced: usize,
    /// Keys outside the store's layout, left alone.
    pub unknown_keys: usize,
}

impl SweepReport {
    /// Objects removed (or that would be), all kinds together.
    pub fn removed_objects(&self) -> usize {
        self.removed.values().map(|t| t.objects).sum()
    }

    /// Bytes removed (or that would be), all kinds together.
    pub fn removed_bytes(&self) -> u64 {
        self.removed.values().map(|t| t.bytes).sum()
    }
}

/// Sweeps `store` (only the part of `namespaces`, when given): removes what `references` no
/// longer references and was written more than `grace` before `now`; with `dry_run`, only
/// reports it.
///
/// `references` must be complete for the part swept, gathered before the store is listed:
/// whatever it misses and is older than `grace` is deleted.
pub async fn sweep_store(
    store: &Store,
    namespaces: Option<&[String]>,
    references: &References,
    grace: SignedDuration,
    dry_run: bool,
    now: Timestamp,
) -> Result<SweepReport, StoreError> {
    let mut listed = Vec::new();
    for prefix in SWEPT_PREFIXES {
        let prefixes = match namespaces {
            Some(namespaces) => namespaces.iter().map(|n| format!("{prefix}{n}/")).collect(),
            None => vec![prefix.to_owned()],
        };
        for prefix in prefixes {
            listed.extend(store.list(&prefix).await?);
        }
    }
    let plan = plan(&listed, references, grace, now);
    let mut removed: BTreeMap<&'static str, Tally> = BTreeMap::new();
    for group in &plan.remove {
        if !dry_run {
            for key in &group.keys {
                store.delete(key).await?;
            }
        }
        let tally = removed.entry(group.kind.as_str()).or_default();
        tally.groups += 1;
        tally.objects += group.keys.len();
        tally.bytes += group.bytes;
    }
    for kind in [Kind::Results, Kind::Fileset, Kind::Upload, Kind::Partial] {
        removed.entry(kind.as_str()).or_default();
    }
    Ok(SweepReport {
        dry_run,
        grace_seconds: grace.as_secs(),
        removed,
        groups: plan.remove,
        in_grace: plan.in_grace.len(),
        referenced: plan.referenced,
        unknown_keys: plan.unknown_keys,
    })
}
