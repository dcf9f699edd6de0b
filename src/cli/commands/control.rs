//! Control of a running execution, written once over [`Backend`]: `cancel`, `kill --signal` and `deadline set|clear`.

use super::observe::with_sizes;
use crate::api::MAX_TIMEOUT_SECONDS;
use crate::cli::answers::Killed;
use crate::cli::output::{Format, print_ok};
use crate::cli::show::print_record;
use crate::ops::backend::Backend;
use crate::ops::lookup::find;
use crate::ops::{Error, ErrorCode};
use crate::runner::control::parse_signal;

/// Flags of `errand kill`.
#[derive(Debug, clap::Args)]
pub struct KillArgs {
    /// Execution name or unambiguous prefix.
    pub name: String,
    /// The signal: `TERM` (default) is a cancel (SIGTERM, the grace period, SIGKILL; results
    /// saved), `KILL` a cancel without the grace period; locally any other signal (`INT`,
    /// `HUP`, `USR1`, a number, ...) goes to the agent's process group and the run goes on.
    #[arg(long, short = 's', default_value = "TERM", value_parser = parse_signal)]
    pub signal: nix::sys::signal::Signal,
}

/// `errand deadline ...`
#[derive(Debug, clap::Subcommand)]
pub enum DeadlineAction {
    /// Stop the run `--in` seconds from now (from the moment the change is accepted) instead of
    /// at its current deadline, earlier or later.
    Set {
        /// Execution name or unambiguous prefix.
        name: String,
        /// Seconds from the moment the change is accepted, 1 to 604800.
        #[arg(long = "in", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_SECONDS as u64))]
        in_seconds: u64,
        /// Required: a shorter deadline stops the agent earlier, and past the original one a
        /// cluster run's result uploads may fail (their signed URLs last for the original
        /// budget), so results may be lost.
        #[arg(long, required = true)]
        acknowledge_result_loss: bool,
    },
    /// Go back to the deadline `timeoutSeconds` gives (counted from the agent's start).
    Clear {
        /// Execution name or unambiguous prefix.
        name: String,
    },
}

impl KillArgs {
    /// `errand kill NAME --signal SIG`.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let args = self;
        use nix::sys::signal::Signal;
        let record = find(backend, &args.name).await?;
        if record.phase.is_terminal() {
            return Err(Error::new(
                ErrorCode::InvalidState,
                format!(
                    "execution {} already ended {:?}; there is nothing to signal",
                    record.name, record.phase
                ),
            ));
        }
        let (effect, record) = match args.signal {
            Signal::SIGTERM => ("cancel", backend.cancel(&record).await?),
            Signal::SIGKILL => (
                "cancel_without_grace",
                backend.signal(&record, args.signal).await?,
            ),
            other => ("process_group", backend.signal(&record, other).await?),
        };
        let answer = Killed {
            execution: record.name.clone(),
            signal: args.signal.as_str().to_owned(),
            effect,
            phase: record.phase,
        };
        print_ok(format, "killed", &answer, || {
            format!(
                "sent {} to execution {} ({}); it is {:?}",
                answer.signal, answer.execution, effect, answer.phase
            )
        });
        Ok(())
    }
}

impl DeadlineAction {
    /// `errand deadline set|clear NAME`.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let action = self;
        let (name, in_seconds) = match action {
            DeadlineAction::Set {
                name, in_seconds, ..
            } => (name, Some(*in_seconds)),
            DeadlineAction::Clear { name, .. } => (name, None),
        };
        let record = find(backend, name).await?;
        let changed = backend.change_deadline(&record, in_seconds).await?;
        print_ok(format, "deadline", &changed, || match changed.deadline_at {
            Some(at) => format!("execution {} now stops at {at}", changed.execution),
            None => format!(
                "execution {}'s deadline is back to its timeoutSeconds from the agent's start",
                changed.execution
            ),
        });
        Ok(())
    }
}

/// Flags of `errand cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// Execution name or unambiguous prefix.
    pub name: String,
}

impl CancelArgs {
    /// `errand cancel NAME`: stops it and waits until its partial results are saved.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        let name = &self.name;
        let record = find(backend, name).await?;
        if record.phase.is_terminal() {
            return Err(Error::new(
                ErrorCode::AlreadyFinished,
                format!(
                    "execution {} already ended {:?}; there is nothing to cancel",
                    record.name, record.phase
                ),
            ));
        }
        let record = backend.cancel(&record).await?;
        let view = with_sizes(backend, record).await?;
        print_ok(format, "execution", &view, || print_record(&view.record));
        Ok(())
    }
}
