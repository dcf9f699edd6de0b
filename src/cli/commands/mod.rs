//! The commands, one file per group: each holds its clap types and their `exec`, which asks
//! the backend (or the engine) and prints the answer.

pub mod admin;
pub mod control;
pub mod controller;
pub mod deploy;
pub mod execute;
pub mod filesets;
pub mod gc;
pub mod housekeeping;
pub mod listing;
pub mod mcp;
pub mod notify;
pub mod objects;
pub mod observe;
pub mod pod;
pub mod rerun;
pub mod results;
pub mod schedule;
pub mod schema;
