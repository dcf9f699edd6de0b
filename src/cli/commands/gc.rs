//! `errand gc`: collects finished local executions by age, count and size, once or automatically before every local execution.

use crate::cli::output::{Format, human_size, print_ok};
use crate::cli::target::Target;
use crate::local::gc::GcReport;
use crate::ops::local::{Local, gc};
use crate::ops::{Error, ErrorCode};
use crate::retention::gc::{GcPolicy, parse_age, parse_size};

/// Options of `errand gc`.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// Collect executions that finished longer ago than this: seconds, or a number with s, m,
    /// h, d or w (as in 7d).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub older_than: Option<u64>,
    /// Keep at most this many finished executions (the most recently finished).
    #[arg(long, value_name = "N")]
    pub max_executions: Option<usize>,
    /// Collect the oldest finished executions until all executions take at most this: bytes,
    /// or a number with K, M, G or T (powers of 1024, as in 10G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_bytes: Option<u64>,
    /// Report what would be removed, and remove nothing.
    #[arg(long, conflicts_with = "automatic")]
    pub dry_run: bool,
    /// Save these limits as the automatic gc, which runs before every local execution (all
    /// namespaces), and apply them now.
    #[arg(long, conflicts_with = "no_automatic")]
    pub automatic: bool,
    /// Turn the automatic gc off.
    #[arg(long)]
    pub no_automatic: bool,
}

impl GcArgs {
    fn policy(&self) -> GcPolicy {
        GcPolicy {
            older_than_seconds: self.older_than,
            max_executions: self.max_executions,
            max_bytes: self.max_bytes,
        }
    }
}

impl GcArgs {
    /// `errand gc`: in `--namespace` if given, else in every namespace. Without limits it applies
    /// the automatic gc's.
    pub async fn exec(&self, target: &Target, format: Format) -> Result<(), Error> {
        let args = self;
        if !target.is_local() {
            return Err(Error::new(
                ErrorCode::LocalOnly,
                "errand gc collects local executions (pass --local); on a cluster, finished \
             executions go when their ttlSecondsAfterFinished runs out",
            ));
        }
        let local = Local::new(&target.config())?;
        let policy = args.policy();
        if args.automatic {
            if policy.is_empty() {
                return Err(Error::argument(
                    "--automatic needs at least one of --older-than, --max-executions or --max-bytes",
                ));
            }
            gc::set_automatic(&local, Some(&policy))?;
        }
        if args.no_automatic {
            gc::set_automatic(&local, None)?;
            if policy.is_empty() {
                print_ok(
                    format,
                    "gc",
                    &crate::cli::answers::AutomaticGcOff { automatic: false },
                    || "automatic gc is off".to_owned(),
                );
                return Ok(());
            }
        }
        let report = gc::collect(&local, target.namespace.as_deref(), policy, args.dry_run).await?;
        print_ok(format, "gc", &report, || describe(&report));
        Ok(())
    }
}

fn describe(report: &GcReport) -> String {
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut lines: Vec<String> = report
        .removed
        .iter()
        .map(|c| {
            format!(
                "{verb} {}/{} ({:?}, finished {}, {}): {}",
                c.namespace,
                c.name,
                c.phase,
                c.finished_at.strftime("%Y-%m-%d %H:%M:%S"),
                human_size(c.bytes),
                c.reason.flag()
            )
        })
        .collect();
    lines.push(format!(
        "{verb} {} executions ({}); kept {} ({})",
        report.removed.len(),
        human_size(report.removed_bytes),
        report.kept,
        human_size(report.kept_bytes)
    ));
    lines.join("\n")
}
