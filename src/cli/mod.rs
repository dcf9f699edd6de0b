//! The `errand` command line: argument parsing and dispatch to the commands.

use clap::{Parser, Subcommand};

/// Run an AI agent once, to completion, and keep everything it produced.
#[derive(Debug, Parser)]
#[command(name = "errand", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print every errand CustomResourceDefinition as YAML (or write one file each).
    Crds {
        /// Write `<plural>.errand.dev.yaml` files into this directory instead of printing.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Crds { out_dir } => match print_crds(out_dir.as_deref()) {
            Ok(()) => 0,
            Err(error) => {
                eprintln!("error: {error}");
                1
            }
        },
    }
}

fn print_crds(out_dir: Option<&std::path::Path>) -> Result<(), String> {
    let Some(dir) = out_dir else {
        let yaml =
            crate::api::crds::all_yaml().map_err(|e| format!("cannot render the CRDs: {e}"))?;
        print!("{yaml}");
        return Ok(());
    };
    for (file, crd) in crate::api::crds::all() {
        let yaml =
            crate::api::crds::to_yaml(&crd).map_err(|e| format!("cannot render {file}: {e}"))?;
        let path = dir.join(file);
        std::fs::write(&path, yaml).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}
