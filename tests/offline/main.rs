//! The integration tests that need neither a cluster nor a local errand home: the layers of `src/`, the CRDs and examples, the chart's templates, archives, the runner and the store, the pod commands, the data API, webhooks over real sockets. One binary, one `mod` per area.

#[path = "../support/mod.rs"]
mod support;

mod chart;
mod crds;
mod data_api;
mod docs_reference;
mod examples;
mod gateway_tls_names;
mod gateway_upstream;
mod layers;
mod notify_webhook;
mod pod_commands;
mod runner_archive;
mod runner_execute;
mod runner_store;
mod server_fuzz;
mod server_limits;
mod store_s3;
mod unpack_fuzz;
mod webhook_tls;
