//! `list` with its filters (`--state`, `--tag` patterns, `--limit`), `ps` (the executions still going) and `tag set`.

use crate::api::Phase;
use crate::api::tags::{TagPattern, check_tags};
use crate::cli::output::{Format, print_ok};
use crate::cli::show::{print_executions, print_record};
use crate::ops::Error;
use crate::ops::Execution;
use crate::ops::backend::{Backend, ExecutionFilter};
use crate::ops::lookup::find;

/// The phases an execution goes through before it ends.
const ACTIVE: [Phase; 4] = [
    Phase::Pending,
    Phase::Queued,
    Phase::Starting,
    Phase::Running,
];

/// Flags of `errand list` (and, without `--state`, of `errand ps`).
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only executions in this phase (`created`, `pending`, `queued`, `starting`, `running`,
    /// `succeeded`, `failed`, `cancelled`, in any case, or `active` for pending to running);
    /// repeatable, any of them.
    #[arg(long = "state", value_name = "PHASE", value_parser = parse_state)]
    pub states: Vec<Vec<Phase>>,
    /// Only executions with this tag, or with a tag under `PREFIX` for `PREFIX.*`; repeatable,
    /// all of them. On a cluster these are label selectors.
    #[arg(long = "tag", value_name = "TAG|PREFIX.*", value_parser = TagPattern::parse)]
    pub tags: Vec<TagPattern>,
    /// At most this many, the newest.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

/// A `--state` that names no phase.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{0:?} is not a phase: {names} or active", names = phase_names())]
pub struct UnknownState(String);

fn phase_names() -> String {
    let names: Vec<String> = Phase::ALL
        .iter()
        .map(|p| p.as_str().to_lowercase())
        .collect();
    names.join(", ")
}

fn parse_state(value: &str) -> Result<Vec<Phase>, UnknownState> {
    if value.eq_ignore_ascii_case("active") {
        return Ok(ACTIVE.to_vec());
    }
    Phase::parse(value)
        .map(|p| vec![p])
        .ok_or_else(|| UnknownState(value.to_owned()))
}

/// The newest `limit` of `records` (all without a limit), oldest first.
fn newest(mut records: Vec<Execution>, limit: Option<usize>) -> Vec<Execution> {
    records.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.name.cmp(&b.name)));
    if let Some(limit) = limit {
        records.drain(..records.len().saturating_sub(limit));
    }
    records
}

impl ListArgs {
    /// `errand list`: the executions the filters select.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let args = self;
        let filter = ExecutionFilter {
            phases: args.states.concat(),
            tags: args.tags.clone(),
        };
        let records = newest(backend.find_executions(&filter).await?, args.limit);
        print_executions(format, &records);
        Ok(())
    }
}

impl ListArgs {
    /// `errand ps`: the executions that have not ended.
    pub async fn ps(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let args = self;
        if !args.states.is_empty() {
            return Err(Error::argument(
                "ps lists the executions that have not ended; use `errand list --state` for others",
            ));
        }
        let filter = ExecutionFilter {
            phases: ACTIVE.to_vec(),
            tags: args.tags.clone(),
        };
        let records = newest(backend.find_executions(&filter).await?, args.limit);
        print_executions(format, &records);
        Ok(())
    }
}

/// `errand tag ...`
#[derive(Debug, clap::Subcommand)]
pub enum TagAction {
    /// Replace the execution's tags (none clears them).
    Set {
        /// Execution name or unambiguous prefix.
        name: String,
        /// The tags: dot-separated segments of lowercase letters, digits and inner `-`.
        tags: Vec<String>,
    },
}

impl TagAction {
    /// Runs the subcommand.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        match self {
            TagAction::Set { name, tags } => tag_set(backend, name, tags, format).await,
        }
    }
}

/// `errand tag set NAME TAG...`: replaces the execution's tags (none clears them).
async fn tag_set(
    backend: &dyn Backend,
    name: &str,
    tags: &[String],
    format: Format,
) -> Result<(), Error> {
    let tags = check_tags(tags).map_err(|e| Error::argument(e.to_string()))?;
    let record = find(backend, name).await?;
    let record = backend.set_tags(&record, &tags).await?;
    let view = crate::cli::answers::ExecutionView::of(record);
    print_ok(format, "execution", &view, || print_record(&view.record));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_name_phases_or_every_active_one() {
        assert_eq!(parse_state("Running").unwrap(), [Phase::Running]);
        assert_eq!(parse_state("active").unwrap(), ACTIVE);
        assert_eq!(
            parse_state("done").unwrap_err().to_string(),
            "\"done\" is not a phase: created, pending, queued, starting, running, succeeded, failed, cancelled or active"
        );
    }
}
