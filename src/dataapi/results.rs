//! An execution's results as the data API lists them, and the refusal when one is asked for that is not there.
//!
//! Pure. An execution that has ended lists the results its status records, each with the
//! sha256 the runner computed while uploading it; one still running lists what the store holds
//! so far (results are write-once and appear whole), without digests, which come with the end
//! of the run.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::status::{Refusal, Subject};
use crate::api::data::{
    AgentExecutionResults, DATA_API_VERSION, EXECUTIONS_RESOURCE, JSON_CONTENT_TYPE, RESULTS_KIND,
    RESULTS_SUBRESOURCE, ResultItem, TAR_GZ_CONTENT_TYPE,
};
use crate::api::{AgentExecution, Phase};
use crate::store::Listed;
use crate::store::keys::ResultName;

/// The content type a result is served with.
pub fn content_type(result: ResultName) -> &'static str {
    if result.is_archive() {
        TAR_GZ_CONTENT_TYPE
    } else {
        JSON_CONTENT_TYPE
    }
}

/// Whether the execution's results are final: it reached a terminal phase.
pub fn is_complete(execution: &AgentExecution) -> bool {
    phase(execution).is_some_and(Phase::is_terminal)
}

fn phase(execution: &AgentExecution) -> Option<Phase> {
    execution.status.as_ref().and_then(|s| s.phase)
}

/// The listing of `execution`'s results: the recorded ones once it has ended, else `stored`,
/// the objects under its results prefix in the store.
pub fn listing(execution: &AgentExecution, stored: &[Listed]) -> AgentExecutionResults {
    let complete = is_complete(execution);
    let results = if complete {
        execution
            .status
            .iter()
            .flat_map(|s| &s.results)
            .filter_map(|entry| {
                let name = ResultName::parse(&entry.name)?;
                Some(ResultItem {
                    name: entry.name.clone(),
                    size: entry.size,
                    sha256: Some(entry.sha256.clone()),
                    content_type: content_type(name).to_owned(),
                })
            })
            .collect()
    } else {
        stored
            .iter()
            .filter_map(|object| {
                let name = ResultName::parse(object.key.rsplit('/').next()?)?;
                Some(ResultItem {
                    name: name.as_str().to_owned(),
                    size: object.size,
                    sha256: None,
                    content_type: content_type(name).to_owned(),
                })
            })
            .collect()
    };
    AgentExecutionResults {
        api_version: DATA_API_VERSION.to_owned(),
        kind: RESULTS_KIND.to_owned(),
        metadata: ObjectMeta {
            name: execution.metadata.name.clone(),
            namespace: execution.metadata.namespace.clone(),
            uid: execution.metadata.uid.clone(),
            creation_timestamp: execution.metadata.creation_timestamp.clone(),
            ..ObjectMeta::default()
        },
        phase: phase(execution),
        complete,
        results,
    }
}

/// The result called `name` in `listing` with its parsed name, or a 404 that says which
/// results there are (and, while the run goes on, that the rest are not saved yet).
pub fn find<'a>(
    listing: &'a AgentExecutionResults,
    name: &str,
) -> Result<(&'a ResultItem, ResultName), Refusal> {
    let found = ResultName::parse(name)
        .and_then(|parsed| Some((listing.results.iter().find(|r| r.name == name)?, parsed)));
    if let Some(found) = found {
        return Ok(found);
    }
    let execution = listing.metadata.name.as_deref().unwrap_or_default();
    let saved: Vec<&str> = listing.results.iter().map(|r| r.name.as_str()).collect();
    let message = if listing.complete {
        let phase = listing.phase.map(|p| format!("{p:?}")).unwrap_or_default();
        match saved.as_slice() {
            [] => format!(
                "execution {execution:?} has no result {name:?}: it ended {phase} without saving any"
            ),
            _ => format!(
                "execution {execution:?} has no result {name:?}; its results are {}",
                saved.join(", ")
            ),
        }
    } else {
        let phase = listing
            .phase
            .map_or("Pending".to_owned(), |p| format!("{p:?}"));
        let known = if ResultName::parse(name).is_some() {
            format!("result {name:?} is not saved yet")
        } else {
            let all: Vec<&str> = ResultName::ALL.iter().map(|r| r.as_str()).collect();
            format!(
                "there is no result {name:?} (results are {})",
                all.join(", ")
            )
        };
        let so_far = match saved.as_slice() {
            [] => "none is saved yet".to_owned(),
            _ => format!("saved so far: {}", saved.join(", ")),
        };
        format!("execution {execution:?} is {phase}: {known}; {so_far}")
    };
    let resource = format!("{EXECUTIONS_RESOURCE}/{RESULTS_SUBRESOURCE}");
    Err(Refusal::not_found(
        Subject {
            resource: &resource,
            name: execution,
        },
        message,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AgentExecutionStatus, ResultEntry};

    fn execution(phase: Option<Phase>, results: &[(&str, u64)]) -> AgentExecution {
        let mut execution = AgentExecution::new("calc", Default::default());
        execution.metadata.namespace = Some("team-a".into());
        execution.metadata.uid = Some("uid-1".into());
        execution.status = Some(AgentExecutionStatus {
            phase,
            results: results
                .iter()
                .map(|(name, size)| ResultEntry {
                    name: (*name).into(),
                    size: *size,
                    sha256: format!("{name}-sha"),
                })
                .collect(),
            ..Default::default()
        });
        execution
    }

    fn stored(names: &[&str]) -> Vec<Listed> {
        names
            .iter()
            .map(|name| Listed {
                key: format!("results/team-a/calc/uid-1/{name}"),
                size: 7,
                last_modified: jiff::Timestamp::UNIX_EPOCH,
            })
            .collect()
    }

    #[test]
    fn an_ended_run_lists_its_recorded_results_with_their_digests() {
        let done = execution(
            Some(Phase::Succeeded),
            &[
                ("input_workdir", 30),
                ("run_result", 313),
                ("manifest.json", 732),
            ],
        );
        let listing = listing(&done, &stored(&["input_workdir", "stray"]));
        assert!(listing.complete);
        assert_eq!(listing.kind, "AgentExecutionResults");
        assert_eq!(listing.metadata.uid.as_deref(), Some("uid-1"));
        assert_eq!(
            listing.results[1],
            ResultItem {
                name: "run_result".into(),
                size: 313,
                sha256: Some("run_result-sha".into()),
                content_type: "application/json".into(),
            }
        );
        assert_eq!(listing.results[0].content_type, "application/gzip");
        let (item, name) = find(&listing, "manifest.json").unwrap();
        assert_eq!((item.size, name), (732, ResultName::Manifest));
    }

    #[test]
    fn a_missing_result_of_an_ended_run_is_a_404_listing_the_valid_names() {
        let done = execution(
            Some(Phase::Failed),
            &[("input_workdir", 30), ("run_error", 90)],
        );
        let listing = listing(&done, &[]);
        for asked in ["run_result", "nonsense"] {
            let refusal = find(&listing, asked).unwrap_err();
            assert_eq!(refusal.code, 404);
            assert_eq!(
                refusal.status.message.unwrap(),
                format!(
                    "execution \"calc\" has no result {asked:?}; its results are input_workdir, run_error"
                )
            );
        }
        let nothing = listing_of(execution(Some(Phase::Failed), &[]));
        assert!(
            find(&nothing, "run_result")
                .unwrap_err()
                .status
                .message
                .unwrap()
                .contains("ended Failed without saving any")
        );
    }

    fn listing_of(execution: AgentExecution) -> AgentExecutionResults {
        listing(&execution, &[])
    }

    #[test]
    fn a_running_execution_lists_what_is_stored_and_says_what_is_not_saved_yet() {
        let running = execution(Some(Phase::Running), &[]);
        let listing = listing(&running, &stored(&["input_workdir"]));
        assert!(!listing.complete);
        assert_eq!(listing.results.len(), 1);
        assert_eq!(listing.results[0].sha256, None);
        assert_eq!(listing.results[0].size, 7);
        assert!(find(&listing, "input_workdir").is_ok());
        let refusal = find(&listing, "output_workdir").unwrap_err();
        assert_eq!(refusal.code, 404);
        assert_eq!(
            refusal.status.message.unwrap(),
            "execution \"calc\" is Running: result \"output_workdir\" is not saved yet; saved so far: input_workdir"
        );
        let starting = listing_of(execution(None, &[]));
        let message = find(&starting, "bogus")
            .unwrap_err()
            .status
            .message
            .unwrap();
        assert!(message.starts_with("execution \"calc\" is Pending: there is no result \"bogus\" (results are input_workdir, "), "{message}");
        assert!(message.ends_with("none is saved yet"), "{message}");
    }
}
