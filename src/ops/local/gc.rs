//! The local gc as an operation: collecting finished local executions by a policy (the one given, else the automatic one), saving the automatic policy, and running it before a local execution.

use jiff::Timestamp;

use super::Local;
use crate::local::gc::{GcError, GcReport, automatic_policy, set_automatic_policy};
use crate::ops::stdout::human_size;
use crate::ops::{Error, ErrorCode};
use crate::retention::gc::GcPolicy;

/// Collects the finished executions of `namespace` (every namespace without one) that
/// `policy` selects; an empty policy is the automatic gc's, and without one an error.
pub async fn collect(
    local: &Local,
    namespace: Option<&str>,
    mut policy: GcPolicy,
    dry_run: bool,
) -> Result<GcReport, Error> {
    if policy.is_empty() {
        policy = automatic_policy(&local.data)
            .map_err(gc_error)?
            .ok_or_else(|| {
                Error::argument(
                    "errand gc needs at least one of --older-than, --max-executions or \
                     --max-bytes (or automatic limits saved with --automatic)",
                )
            })?;
    }
    let report =
        crate::local::gc::collect(&local.data, namespace, &policy, dry_run, Timestamp::now())
            .await
            .map_err(gc_error)?;
    Ok(report)
}

/// Saves `policy` as the automatic gc's, or with `None` turns the automatic gc off.
pub fn set_automatic(local: &Local, policy: Option<&GcPolicy>) -> Result<(), Error> {
    set_automatic_policy(&local.data, policy).map_err(gc_error)
}

/// Runs the automatic gc, if one is set, before a local execution. A gc that fails is
/// reported on stderr and does not stop the execution.
pub async fn automatic(local: &Local, report: bool) {
    let policy = match automatic_policy(&local.data) {
        Ok(Some(policy)) => policy,
        Ok(None) => return,
        Err(e) => {
            eprintln!("warning: automatic gc skipped: {e}");
            return;
        }
    };
    match crate::local::gc::collect(&local.data, None, &policy, false, Timestamp::now()).await {
        Ok(gc) if !gc.removed.is_empty() && report => eprintln!(
            "automatic gc removed {} finished executions ({})",
            gc.removed.len(),
            human_size(gc.removed_bytes)
        ),
        Ok(_) => {}
        Err(e) => eprintln!("warning: automatic gc failed: {e}"),
    }
}

fn gc_error(error: GcError) -> Error {
    match error {
        GcError::Record(e) => Error::from(e),
        GcError::Store(e) => Error::from(e),
        settings @ GcError::Settings { .. } => Error::new(ErrorCode::IoError, settings.to_string()),
    }
}
