//! `errand admin`: operator commands; `sweep-store` removes what nothing references any more from the store of either backend.

use jiff::SignedDuration;

use crate::cli::output::{Format, human_size, print_ok};
use crate::cli::target::Target;
use crate::ops::{Error, sweep_store};
use crate::retention::gc::parse_age;
use crate::retention::sweep_store::SweepReport;

/// `errand admin ...`
#[derive(Debug, clap::Subcommand)]
pub enum AdminAction {
    /// Remove from the store the results of executions that no longer exist, Fileset blobs no
    /// Fileset or live snapshot pins, and abandoned uploads, once older than the grace period;
    /// in `--namespace` only, when given. The store must belong to this cluster (or this
    /// machine's data directory) alone.
    SweepStore(SweepArgs),
}

/// Options of `errand admin sweep-store`.
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// Keep anything written more recently than this, referenced or not: seconds, or a number
    /// with s, m, h, d or w.
    #[arg(long, value_name = "AGE", default_value = "24h", value_parser = parse_age)]
    pub grace: u64,
    /// Report what would be removed, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl AdminAction {
    /// Runs an admin command against the local backend or the cluster.
    pub async fn exec(&self, target: &Target, format: Format) -> Result<(), Error> {
        match self {
            AdminAction::SweepStore(args) => sweep(target, args, format).await,
        }
    }
}

async fn sweep(target: &Target, args: &SweepArgs, format: Format) -> Result<(), Error> {
    let grace = SignedDuration::from_secs(i64::try_from(args.grace).unwrap_or(i64::MAX));
    let report = sweep_store(&target.config(), grace, args.dry_run).await?;
    print_ok(format, "sweep", &report, || describe(&report));
    Ok(())
}

fn describe(report: &SweepReport) -> String {
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut lines: Vec<String> = report
        .groups
        .iter()
        .map(|g| {
            format!(
                "{verb} {} {}/{} ({} objects, {})",
                g.kind.as_str(),
                g.namespace,
                g.id,
                g.keys.len(),
                human_size(g.bytes)
            )
        })
        .collect();
    lines.push(format!(
        "{verb} {} objects ({}); kept {} referenced, {} unreferenced within the {}s grace period; {} keys outside the layout left alone",
        report.removed_objects(),
        human_size(report.removed_bytes()),
        report.referenced,
        report.in_grace,
        report.grace_seconds,
        report.unknown_keys
    ));
    lines.join("\n")
}
