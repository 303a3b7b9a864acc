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
pub mod decide;
pub mod emitter;
pub mod event;
pub mod failure;
pub mod filter;
pub mod metrics;
pub mod model;
pub mod projection;
pub mod query;
pub mod reconciler;
pub mod retention;
pub mod runner;
pub mod serve;
pub mod signature;
pub mod sink;
#[cfg(test)]
mod testing;
pub mod timefmt;
