//! The integration tests of the `errand` binary on the local backend, each in a home of its own (`support::local`): runs, control, inputs, notifications, observation, stops, deployments, extensions, the deepagents runtime, MCP (rmcp and the official Python SDK), NeMo agents and telemetry. One binary, one `mod` per area.

#[path = "../support/mod.rs"]
mod support;

mod cli;
mod control;
mod deepagents;
mod deployment;
mod every_command;
mod extension;
mod inputs;
mod mcp;
mod mcp_sdk;
mod nemo;
mod notify;
mod observe;
mod quick_start;
mod refusals;
mod schedule;
mod stop;
mod telemetry;
