//! What the store sweep removes, without I/O: result prefixes of executions that no longer exist, Fileset blobs nothing pins, and abandoned uploads, once they are older than a grace period.
//!
//! The store's layout (DESIGN.md §3) says what each key belongs to:
//! `results/<ns>/<execution>/<uid>/...` to an execution by uid, `filesets/<ns>/<sha256>...` to
//! the Filesets and snapshots that pin that digest in that namespace, and
//! `uploads/<ns>/<token>...` to a push in flight, and `partial/<key>.<token>` to a write in
//! progress in a `file://` store. A key outside the layout is left alone and counted. Uploads
//! and partial writes are never referenced: they go once the grace period has passed since
//! their last byte. Nothing newer than the grace period goes, whatever references it: an execution
//! being created, or a push whose Fileset is not updated yet, is not yet in the references.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use serde::Serialize;

use crate::resolve::Snapshot;
use crate::store::Listed;

/// What still references the store's objects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References {
    /// The uids of the executions that exist.
    pub executions: BTreeSet<String>,
    /// The Fileset blobs pinned by a Fileset's current content or by a live execution's
    /// snapshot: namespace and lowercase hex sha256.
    pub filesets: BTreeSet<(String, String)>,
    /// The uids of the AgentDeployments that exist: their gateway chat sessions stay.
    pub deployments: BTreeSet<String>,
}

impl References {
    /// Pins `digest` (`sha256:<hex>` or bare hex) in `namespace`.
    pub fn pin(&mut self, namespace: &str, digest: &str) {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.filesets.insert((namespace.to_owned(), hex.to_owned()));
    }

    /// Pins every Fileset blob a live execution's snapshot stages.
    pub fn pin_snapshot(&mut self, snapshot: &Snapshot) {
        let workdir = &snapshot.workdir;
        let mounted = workdir.mounts.iter().map(|m| &m.content);
        for content in workdir.base.iter().chain(mounted) {
            self.pin(&snapshot.namespace, &content.digest);
        }
    }
}

/// What a group of objects is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// An execution's results (`results/<ns>/<execution>/<uid>/`).
    Results,
    /// A Fileset blob and what lies beside it (`filesets/<ns>/<sha256>...`).
    Fileset,
    /// A Fileset push that never finished (`uploads/<ns>/<token>...`).
    Upload,
    /// An object a `file://` store was still writing when its writer stopped
    /// (`partial/<key>.<token>`).
    Partial,
    /// The gateway chat sessions with one AgentDeployment, everyone's
    /// (`sessions/<ns>/<deployment uid>/...`).
    Sessions,
}

impl Kind {
    /// The kind as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Results => "results",
            Kind::Fileset => "fileset",
            Kind::Upload => "upload",
            Kind::Partial => "partial",
            Kind::Sessions => "sessions",
        }
    }
}

/// Objects that belong to one thing: an execution's results, one Fileset blob, one upload,
/// one deployment's sessions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Group {
    /// What they are.
    pub kind: Kind,
    /// Their namespace.
    pub namespace: String,
    /// The execution uid, the blob's digest, the upload's token or the deployment's uid.
    pub id: String,
    /// The objects' keys.
    pub keys: Vec<String>,
    /// Their bytes.
    pub bytes: u64,
    /// When the newest of them was written.
    pub newest: Timestamp,
}

/// What the sweep found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SweepPlan {
    /// Unreferenced and older than the grace period: to remove.
    pub remove: Vec<Group>,
    /// Unreferenced but written within the grace period: kept this time.
    pub in_grace: Vec<Group>,
    /// Referenced groups.
    pub referenced: usize,
    /// Keys outside the layout, left alone.
    pub unknown_keys: usize,
}

/// Sorts `listed` into groups and decides which to remove at `now`.
pub fn plan(
    listed: &[Listed],
    references: &References,
    grace: SignedDuration,
    now: Timestamp,
) -> SweepPlan {
    let mut groups: BTreeMap<(Kind, String, String), Group> = BTreeMap::new();
    let mut sweep = SweepPlan::default();
    for object in listed {
        let Some((kind, namespace, id)) = owner(&object.key) else {
            sweep.unknown_keys += 1;
            continue;
        };
        let group = groups
            .entry((kind, namespace.clone(), id.clone()))
            .or_insert_with(|| Group {
                kind,
                namespace,
                id,
                keys: Vec::new(),
                bytes: 0,
                newest: object.last_modified,
            });
        group.keys.push(object.key.clone());
        group.bytes += object.size;
        group.newest = group.newest.max(object.last_modified);
    }
    let settled = now.checked_sub(grace).unwrap_or(Timestamp::MIN);
    for group in groups.into_values() {
        let referenced = match group.kind {
            Kind::Results => references.executions.contains(&group.id),
            Kind::Fileset => references
                .filesets
                .contains(&(group.namespace.clone(), group.id.clone())),
            Kind::Sessions => references.deployments.contains(&group.id),
            Kind::Upload | Kind::Partial => false,
        };
        if referenced {
            sweep.referenced += 1;
        } else if group.newest > settled {
            sweep.in_grace.push(group);
        } else {
            sweep.remove.push(group);
        }
    }
    sweep
}

/// The kind, namespace and id of the thing `key` belongs to, when it follows the layout.
fn owner(key: &str) -> Option<(Kind, String, String)> {
    let parts: Vec<&str> = key.split('/').collect();
    let valid = |s: &&str| !s.is_empty() && *s != "." && *s != "..";
    match parts.as_slice() {
        ["results", namespace, execution, uid, _, ..]
            if [namespace, execution, uid].iter().all(|s| valid(s)) =>
        {
            Some((Kind::Results, (*namespace).to_owned(), (*uid).to_owned()))
        }
        ["filesets", namespace, file] if valid(namespace) => {
            let digest = file.split('.').next().filter(|d| is_sha256(d))?;
            Some((Kind::Fileset, (*namespace).to_owned(), digest.to_owned()))
        }
        ["partial", top, namespace, rest @ ..]
            if ["results", "filesets", "uploads"].contains(top)
                && valid(namespace)
                && !rest.is_empty() =>
        {
            let id = key.strip_prefix("partial/")?.to_owned();
            Some((Kind::Partial, (*namespace).to_owned(), id))
        }
        ["sessions", namespace, deployment, _, ..] if valid(namespace) && valid(deployment) => {
            Some((
                Kind::Sessions,
                (*namespace).to_owned(),
                (*deployment).to_owned(),
            ))
        }
        ["uploads", namespace, file] if valid(namespace) && valid(file) => {
            let token = file.split('.').next().filter(|t| !t.is_empty())?;
            Some((Kind::Upload, (*namespace).to_owned(), token.to_owned()))
        }
        _ => None,
    }
}

fn is_sha256(value: &str) -> bool {
    value.len() == 64
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6f1c2d3e-0000-4000-8000-000000000001";
    const GONE: &str = "6f1c2d3e-0000-4000-8000-00000000dead";

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn object(key: &str, size: u64, written: i64) -> Listed {
        Listed {
            key: key.to_owned(),
            size,
            last_modified: at(written),
        }
    }

    fn digest(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn references() -> References {
        let mut references = References::default();
        references.executions.insert(UID.to_owned());
        references.pin("team-a", &format!("sha256:{}", digest('a')));
        references
    }

    fn ids(groups: &[Group]) -> Vec<(Kind, &str)> {
        groups.iter().map(|g| (g.kind, g.id.as_str())).collect()
    }

    #[test]
    fn the_results_of_an_execution_that_is_gone_go_as_one_prefix() {
        let listed = [
            object(&format!("results/team-a/calc/{UID}/run_result"), 10, 0),
            object(&format!("results/team-a/old/{GONE}/run_result"), 10, 0),
            object(&format!("results/team-a/old/{GONE}/output_workdir"), 90, 5),
        ];
        let sweep = plan(
            &listed,
            &references(),
            SignedDuration::from_hours(1),
            at(7200),
        );
        assert_eq!(ids(&sweep.remove), vec![(Kind::Results, GONE)]);
        assert_eq!(sweep.remove[0].bytes, 100);
        assert_eq!(sweep.remove[0].keys.len(), 2);
        assert_eq!(sweep.referenced, 1);
    }

    #[test]
    fn the_sessions_of_a_deployment_that_is_gone_go_whoevers_they_are() {
        let mut references = references();
        references.deployments.insert(UID.to_owned());
        let listed = [
            object(
                &format!("sessions/team-a/{UID}/alice/s1/000000.json"),
                10,
                0,
            ),
            object(
                &format!("sessions/team-a/{GONE}/alice/s1/000000.json"),
                10,
                0,
            ),
            object(&format!("sessions/team-a/{GONE}/bob/s9/000000.json"), 10, 0),
        ];
        let sweep = plan(&listed, &references, SignedDuration::ZERO, at(1));
        assert_eq!(ids(&sweep.remove), vec![(Kind::Sessions, GONE)]);
        assert_eq!(sweep.remove[0].keys.len(), 2);
        assert_eq!(sweep.referenced, 1);
    }

    #[test]
    fn a_blob_no_fileset_or_snapshot_pins_goes_with_what_lies_beside_it() {
        let (pinned, loose) = (digest('a'), digest('b'));
        let listed = [
            object(&format!("filesets/team-a/{pinned}.tar.gz"), 10, 0),
            object(&format!("filesets/team-a/{loose}.tar.gz"), 10, 0),
            object(&format!("filesets/team-a/{loose}.paths.json.gz"), 1, 0),
            object(&format!("filesets/team-b/{pinned}.tar.gz"), 10, 0),
        ];
        let sweep = plan(&listed, &references(), SignedDuration::ZERO, at(1));
        assert_eq!(
            ids(&sweep.remove),
            vec![
                (Kind::Fileset, loose.as_str()),
                (Kind::Fileset, pinned.as_str())
            ],
            "a pin holds in its own namespace only"
        );
        assert_eq!(sweep.remove[0].keys.len(), 2);
        assert_eq!(sweep.remove[1].namespace, "team-b");
    }

    #[test]
    fn nothing_younger_than_the_grace_period_goes() {
        let listed = [
            object(&format!("results/team-a/new/{GONE}/input_workdir"), 10, 0),
            object(&format!("results/team-a/new/{GONE}/run_result"), 10, 3599),
            object(&format!("filesets/team-a/{}.tar.gz", digest('c')), 10, 3000),
            object("uploads/team-a/123-456-0.tar.gz", 10, 0),
        ];
        let sweep = plan(
            &listed,
            &References::default(),
            SignedDuration::from_hours(1),
            at(3600),
        );
        assert_eq!(ids(&sweep.remove), vec![(Kind::Upload, "123-456-0")]);
        assert_eq!(
            ids(&sweep.in_grace),
            vec![(Kind::Results, GONE), (Kind::Fileset, digest('c').as_str())],
            "a prefix counts from its newest object"
        );
        let later = plan(
            &listed,
            &References::default(),
            SignedDuration::from_hours(1),
            at(7200),
        );
        assert_eq!(later.remove.len(), 3);
    }

    #[test]
    fn a_partial_write_goes_once_its_last_byte_is_older_than_the_grace_period() {
        let dead = format!("partial/results/team-a/calc/{UID}/output_workdir.4242-1-0");
        let writing = format!("partial/results/team-a/calc/{UID}/output_artifacts.4242-1-1");
        let listed = [object(&dead, 10, 0), object(&writing, 10, 3500)];
        let sweep = plan(
            &listed,
            &references(),
            SignedDuration::from_hours(1),
            at(3600),
        );
        assert_eq!(
            sweep
                .remove
                .iter()
                .map(|g| (g.kind, g.keys.clone()))
                .collect::<Vec<_>>(),
            vec![(Kind::Partial, vec![dead])],
            "even under a live execution"
        );
        assert_eq!(sweep.in_grace.len(), 1);
    }

    #[test]
    fn keys_outside_the_layout_are_left_alone() {
        let listed = [
            object("README", 1, 0),
            object("results/team-a/only-two", 1, 0),
            object(&format!("results/team-a/calc/{GONE}"), 1, 0),
            object("filesets/team-a/not-a-digest.tar.gz", 1, 0),
            object("filesets/team-a/nested/x.tar.gz", 1, 0),
            object("partial/abc", 1, 0),
            object("partial/results/team-a", 1, 0),
        ];
        let sweep = plan(
            &listed,
            &References::default(),
            SignedDuration::ZERO,
            at(10),
        );
        assert!(sweep.remove.is_empty(), "{:?}", sweep.remove);
        assert_eq!(sweep.unknown_keys, 7);
    }
}
