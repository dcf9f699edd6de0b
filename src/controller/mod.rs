//! The cluster backend: a controller that runs each AgentExecution once as a Job and records what happened.

pub mod build;
pub mod config;
pub mod grants;
pub mod names;
pub mod status;
