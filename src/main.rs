//! The `errand` binary: wiring only.
#![forbid(unsafe_code)]

fn main() {}
