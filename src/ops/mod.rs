//! The operations the command line offers, apart from how they are asked for: the error every operation returns, with its stable code.

mod error;

pub use error::{Error, ErrorCode};
