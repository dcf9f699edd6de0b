//! Notification flags of `execute` and `errand notify set`: the sinks (a command, an NDJSON file) and output-match watches of a local execution, and the webhook of a cluster one.

use super::backend::{Backend, find};
use super::output::{OutputArgs, print_ok};
use super::show::print_record;
use crate::api::{NotifySpec, SecretKeyRef, WebhookSink};
use crate::local::notify::{NotifySettings, OutputMatch};
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
    /// Whether any notification flag is given.
    pub fn given(&self) -> bool {
        self.notify_command.is_some()
            || self.notify_file.is_some()
            || self.notify_on_output.is_some()
    }

    /// The `spec.notify` the webhook flags ask for, `None` without them.
    pub fn webhook(&self) -> Result<Option<NotifySpec>, Error> {
        let (Some(url), Some(secret)) = (&self.notify_webhook, &self.notify_webhook_secret) else {
            return Ok(None);
        };
        crate::resolve::webhook_url(url)
            .map_err(|message| Error::argument(format!("--notify-webhook: {message}")))?;
        let (name, key) = secret
            .split_once(':')
            .filter(|(name, key)| !name.is_empty() && !key.is_empty())
            .ok_or_else(|| {
                Error::argument(format!(
                    "--notify-webhook-secret {secret:?}: expected NAME:KEY, the Secret (in the execution's namespace) and its key whose value signs deliveries"
                ))
            })?;
        Ok(Some(NotifySpec {
            webhook: Some(WebhookSink {
                url: Some(url.clone()),
                url_from: None,
                signing_secret_ref: SecretKeyRef {
                    name: name.to_owned(),
                    key: key.to_owned(),
                },
            }),
        }))
    }

    /// `settings` with these flags applied; a watch starts at the given stream sizes.
    pub fn apply(
        &self,
        mut settings: NotifySettings,
        sizes: (u64, u64),
    ) -> Result<NotifySettings, Error> {
        if let Some(command) = &self.notify_command {
            settings.command = (!command.is_empty()).then(|| command.clone());
        }
        if let Some(file) = &self.notify_file {
            let absolute = std::path::absolute(file)
                .map_err(|e| Error::argument(format!("--notify-file {}: {e}", file.display())))?;
            settings.file = Some(absolute);
        }
        if let Some(pattern) = &self.notify_on_output {
            if self.notify_regex {
                regex::Regex::new(pattern).map_err(|e| {
                    Error::argument(format!(
                        "--notify-on-output {pattern:?}: not a regular expression: {e}"
                    ))
                })?;
            }
            if pattern.is_empty() {
                return Err(Error::argument("--notify-on-output: the pattern is empty"));
            }
            settings.output_matches.push(OutputMatch {
                pattern: pattern.clone(),
                regex: self.notify_regex,
                stream: self.notify_stream.clone(),
                stdout_from: sizes.0,
                stderr_from: sizes.1,
            });
        }
        if !settings.output_matches.is_empty() && !settings.armed() {
            return Err(Error::argument(
                "--notify-on-output needs a sink: --notify-command or --notify-file",
            ));
        }
        Ok(settings)
    }
}

/// `errand notify set NAME ...`: changes where a running execution's notifications go.
pub async fn notify_set(
    backend: &dyn Backend,
    name: &str,
    args: &NotifyArgs,
    output: OutputArgs,
) -> Result<(), Error> {
    if args.notify_webhook.is_some() {
        return Err(Error::argument(
            "--notify-webhook is set when the execution is created (spec.notify cannot change): errand execute --notify-webhook URL --notify-webhook-secret NAME:KEY",
        ));
    }
    if !args.given() {
        return Err(Error::argument(
            "notify set needs --notify-command, --notify-file or --notify-on-output",
        ));
    }
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
    let record = backend.set_notify(&record, args).await?;
    let view = super::answers::ExecutionView::of(record);
    print_ok(output.format, "execution", &view, || {
        print_record(&view.record)
    });
    Ok(())
}
