//! How executions are shown, the same for both backends: records, tables and results.

use super::answers::ExecutionView;
use super::output::{Format, human_size, print_ok};
use crate::api::ResultEntry;
use crate::ops::Execution;
use crate::ops::{Error, ErrorCode};
use crate::store::keys::{AnyResult, ResultName};

/// Human summary of a record.
pub fn print_record(record: &Execution) -> String {
    let mut out = format!(
        "execution {}  agent {}  {:?}",
        record.name, record.agent, record.phase
    );
    if let Some(seconds) = record.duration_seconds() {
        out.push_str(&format!("  ({seconds:.2}s)"));
    }
    if let Some(rerun_of) = &record.rerun_of {
        out.push_str(&format!("\nrerun of: {rerun_of}"));
    }
    if !record.tags.is_empty() {
        out.push_str(&format!("\ntags: {}", record.tags.join(", ")));
    }
    if !record.env.is_empty() {
        let env: Vec<String> = record.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!("\nenv: {}", env.join(" ")));
    }
    if let Some(bytes) = record.stdin_bytes {
        out.push_str(&format!("\nstdin: {}", human_size(bytes)));
    }
    if let Some(image_id) = &record.image_id {
        out.push_str(&format!("\nimage: {image_id}"));
    }
    // A success says so in its phase; how anything else ended is spelled out.
    if record.phase != crate::api::Phase::Succeeded {
        if let Some(reason) = &record.reason {
            out.push_str(&format!("\nreason: {reason}"));
        }
        if let Some(message) = &record.message {
            out.push_str(&format!("\nmessage: {message}"));
        }
    }
    if let Some(response) = &record.response {
        out.push_str(&format!("\nresponse: {response}"));
    }
    if !record.results.is_empty() {
        let names: Vec<String> = record
            .results
            .iter()
            .map(|r| format!("{} ({})", r.name, human_size(r.size)))
            .collect();
        out.push_str(&format!("\nresults: {}", names.join(", ")));
    }
    out
}

/// Prints a finished execution; a run that did not succeed is a failed command (exit code 1)
/// whose error carries the execution.
pub fn record_outcome(
    format: Format,
    view: &ExecutionView,
    human: impl FnOnce() -> String,
) -> Result<(), Error> {
    let record = &view.record;
    if record.phase == crate::api::Phase::Succeeded {
        print_ok(format, "execution", view, human);
        return Ok(());
    }
    let message = format!(
        "execution {} ended {:?}{}",
        record.name,
        record.phase,
        record
            .message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default()
    );
    if format == Format::Human {
        crate::cli::output::write_line(human());
    }
    Err(Error {
        code: ErrorCode::ExecutionFailed,
        message,
        details: Some((
            "execution",
            serde_json::to_value(view).expect("records serialize"),
        )),
    })
}

/// The executions as a table, or as JSON.
pub fn print_executions(format: Format, all: &[Execution]) {
    print_ok(format, "executions", &all, || {
        let mut out = format!(
            "{:<32} {:<20} {:<10} {:>9}",
            "NAME", "AGENT", "PHASE", "DURATION"
        );
        for r in all {
            let duration = r
                .duration_seconds()
                .map(|s| format!("{s:.1}s"))
                .unwrap_or_default();
            out.push_str(&format!(
                "\n{:<32} {:<20} {:<10} {:>9}",
                r.name,
                r.agent,
                format!("{:?}", r.phase),
                duration
            ));
        }
        out
    });
}

/// The results of an execution as a table, or as JSON.
pub fn print_results(format: Format, results: &[ResultEntry]) {
    print_ok(format, "results", &results, || {
        let mut out = format!("{:<18} {:>10}  SHA256", "NAME", "SIZE");
        for r in results {
            out.push_str(&format!(
                "\n{:<18} {:>10}  {}",
                r.name,
                human_size(r.size),
                r.sha256
            ));
        }
        out
    });
}

/// The result called `name`, or an error listing the ones that exist.
pub fn parse_result_name(result: &str) -> Result<AnyResult, Error> {
    AnyResult::parse(result).ok_or_else(|| {
        let known: Vec<&str> = ResultName::ALL.iter().map(|r| r.as_str()).collect();
        Error::argument(format!(
            "result {result:?} does not exist; results are {}, or one the execution's extension \
             declares",
            known.join(", ")
        ))
    })
}
