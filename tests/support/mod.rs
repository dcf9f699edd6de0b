//! Helpers shared by the integration tests (`mod support;` in `tests/offline/main.rs`,
//! `tests/local/main.rs` and `tests/cluster/main.rs`) and the benches.
//!
//! Each of those binaries compiles this module and uses only part of it, so unused
//! items are expected here and `dead_code` is allowed for the module.
#![allow(dead_code)]

pub mod answers;
pub mod anyone;
pub mod archives;
pub mod audit;
pub mod chart_rbac;
pub mod cluster;
pub mod deployments;
pub mod errand;
pub mod harness;
pub mod hostile;
pub mod kueue;
pub mod local;
pub mod mcp;
pub mod model_server;
pub mod netpol;
pub mod ports;
pub mod python_clients;
pub mod s3;
pub mod store;
pub mod telemetry;
pub mod tenant;
pub mod webhook_receiver;
pub mod writes;
