//! dlq — a durable dead-letter queue for work that keeps failing.
//!
//! A scheduler hands a failed work item to an [`emitter`]; the emitter writes it first to a
//! durable [`sink`] as an event in an append-only log, then publishes the event on the
//! [`bus`]. A [`reconciler`] re-publishes whatever the bus never acknowledged. Projections of
//! the log ([`projection`]) give the current items, by job, signature and age.

pub mod bus;
pub mod cli;
pub mod config;
pub mod consumer;
pub mod domain;
pub mod emitter;
mod error_class;
pub mod metrics;
pub mod query;
pub mod removal;
pub mod render;
pub mod request;
pub mod runner;
pub mod serve;
pub mod sink;
#[cfg(test)]
mod testing;

pub use error_class::ErrorClass;
