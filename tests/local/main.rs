//! The integration tests of the `errand` binary on the local backend, each in a home of its own (`support::local`): runs, control, inputs, notifications, observation, stops, deployments, extensions, the deepagents runtime, MCP, NeMo agents and telemetry. One binary, one `mod` per area.

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod control;
mod deepagents;
mod deployment;
mod extension;
mod inputs;
mod mcp;
mod nemo;
mod notify;
mod observe;
mod stop;
mod telemetry;
