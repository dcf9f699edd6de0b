//! The commands against the local backend on executions that exist: watch, status, tail, results, cancel, delete, list, and the detached supervisor.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use super::context::{Local, Target, record_error, store_error};
use super::execute::supervise_error;
use super::output::{CliError, Format, OutputArgs, print_ok};
use super::show::{
    download, parse_result_name, print_executions, print_record, print_results, record_outcome,
};
use crate::api::contract::Reason;
use crate::local::{ExecutionRecord, RemoveError, remove_execution, results_of, run_prepared};
use crate::runner::StageSettings;
use crate::runner::signals::cancel_on_stop_signal;

/// How often waiting commands look at a record again.
const POLL: Duration = Duration::from_millis(100);
/// How long `cancel` and `delete` wait for a supervisor to exit once its record is final.
const SUPERVISOR_EXIT: Duration = Duration::from_secs(10);

/// `errand status NAME`.
pub fn status(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let record = local.find(name)?;
    print_ok(output.format, "execution", &record, || {
        print_record(&record)
    });
    Ok(())
}

/// `errand list`.
pub fn list(target: &Target, output: OutputArgs) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let records = local.records();
    let all: Vec<ExecutionRecord> = records
        .names(&local.namespace)
        .iter()
        .filter_map(|n| records.read_current(&local.namespace, n).ok())
        .collect();
    print_executions(output.format, &all);
    Ok(())
}

fn log_path(local: &Local, name: &str, stderr: bool) -> PathBuf {
    let file = if stderr { "stderr.log" } else { "stdout.log" };
    local
        .records()
        .dir(&local.namespace, name)
        .join("scratch")
        .join(file)
}

/// `errand tail -n N NAME`: the last lines of the agent's stdout (or stderr).
pub fn tail(
    target: &Target,
    name: &str,
    lines: usize,
    stderr: bool,
    output: OutputArgs,
) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let name = local.find(name)?.name;
    let text = std::fs::read_to_string(log_path(&local, &name, stderr)).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let last: Vec<&str> = all[all.len().saturating_sub(lines)..].to_vec();
    print_ok(
        output.format,
        "logs",
        &json!({"execution": name, "stream": if stderr { "stderr" } else { "stdout" }, "lines": last}),
        || last.join("\n"),
    );
    Ok(())
}

/// `errand watch NAME`: follow the agent's output until the execution ends, then print it.
pub async fn watch(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let name = local.find(name)?.name;
    let records = local.records();
    let mut offset = 0u64;
    loop {
        let record = records
            .read_current(&local.namespace, &name)
            .map_err(record_error)?;
        if output.format == Format::Human {
            offset = copy_new_output(&log_path(&local, &name, false), offset);
        }
        if record.phase.is_terminal() {
            return record_outcome(output.format, &record, || print_record(&record));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Prints what was appended to `path` since `offset`; returns the new offset.
fn copy_new_output(path: &std::path::Path, offset: u64) -> u64 {
    let Ok(mut file) = std::fs::File::open(path) else {
        return offset;
    };
    let mut fresh = Vec::new();
    if file.seek(SeekFrom::Start(offset)).is_err() || file.read_to_end(&mut fresh).is_err() {
        return offset;
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&fresh).and_then(|()| stdout.flush());
    offset + fresh.len() as u64
}

/// `errand results list NAME`.
pub fn results_list(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let record = local.find(name)?;
    print_results(output.format, &record);
    Ok(())
}

/// `errand results download RESULT --execution NAME -o FILE`: streams one result into a file.
pub async fn results_download(
    target: &Target,
    result: &str,
    name: &str,
    file: Option<PathBuf>,
    format: Format,
) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let result_name = parse_result_name(result)?;
    let record = local.find(name)?;
    let (store, execution) = results_of(&record).map_err(store_error)?;
    download(&store, &execution, result_name, file, format).await
}

/// Asks the supervisor of a running execution to stop and waits until it has saved its results.
async fn stop(local: &Local, name: &str) -> Result<ExecutionRecord, CliError> {
    let records = local.records();
    let mut record = records.read(&local.namespace, name).map_err(record_error)?;
    if record.phase.is_terminal() {
        return Ok(record);
    }
    record.cancel_requested = true;
    records.write(&record).map_err(record_error)?;
    let alive = records
        .supervisor_pid(&local.namespace, name)
        .is_some_and(|pid| {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            )
            .is_ok()
        });
    if !alive {
        // Nobody is running it any more (never started, or the supervisor died): close it here.
        record.phase = crate::api::Phase::Cancelled;
        record.reason = Some(Reason::Cancelled.as_str().into());
        record.message = Some("cancelled on request; no supervisor was running".into());
        record.completed_at = Some(jiff::Timestamp::now());
        records.write(&record).map_err(record_error)?;
        return Ok(record);
    }
    let record = loop {
        let record = records.read(&local.namespace, name).map_err(record_error)?;
        if record.phase.is_terminal() {
            break record;
        }
        tokio::time::sleep(POLL).await;
    };
    // The record is the supervisor's last write; wait for it to be gone too, so that nothing
    // of the run is left when this returns.
    if let Some(pid) = records.supervisor_pid(&local.namespace, name) {
        let deadline = std::time::Instant::now() + SUPERVISOR_EXIT;
        while process_running(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(record)
}

/// Whether process `pid` runs (a zombie, exited but not yet reaped, does not).
fn process_running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// `errand cancel NAME`.
pub async fn cancel(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let before = local.find(name)?;
    let name = before.name;
    if before.phase.is_terminal() {
        return Err(CliError::new(
            "already_finished",
            format!(
                "execution {name} already ended {:?}; there is nothing to cancel",
                before.phase
            ),
        ));
    }
    let record = stop(&local, &name).await?;
    print_ok(output.format, "execution", &record, || {
        print_record(&record)
    });
    Ok(())
}

/// `errand delete NAME`: stops it if running, then removes its record and results.
pub async fn delete(target: &Target, name: &str, output: OutputArgs) -> Result<(), CliError> {
    let local = Local::new(target)?;
    let name = local.find(name)?.name;
    let record = stop(&local, &name).await?;
    let removed = remove_execution(&local.records(), &record)
        .await
        .map_err(|e| match e {
            RemoveError::Store(e) => store_error(e),
            RemoveError::Record(e) => record_error(e),
        })?;
    let answer = json!({"execution": name, "results_removed": removed});
    print_ok(output.format, "deleted", &answer, || {
        format!("deleted execution {name} and {removed} stored results")
    });
    Ok(())
}

/// `errand __supervise NAME`: the detached process behind `execute --no-wait`.
pub async fn supervise(
    target: &Target,
    name: &str,
    settings: StageSettings,
) -> Result<(), CliError> {
    let local = Local::new(target)?;
    run_prepared(
        &local.data,
        &local.namespace,
        name,
        true,
        &settings,
        cancel_on_stop_signal(),
    )
    .await
    .map(|_| ())
    .map_err(supervise_error)
}
