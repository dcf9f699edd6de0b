//! The operations the command line offers, apart from how they are asked for: the [`Backend`] the commands are written against and every type it takes or returns, the error every operation returns with its stable code, and the two backends (`local`, `cluster`) built from a [`BackendConfig`].

pub mod backend;
pub mod cluster;
mod config;
pub mod deploy;
mod download;
mod error;
pub mod excerpt;
pub mod execute;
mod execution;
mod gateway_client;
pub mod local;
pub mod lookup;
pub mod notify;
pub mod private;
pub mod request;
pub mod stdout;

pub use backend::{Backend, Deployments};
pub use config::{BackendConfig, connect, sweep_store};
pub use download::download_from_store;
pub use error::{Error, ErrorCode};
pub use execution::Execution;
pub use gateway_client::{GatewayClient, GatewayEndpoint};
