//! The integration tests on the real test cluster (`ERRAND_CLUSTER_TESTS=1`, `bash hack/test.sh`); without it each skips loudly. One binary, one `mod` per area; the tests run at once, and those that disturb the whole cluster hold it alone (`support::cluster::alone`).

#[path = "../support/mod.rs"]
mod support;

mod chaos;
mod chart;
mod control;
mod controller;
mod deployment;
mod e2e;
mod early_finish;
mod egress;
mod extension;
mod gateway;
mod grants;
mod inputs;
mod kueue;
mod local_parity;
mod mcp_sdk;
mod model_credentials;
mod nemo;
mod network_policy;
mod node_loss;
mod notify;
mod opted_in;
mod sandbox;
mod schedule;
mod server_abuse;
mod smoke;
mod telemetry;
mod tenant_isolation;
