//! A change to where an execution's notifications go, as `execute` and `notify set` ask for it: the sinks (a command, an NDJSON file) and output-match watches of a local execution, and the webhook of a cluster one.

use crate::api::{NotifySpec, SecretKeyRef, WebhookSink};
use crate::local::notify::{NotifySettings, OutputMatch};
use crate::ops::Error;

/// The notification settings a command asks for; every field is optional. Its messages name
/// the flags (`--notify-*`) that set each field.
#[derive(Clone, Debug, Default)]
pub struct NotifyChange {
    /// A shell command run for each event (`--notify-command`); empty clears it.
    pub command: Option<String>,
    /// A file each event is appended to as one JSON line (`--notify-file`).
    pub file: Option<std::path::PathBuf>,
    /// Also notify for each output line containing this text (`--notify-on-output`).
    pub on_output: Option<String>,
    /// `on_output` is a regular expression.
    pub regex: bool,
    /// Which stream `on_output` watches: `stdout`, `stderr` or `both`.
    pub stream: String,
    /// The URL the controller POSTs the run's end to (`--notify-webhook`).
    pub webhook: Option<String>,
    /// The Secret key that signs webhook deliveries, `NAME:KEY`.
    pub webhook_secret: Option<String>,
}

impl NotifyChange {
    /// Whether any notification flag is given.
    pub fn given(&self) -> bool {
        self.command.is_some() || self.file.is_some() || self.on_output.is_some()
    }

    /// The `spec.notify` the webhook flags ask for, `None` without them.
    pub fn webhook(&self) -> Result<Option<NotifySpec>, Error> {
        let (Some(url), Some(secret)) = (&self.webhook, &self.webhook_secret) else {
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
        if let Some(command) = &self.command {
            settings.command = (!command.is_empty()).then(|| command.clone());
        }
        if let Some(file) = &self.file {
            let absolute = std::path::absolute(file)
                .map_err(|e| Error::argument(format!("--notify-file {}: {e}", file.display())))?;
            settings.file = Some(absolute);
        }
        if let Some(pattern) = &self.on_output {
            if self.regex {
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
                regex: self.regex,
                stream: self.stream.clone(),
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
