//! The `errand` binary: wiring only.
#![forbid(unsafe_code)]

use clap::Parser;

fn main() {
    std::process::exit(errand::cli::run(errand::cli::Cli::parse()));
}
