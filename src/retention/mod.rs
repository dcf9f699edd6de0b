//! Retention decisions, without I/O: when a finished execution expires, which local executions a gc collects, and which store objects nothing references any more.
//!
//! Each question has its module and a pure function that returns what to do from plain
//! facts: [`ttl`] for `ttlSecondsAfterFinished` (the controller acts on it), [`gc`] for the
//! local backend's `errand gc`, and [`sweep`] for the store sweep. The shells that gather the
//! facts and delete what these decide live with the backends ([`crate::local`],
//! [`crate::cluster`]) and in [`sweep_store`], which lists and deletes in the store.

pub mod gc;
pub mod sweep;
pub mod sweep_store;
pub mod ttl;
