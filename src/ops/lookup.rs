//! Finding what a command names, and a "not found" that says what does exist: the names there are (or that there are none, and how to make one).

use super::backend::{Backend, Deployments, Schedules};
use super::{Error, ErrorCode};
use crate::api::AgentDeployment;
use crate::local::ObjectKind;
use crate::ops::Execution;

/// At most this many names are listed in a "not found"; the rest are counted.
const LISTED: usize = 10;

/// What a command looks up by name, for "not found" messages.
#[derive(Clone, Debug)]
pub struct Wanted {
    /// The kind, as a message names it (`Agent`, `execution`, `result`).
    pub kind: String,
    /// The plural, as in "the Agents in namespace …".
    pub plural: String,
    /// Where the names were looked for (`namespace "default"`, `execution calc-1`).
    pub place: String,
    /// How to make one, for when none exist (`apply one with errand apply -f FILE`).
    pub create: String,
}

impl Wanted {
    /// A `kind` (plural `plural`) looked for in `place`, made as `create` says.
    pub fn new(kind: &str, plural: &str, place: String, create: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            place,
            create: create.to_owned(),
        }
    }

    /// An object of `kind` in `namespace` (for the cluster-scoped kinds, the cluster).
    pub fn object(kind: ObjectKind, namespace: &str) -> Self {
        let place = match kind {
            ObjectKind::Runtime | ObjectKind::Extension => "the cluster".to_owned(),
            _ => format!("namespace {namespace:?}"),
        };
        let create = match kind {
            ObjectKind::Fileset => "push one with `errand filesets push NAME DIR`",
            _ => "apply one with `errand apply -f FILE`",
        };
        Self::new(kind.kind(), &format!("{}s", kind.kind()), place, create)
    }

    /// What follows "not found" in a message: the names that exist (sorted, at most
    /// [`LISTED`] of them, then how many more), or that none do and how to make one.
    pub fn what_exists(&self, existing: &[String]) -> String {
        let mut names: Vec<&str> = existing.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        match names.len() {
            0 => format!(
                "there are no {} in {} yet ({})",
                self.plural, self.place, self.create
            ),
            n if n <= LISTED => format!(
                "the {} in {}: {}",
                self.plural,
                self.place,
                names.join(", ")
            ),
            n => format!(
                "the {} in {}: {} and {} more",
                self.plural,
                self.place,
                names[..LISTED].join(", "),
                n - LISTED
            ),
        }
    }

    /// A `not_found` error for `name` (`{kind} "{name}" not found in {place}`) that lists what
    /// does exist.
    pub fn not_found(&self, name: &str, existing: &[String]) -> Error {
        Error::new(
            ErrorCode::NotFound,
            format!(
                "{} {name:?} not found in {}; {}",
                self.kind,
                self.place,
                self.what_exists(existing)
            ),
        )
    }

    /// `error` unchanged unless it is `not_found`; then `not_found(name)` with the names
    /// `existing` lists (when listing them fails, the original error).
    pub fn listing(&self, error: Error, name: &str, existing: Result<Vec<String>, Error>) -> Error {
        match (error.code, existing) {
            (ErrorCode::NotFound, Ok(existing)) => self.not_found(name, &existing),
            _ => error,
        }
    }
}

/// The names of the objects of `kind` in `backend`'s namespace (or cluster).
pub async fn object_names(backend: &dyn Backend, kind: ObjectKind) -> Result<Vec<String>, Error> {
    if kind == ObjectKind::Fileset {
        let filesets = backend.filesets().await?;
        return Ok(filesets
            .into_iter()
            .filter_map(|f| f.metadata.name)
            .collect());
    }
    let objects = backend.objects(kind).await?;
    Ok(objects
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
        .collect())
}

/// What a deployment lookup wants: an AgentDeployment of `namespace`.
fn deployment_wanted(namespace: &str) -> Wanted {
    Wanted::new(
        "AgentDeployment",
        "AgentDeployments",
        format!("namespace {namespace:?}"),
        "serve an Agent with `errand deploy NAME --agent AGENT`",
    )
}

/// `error` unchanged unless it is `not_found`; then the names `existing` gives (read only
/// then) are listed with it.
async fn listing_missing(
    wanted: Wanted,
    name: &str,
    error: Error,
    existing: impl std::future::Future<Output = Result<Vec<String>, Error>>,
) -> Error {
    if error.code != ErrorCode::NotFound {
        return error;
    }
    wanted.listing(error, name, existing.await)
}

/// `error`, from an operation on deployment `name`, listing the deployments of `namespace` when
/// it is `not_found`.
pub async fn missing_deployment(
    deployments: &dyn Deployments,
    namespace: &str,
    name: &str,
    error: Error,
) -> Error {
    listing_missing(deployment_wanted(namespace), name, error, async {
        let all = deployments.deployments().await?;
        Ok(all.into_iter().filter_map(|d| d.metadata.name).collect())
    })
    .await
}

/// The deployment `name` of `namespace`; when there is none, a `not_found` listing those there are.
pub async fn deployment(
    deployments: &dyn Deployments,
    namespace: &str,
    name: &str,
) -> Result<AgentDeployment, Error> {
    match deployments.deployment(name).await {
        Ok(deployment) => Ok(deployment),
        Err(error) => Err(missing_deployment(deployments, namespace, name, error).await),
    }
}

/// `error`, from an operation on schedule `name`, listing the schedules of `namespace` when it
/// is `not_found`.
pub async fn missing_schedule(
    schedules: &dyn Schedules,
    namespace: &str,
    name: &str,
    error: Error,
) -> Error {
    let wanted = Wanted::new(
        "AgentSchedule",
        "AgentSchedules",
        format!("namespace {namespace:?}"),
        "create one with `errand schedule create NAME --cron EXPR --agent AGENT`",
    );
    listing_missing(wanted, name, error, async {
        let all = schedules.schedules().await?;
        Ok(all
            .into_iter()
            .filter_map(|s| s.schedule.metadata.name)
            .collect())
    })
    .await
}

/// The record of the execution named `name`, or of the only one whose name starts with it.
/// An ambiguous prefix names each execution it matches with its phase, newest first.
pub async fn find(backend: &dyn Backend, name: &str) -> Result<Execution, Error> {
    let names = backend.execution_names().await?;
    let full = match find_by_prefix(&names, name, backend.namespace()) {
        Ok(full) => full,
        Err(error) if error.code == ErrorCode::AmbiguousName => {
            return Err(match backend.executions().await {
                Ok(records) => ambiguous(name, backend.namespace(), records),
                Err(_) => error,
            });
        }
        Err(error) => return Err(error),
    };
    backend.execution(&full).await
}

/// `prefix` matches several of `records`: each, newest first, with its phase and when it was
/// created, and how to name one.
fn ambiguous(prefix: &str, namespace: &str, mut records: Vec<Execution>) -> Error {
    records.retain(|r| r.name.starts_with(prefix));
    records.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.name.cmp(&b.name)));
    let matches: Vec<String> = records
        .iter()
        .map(|r| {
            let created = r.created_at.strftime("%Y-%m-%d %H:%M:%S");
            format!("{} ({:?}, created {created})", r.name, r.phase)
        })
        .collect();
    let newest = records.first().map_or(prefix, |r| r.name.as_str());
    Error::new(
        ErrorCode::AmbiguousName,
        format!(
            "{prefix:?} is ambiguous in namespace {namespace:?}: it matches {}, newest first; \
             give more of the name, or the whole name (`{newest}`)",
            matches.join(", ")
        ),
    )
}

/// `prefix` itself when it is one of `names`, else the only name starting with it.
pub fn find_by_prefix(names: &[String], prefix: &str, namespace: &str) -> Result<String, Error> {
    if names.iter().any(|n| n == prefix) {
        return Ok(prefix.to_owned());
    }
    let matches: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with(prefix))
        .collect();
    match matches.as_slice() {
        [] => {
            let wanted = Wanted::new(
                "execution",
                "executions",
                format!("namespace {namespace:?}"),
                "start one with `errand execute`",
            );
            Err(Error::new(
                ErrorCode::NotFound,
                format!(
                    "execution {prefix:?} (or a name starting with it) not found in {}; {}",
                    wanted.place,
                    wanted.what_exists(names)
                ),
            ))
        }
        [one] => Ok((*one).to_owned()),
        many => Err(Error::new(
            ErrorCode::AmbiguousName,
            format!(
                "{prefix:?} is ambiguous in namespace {namespace:?}: it matches {}; give more of \
                 the name, or the whole name",
                many.join(", ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{Wanted, find_by_prefix};

    #[test]
    fn a_not_found_lists_what_exists_or_how_to_make_one() {
        const AGENT: fn() -> Wanted = || Wanted::object(crate::local::ObjectKind::Agent, "default");
        let none = AGENT().not_found("calculator", &[]);
        assert_eq!(none.code, "not_found");
        assert_eq!(
            none.message,
            "Agent \"calculator\" not found in namespace \"default\"; there are no Agents in \
             namespace \"default\" yet (apply one with `errand apply -f FILE`)"
        );
        let some = AGENT().not_found("calc", &["b".into(), "a".into()]);
        assert_eq!(
            some.message,
            "Agent \"calc\" not found in namespace \"default\"; the Agents in namespace \"default\": a, b"
        );
        let many: Vec<String> = (0..12).map(|i| format!("a{i:02}")).collect();
        assert!(
            AGENT()
                .not_found("x", &many)
                .message
                .ends_with("a00, a01, a02, a03, a04, a05, a06, a07, a08, a09 and 2 more")
        );
    }

    #[test]
    fn an_execution_is_found_by_its_name_or_an_unambiguous_prefix() {
        let names: Vec<String> = ["calc-1", "calc-12", "other"].map(str::to_owned).to_vec();
        let find = |prefix: &str| find_by_prefix(&names, prefix, "team-a");
        assert_eq!(find("calc-1").unwrap(), "calc-1", "an exact name wins");
        assert_eq!(find("oth").unwrap(), "other");
        let ambiguous = find("calc").unwrap_err();
        assert_eq!(ambiguous.code, "ambiguous_name");
        assert_eq!(
            ambiguous.message,
            "\"calc\" is ambiguous in namespace \"team-a\": it matches calc-1, calc-12; give more \
             of the name, or the whole name"
        );
        let missing = find("nope").unwrap_err();
        assert_eq!(missing.code, "not_found");
        assert_eq!(
            missing.message,
            "execution \"nope\" (or a name starting with it) not found in namespace \"team-a\"; \
             the executions in namespace \"team-a\": calc-1, calc-12, other"
        );
    }
}
