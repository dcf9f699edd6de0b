//! How executions are shown, the same for both backends: records, tables, results and downloads.

use std::io::Write;
use std::path::PathBuf;

use futures::StreamExt;
use serde_json::json;

use super::context::store_error;
use super::output::{CliError, Format, human_size, print_ok};
use crate::local::ExecutionRecord;
use crate::store::Store;
use crate::store::keys::{AnyResult, ExecutionId, ResultName};

/// Human summary of a record.
pub fn print_record(record: &ExecutionRecord) -> String {
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
    if let Some(image_id) = &record.image_id {
        out.push_str(&format!("\nimage: {image_id}"));
    }
    if let Some(reason) = &record.reason {
        out.push_str(&format!("\nreason: {reason}"));
    }
    if let Some(message) = &record.message {
        out.push_str(&format!("\nmessage: {message}"));
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

/// Prints a finished record; a run that did not succeed is a failed command (exit code 1).
pub fn record_outcome(
    format: Format,
    record: &ExecutionRecord,
    human: impl FnOnce() -> String,
) -> Result<(), CliError> {
    if record.phase == crate::api::Phase::Succeeded {
        print_ok(format, "execution", record, human);
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
        println!("{}", human());
    }
    Err(CliError {
        code: "execution_failed",
        message,
        details: Some((
            "execution",
            serde_json::to_value(record).expect("records serialize"),
        )),
    })
}

/// The executions as a table, or as JSON.
pub fn print_executions(format: Format, all: &[ExecutionRecord]) {
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
pub fn print_results(format: Format, record: &ExecutionRecord) {
    print_ok(format, "results", &record.results, || {
        let mut out = format!("{:<18} {:>10}  SHA256", "NAME", "SIZE");
        for r in &record.results {
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
pub fn parse_result_name(result: &str) -> Result<AnyResult, CliError> {
    AnyResult::parse(result).ok_or_else(|| {
        let known: Vec<&str> = ResultName::ALL.iter().map(|r| r.as_str()).collect();
        CliError::argument(format!(
            "result {result:?} does not exist; results are {}, or one the execution's extension \
             declares",
            known.join(", ")
        ))
    })
}

/// Streams one stored result of `execution` into `file` (by default the result's name in the
/// current directory).
pub async fn download(
    store: &Store,
    execution: &ExecutionId,
    result_name: AnyResult,
    file: Option<PathBuf>,
    format: Format,
) -> Result<(), CliError> {
    let key = result_name
        .key(execution)
        .map_err(|e| store_error(e.into()))?;
    let mut body = store.get(&key).await.map_err(store_error)?.into_stream();
    let file = file.unwrap_or_else(|| PathBuf::from(result_name.file_name()));
    let io_error =
        |e: std::io::Error| CliError::new("io_error", format!("{}: {e}", file.display()));
    let mut out = std::fs::File::create(&file).map_err(io_error)?;
    let mut size = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk =
            chunk.map_err(|e| CliError::new("store_error", format!("reading {key}: {e}")))?;
        out.write_all(&chunk).map_err(io_error)?;
        size += chunk.len() as u64;
    }
    out.sync_all().map_err(io_error)?;
    let answer = json!({"execution": execution.name, "result": result_name.as_str(), "file": file, "size": size});
    print_ok(format, "download", &answer, || {
        format!("wrote {} ({})", file.display(), human_size(size))
    });
    Ok(())
}
