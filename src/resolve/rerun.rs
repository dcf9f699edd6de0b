//! A rerun (`spec.rerunOf`): the snapshot an earlier execution ran from, checked against the digest it recorded, with its agent image pinned to the digest the kubelet reported.

use super::problems::Problems;
use super::snapshot::{SNAPSHOT_VERSION, Snapshot};
use super::{InvalidSpec, check_lifetime};
use crate::api::{AgentExecutionSpec, RERUN_TAKES_THE_SNAPSHOT};

/// What an earlier execution left for a rerun, as a backend read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RerunSource {
    /// The digest the execution's status (or local record) gives its snapshot; `None` when it
    /// never got one (refused before it was resolved).
    pub digest: Option<String>,
    /// The stored snapshot document; `None` when it is gone.
    pub snapshot: Option<Vec<u8>>,
    /// Where the snapshot is kept, for messages (`ConfigMap "x"`, a file).
    pub location: String,
    /// The agent's image.
    pub image: ImageRun,
}

/// What is known of the image an earlier run's agent ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ImageRun {
    /// The image by digest, as the kubelet reported it (`imageID`).
    Reported(String),
    /// A pod's agent never started, so no digest was reported.
    #[default]
    NotReported,
    /// The run had no image: a local run runs the agent's command on this machine.
    NoImage,
}

/// The snapshot a rerun of `source` (the execution `spec.rerunOf` names; `None` when there is
/// none) runs from, or every problem with it.
pub fn resolve_rerun(
    namespace: &str,
    spec: &AgentExecutionSpec,
    source: Option<&RerunSource>,
) -> Result<Snapshot, InvalidSpec> {
    let mut problems = Problems::default();
    let name = spec.rerun_of.as_ref().map_or("", |r| r.name.as_str());
    if spec.agent_ref.is_some() || spec.agent.is_some() {
        problems.push(
            "spec",
            "exactly one of agentRef, agent or rerunOf must be set",
        );
    }
    for (field, set) in [
        ("input", !spec.input.is_empty()),
        ("environmentRef", spec.environment_ref.is_some()),
        ("environment", spec.environment.is_some()),
        ("workdir", spec.workdir.is_some()),
        ("extension", spec.extension.is_some()),
        ("queueName", spec.queue_name.is_some()),
        ("startTimeoutSeconds", spec.start_timeout_seconds.is_some()),
        ("autoTelemetry", spec.auto_telemetry),
    ] {
        if set {
            problems.push(format!("spec.{field}"), RERUN_TAKES_THE_SNAPSHOT);
        }
    }
    check_lifetime(spec, &mut problems);
    let snapshot = match source {
        None => {
            problems.push(
                "spec.rerunOf.name",
                format!(
                    "execution {name:?} not found in namespace {namespace:?}: its snapshot went \
                     with it (deleted, or expired after ttlSecondsAfterFinished), so there is \
                     nothing to rerun"
                ),
            );
            None
        }
        Some(source) => stored_snapshot(namespace, name, source, &mut problems),
    };
    match snapshot {
        Some(snapshot) if problems.is_empty() => Ok(snapshot),
        _ => Err(problems.into_error()),
    }
}

/// The snapshot `source` holds, checked and pinned; `None` with problems when it cannot serve.
fn stored_snapshot(
    namespace: &str,
    name: &str,
    source: &RerunSource,
    problems: &mut Problems,
) -> Option<Snapshot> {
    let field = "spec.rerunOf.name";
    let Some(recorded) = &source.digest else {
        problems.push(
            field,
            format!("execution {name:?} has no snapshot: it was refused before it was resolved"),
        );
        return None;
    };
    let Some(bytes) = &source.snapshot else {
        problems.push(
            field,
            format!(
                "the snapshot of execution {name:?} ({}) is gone, so there is nothing to rerun",
                source.location
            ),
        );
        return None;
    };
    let mut snapshot: Snapshot = match serde_json::from_slice(bytes) {
        Ok(snapshot) => snapshot,
        Err(e) => {
            problems.push(
                field,
                format!(
                    "the snapshot of execution {name:?} ({}) is unreadable: {e}",
                    source.location
                ),
            );
            return None;
        }
    };
    let digest = snapshot.digest();
    if &digest != recorded
        || snapshot.version != SNAPSHOT_VERSION
        || snapshot.namespace != namespace
    {
        problems.push(
            field,
            format!(
                "the snapshot of execution {name:?} ({}) is not the one it ran from: digest \
                 {digest} (version {}, namespace {:?}), recorded {recorded}",
                source.location, snapshot.version, snapshot.namespace
            ),
        );
        return None;
    }
    match &source.image {
        ImageRun::NoImage => {}
        ImageRun::NotReported => {
            problems.push(
                field,
                format!(
                    "execution {name:?} has no image digest (status.imageID): its agent never \
                     started, so a rerun could not be pinned to what it ran; run it anew with \
                     errand execute"
                ),
            );
            return None;
        }
        ImageRun::Reported(image_id) => match pin_image(&snapshot.agent.runtime.image, image_id) {
            Ok(pinned) => snapshot.agent.runtime.image = pinned,
            Err(unpinnable) => {
                problems.push(field, unpinnable.to_string());
                return None;
            }
        },
    }
    Some(snapshot)
}

/// An image ID the kubelet reported that does not end in a sha256 digest, so nothing can pin it.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("the image digest {image_id:?} the kubelet reported is not sha256:<64 hex digits>")]
pub struct UnpinnableImage {
    /// What the kubelet reported.
    pub image_id: String,
}

/// `image` pinned to what the kubelet reported in `image_id`. A registry digest
/// (`repo@sha256:<hex>`, the manifest the node pulled) pins the repository of `image`, without
/// its tag or digest: `repo@sha256:<hex>`. A bare image ID (`sha256:<hex>`: an image the node
/// holds under no registry digest, such as one loaded into it directly) is itself the pin; only
/// a node holding that image can run it.
pub fn pin_image(image: &str, image_id: &str) -> Result<String, UnpinnableImage> {
    let (repository_digest, digest) = match image_id.rsplit_once('@') {
        Some((_, digest)) => (true, digest),
        None => (false, image_id),
    };
    let valid = digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if !valid {
        return Err(UnpinnableImage {
            image_id: image_id.to_owned(),
        });
    }
    if !repository_digest {
        return Ok(digest.to_owned());
    }
    let repository = image.split_once('@').map_or(image, |(repo, _)| repo);
    // A tag is a `:` after the last `/` (a `:` before it belongs to a registry's port).
    let repository = match repository.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => repository,
    };
    Ok(format!("{repository}@{digest}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Reference;
    use crate::testing::NS;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn rerun_spec() -> AgentExecutionSpec {
        AgentExecutionSpec {
            rerun_of: Some(Reference::named("first")),
            ..AgentExecutionSpec::default()
        }
    }

    fn source(snapshot: &Snapshot, image: ImageRun) -> RerunSource {
        RerunSource {
            digest: Some(snapshot.digest()),
            snapshot: Some(snapshot.canonical_json()),
            location: "ConfigMap \"first-snapshot\"".to_owned(),
            image,
        }
    }

    fn problems(result: Result<Snapshot, InvalidSpec>) -> Vec<String> {
        result
            .expect_err("refused")
            .problems
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_rerun_runs_the_stored_snapshot_with_the_image_pinned_to_the_reported_digest() {
        let original = Snapshot::test();
        let reported = format!("registry.example:5000/team/agent@{DIGEST}");
        let rerun = resolve_rerun(
            NS,
            &rerun_spec(),
            Some(&source(&original, ImageRun::Reported(reported.clone()))),
        )
        .unwrap();
        let mut expected = original.clone();
        expected.agent.runtime.image = pin_image(&original.agent.runtime.image, &reported).unwrap();
        assert_eq!(rerun, expected);
        assert!(rerun.agent.runtime.image.ends_with(&format!("@{DIGEST}")));

        // Locally there is no image: the snapshot is run as it was.
        let local = resolve_rerun(
            NS,
            &rerun_spec(),
            Some(&source(&original, ImageRun::NoImage)),
        );
        assert_eq!(local.unwrap(), original);
    }

    #[test]
    fn a_rerun_is_refused_naming_what_is_missing() {
        let snapshot = Snapshot::test();
        let gone = RerunSource {
            snapshot: None,
            ..source(&snapshot, ImageRun::NoImage)
        };
        let tampered = RerunSource {
            digest: Some(DIGEST.to_owned()),
            ..source(&snapshot, ImageRun::NoImage)
        };
        for (source, expected) in [
            (
                None,
                "spec.rerunOf.name: execution \"first\" not found in namespace",
            ),
            (
                Some(&gone),
                "spec.rerunOf.name: the snapshot of execution \"first\" (ConfigMap \"first-snapshot\") is gone",
            ),
            (Some(&tampered), "is not the one it ran from"),
            (
                Some(&source(&snapshot, ImageRun::NotReported)),
                "has no image digest (status.imageID)",
            ),
        ] {
            let problems = problems(resolve_rerun(NS, &rerun_spec(), source));
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].contains(expected), "{problems:?}");
        }
    }

    #[test]
    fn a_rerun_sets_nothing_the_snapshot_holds() {
        let snapshot = Snapshot::test();
        let spec = AgentExecutionSpec {
            agent_ref: Some(Reference::named("other")),
            input: "new input".to_owned(),
            queue_name: Some("q".to_owned()),
            ..rerun_spec()
        };
        let problems = problems(resolve_rerun(
            NS,
            &spec,
            Some(&source(&snapshot, ImageRun::NoImage)),
        ));
        assert_eq!(
            problems,
            [
                "spec: exactly one of agentRef, agent or rerunOf must be set".to_owned(),
                format!("spec.input: {RERUN_TAKES_THE_SNAPSHOT}"),
                format!("spec.queueName: {RERUN_TAKES_THE_SNAPSHOT}"),
            ]
        );
    }

    #[test]
    fn images_are_pinned_by_their_registry_digest_or_their_bare_image_id() {
        for (image, image_id, pinned) in [
            (
                "agent:1.0",
                format!("docker.io/library/agent@{DIGEST}"),
                format!("agent@{DIGEST}"),
            ),
            ("registry:5000/agent", DIGEST.to_owned(), DIGEST.to_owned()),
            (
                "registry:5000/agent:v2@sha256:ffff",
                format!("x@{DIGEST}"),
                format!("registry:5000/agent@{DIGEST}"),
            ),
        ] {
            assert_eq!(pin_image(image, &image_id).unwrap(), pinned);
        }
        assert!(pin_image("agent", "sha256:short").is_err());
        assert!(pin_image("agent", "").is_err());
    }
}
