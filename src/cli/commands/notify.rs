//! Notification flags of `execute` and `errand notify set`: the sinks (a command, an NDJSON file) and output-match watches of a local execution, and the webhook of a cluster one.

use crate::cli::output::{Format, print_ok};
use crate::cli::show::print_record;
use crate::ops::backend::Backend;
use crate::ops::lookup::find;
use crate::ops::notify::NotifyChange;
use crate::ops::{Error, ErrorCode};

/// Where a run's notifications go (local runs).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct NotifyArgs {
    /// A shell command run for each event (`sh -c`): the event as JSON on its standard input,
    /// `ERRAND_EVENT_TYPE`, `ERRAND_EVENT_EXECUTION`, `ERRAND_EVENT_PHASE`, ... in its
    /// environment. Best effort: its failure is recorded with the event, never in the run.
    #[arg(long, value_name = "CMD")]
    pub notify_command: Option<String>,
    /// A file each event is appended to as one JSON line (`execution.finished` once per run).
    #[arg(long, value_name = "PATH")]
    pub notify_file: Option<std::path::PathBuf>,
    /// Also notify for each output line containing this text (a regular expression with
    /// `--notify-regex`) that appears after the watch is set.
    #[arg(long, value_name = "PATTERN")]
    pub notify_on_output: Option<String>,
    /// `--notify-on-output` is a regular expression.
    #[arg(long, requires = "notify_on_output")]
    pub notify_regex: bool,
    /// Which stream `--notify-on-output` watches: `stdout`, `stderr` or `both`.
    #[arg(long, value_name = "STREAM", default_value = "both", value_parser = ["stdout", "stderr", "both"])]
    pub notify_stream: String,
    /// On a cluster: an `https://` (or `http://`) URL the controller POSTs the run's end to, as
    /// a CloudEvent signed with `--notify-webhook-secret` (`spec.notify.webhook`).
    #[arg(long, value_name = "URL", requires = "notify_webhook_secret")]
    pub notify_webhook: Option<String>,
    /// The Secret key, in the execution's namespace, whose value signs webhook deliveries:
    /// `NAME:KEY`. Only the reference is stored; the controller reads the value to sign.
    #[arg(long, value_name = "NAME:KEY", requires = "notify_webhook")]
    pub notify_webhook_secret: Option<String>,
}

impl NotifyArgs {
    /// The change these flags ask for.
    pub fn change(&self) -> NotifyChange {
        NotifyChange {
            command: self.notify_command.clone(),
            file: self.notify_file.clone(),
            on_output: self.notify_on_output.clone(),
            regex: self.notify_regex,
            stream: self.notify_stream.clone(),
            webhook: self.notify_webhook.clone(),
            webhook_secret: self.notify_webhook_secret.clone(),
        }
    }
}

/// `errand notify ...`
#[derive(Debug, clap::Subcommand)]
pub enum NotifyAction {
    /// Set sinks or add an output watch (matching lines that appear from now on).
    Set {
        /// Execution name or unambiguous prefix.
        name: String,
        #[command(flatten)]
        notify: NotifyArgs,
    },
}

impl NotifyAction {
    /// Runs the subcommand.
    pub async fn exec(&self, backend: &dyn Backend, format: Format) -> Result<(), Error> {
        match self {
            NotifyAction::Set { name, notify } => notify_set(backend, name, notify, format).await,
        }
    }
}

/// `errand notify set NAME ...`: changes where a running execution's notifications go.
async fn notify_set(
    backend: &dyn Backend,
    name: &str,
    args: &NotifyArgs,
    format: Format,
) -> Result<(), Error> {
    if args.notify_webhook.is_some() {
        return Err(Error::argument(
            "--notify-webhook is set when the execution is created (spec.notify cannot change): errand execute --notify-webhook URL --notify-webhook-secret NAME:KEY",
        ));
    }
    if !args.change().given() {
        return Err(Error::argument(
            "notify set needs --notify-command, --notify-file or --notify-on-output",
        ));
    }
    let change = args.change();
    let record = find(backend, name).await?;
    if record.phase.is_terminal() {
        return Err(Error::new(
            ErrorCode::InvalidState,
            format!(
                "execution {} already ended {:?}; its notifications were sent",
                record.name, record.phase
            ),
        ));
    }
    let record = backend.set_notify(&record, &change).await?;
    let view = crate::cli::answers::ExecutionView::of(record);
    print_ok(format, "execution", &view, || print_record(&view.record));
    Ok(())
}
