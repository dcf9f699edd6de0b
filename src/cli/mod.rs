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
    /// Print every errand CustomResourceDefinition as YAML.
    Crds,
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Crds => match crate::api::crds::all_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                0
            }
            Err(error) => {
                eprintln!("error: cannot render the CRDs: {error}");
                1
            }
        },
    }
}
