//! Helpers shared by the integration tests (`mod support;` in each test file).
//!
//! Every test binary compiles this module and uses only part of it, so unused
//! items are expected here and `dead_code` is allowed for the module.
#![allow(dead_code)]

pub mod cluster;
pub mod errand;
pub mod harness;
pub mod s3;
pub mod store;
