//! The operations the command line offers, apart from how they are asked for: the error every operation returns, with its stable code, and what both backends share.

mod download;
mod error;

pub use download::download_from_store;
pub use error::{Error, ErrorCode};
