//! The MapReduce job runner (`dlq run`): reads a workflow, runs one agent per work item,
//! applies the workflow's error policy and dead-letters items that keep failing through the
//! embedded [`crate::emitter`].
//!
//! Pure parts (workflow schema, backoff, circuit breaker, template rendering, conversion of
//! agent results, error policy decisions, job metrics) are separate from the parts that do I/O
//! (agent processes, input loading, job state on disk, the orchestrating loop in [`map`] and
//! [`job`]).

pub mod agent;
pub mod backoff;
pub mod breaker;
pub mod context;
pub mod convert;
pub mod error;
pub mod events;
pub mod input;
pub mod job;
pub mod map;
pub mod policy;
pub mod progress;
pub mod report;
pub mod retry;
pub mod shell;
pub mod stats;
pub mod store;
pub mod workflow;
