//! errand: run an AI agent once, to completion, as a Kubernetes Job or locally, and keep what it produced.
#![forbid(unsafe_code)]

pub mod api;
pub mod archive;
pub mod cli;
pub mod cluster;
pub mod controller;
pub mod dataapi;
pub mod egress_proxy;
pub mod gateway;
pub mod local;
pub mod ops;
pub mod outbound;
pub mod resolve;
pub mod retention;
pub mod runner;
pub mod serve;
pub mod store;
pub mod telemetry;
#[cfg(test)]
mod testing;
pub mod webhook;
