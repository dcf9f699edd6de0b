//! The `errand` binary: wiring only.
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(errand::cli::run_args(std::env::args_os().collect()));
}
