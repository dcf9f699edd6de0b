//! What a snapshot asks of the runner, wherever it runs: the staging plan over its pinned Fileset digests and the agent's plain environment.

use super::{BlobRef, MountRef, StagePlan};
use crate::resolve::{FilesetContent, Snapshot};
use crate::store::keys::{self, KeyError};

fn blob(namespace: &str, content: &FilesetContent) -> Result<BlobRef, KeyError> {
    let digest = content
        .digest
        .strip_prefix("sha256:")
        .unwrap_or(&content.digest);
    Ok(BlobRef {
        fileset: content.fileset.clone(),
        key: keys::fileset(namespace, digest)?,
        sha256: digest.to_owned(),
        subpath: content.path.clone(),
    })
}

/// The staging plan for the snapshot's pinned Fileset digests, with the store keys the
/// controller's grants are issued for.
pub fn stage_plan(snapshot: &Snapshot) -> Result<StagePlan, KeyError> {
    let namespace = &snapshot.namespace;
    let base = snapshot
        .workdir
        .base
        .as_ref()
        .map(|c| blob(namespace, c))
        .transpose()?;
    let mounts = snapshot
        .workdir
        .mounts
        .iter()
        .map(|m| {
            Ok(MountRef {
                blob: blob(namespace, &m.content)?,
                mount_path: m.mount_path.clone(),
            })
        })
        .collect::<Result<_, KeyError>>()?;
    Ok(StagePlan { base, mounts })
}

/// The agent's environment from the snapshot alone: the merged plain variables. Bound secrets
/// come on top, from wherever the backend keeps them. The extension is not the agent's
/// business: it runs after the agent, as its own step.
pub fn plain_agent_env(snapshot: &Snapshot) -> Vec<(String, String)> {
    snapshot.plain_env().into_iter().collect()
}
