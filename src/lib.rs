//! dlq — a durable dead-letter queue for work that keeps failing.
//!
//! A scheduler hands each failed work item to an [`Emitter`]. The emitter writes it first to
//! a durable [`Sink`] as an event in an append-only log, then publishes the event on the NATS
//! [`Bus`]; its reconciler re-publishes whatever the bus never acknowledged. Consumers rebuild
//! the items from the stream alone ([`Fold`]). Operators query and change the items through
//! the `dlq` CLI and the admin API of `dlq serve`.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use dlq::{BusConfig, EmitterBuilder, FailureDetail, NatsBus, SinkConfig, SledSink};
//!
//! let sink = SledSink::open(SinkConfig::new("dlq-data"))?;
//! let bus = NatsBus::connect(BusConfig::default()).await?;
//! let emitter = EmitterBuilder::new(sink, bus).build();
//! let failure = FailureDetail {
//!     attempt_number: 1,
//!     timestamp: chrono::Utc::now(),
//!     error_type: dlq::classify("exit status 101", Some(101), false),
//!     error_message: "exit status 101".into(),
//!     stack_trace: None,
//!     agent_id: "agent-1".into(),
//!     step_failed: "shell: cargo test".into(),
//!     duration_ms: 4_500,
//!     json_log_location: None,
//! };
//! if let Some(item) = dlq::dead_lettered_item("job-1", "item-7", serde_json::json!({}), vec![failure], None) {
//!     let receipt = emitter.dead_letter("mapreduce", item).await?;
//!     println!("durable; published: {}", receipt.published);
//! }
//! emitter.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! `dead_letter` returns once the item is durable and its publish attempts ended. A failure path
//! that must not wait for the bus calls [`Emitter::store`] instead: it returns once the item is
//! durable and publishes in the background; the [`StoredReceipt`] can await the outcome.
//!
//! # Layout
//!
//! Layers depend only downwards: domain → storage and transport → services → front ends.
//!
//! - [`domain`]: items, failures, error types and signatures, the events of the log, and the
//!   pure rules that turn requests into events and events into state. No I/O.
//! - [`sink`] (storage): the durable log and the sled store operators query.
//!   [`bus`] (transport): the `Bus` trait and NATS JetStream, with credentials and TLS
//!   ([`BusAuth`], [`BusTls`]; `bus::auth`).
//! - Services: [`emitter`] (sink first, then the bus; its reconciler, retention and
//!   anti-entropy),
//!   [`consumer`] (rebuilding the state from the stream), [`removal`] (clear and purge),
//!   [`backlog`] (waiting for the reconciler to publish what a change stored),
//!   `query` (list, stats, analyze, export, import, CEL filters), `runner` (the MapReduce
//!   job runner).
//! - Front ends: `render` and `request` (what the CLI and the admin API share), `serve` (the
//!   admin HTTP API and the client the CLI forwards through) and `cli`.
//! - [`config`] (the YAML configuration file) and [`metrics`] (metric names) serve every layer.
//!
//! # Features
//!
//! `query`, `runner`, `serve` and `cli` are on by default. `default-features = false` builds the
//! embeddable core (domain, sink, bus, emitter, consumer) without the HTTP server, the command
//! line, the job runner or the query language.

pub mod backlog;
pub mod bus;
#[cfg(feature = "cli")]
pub mod cli;
pub mod config;
pub mod consumer;
pub mod domain;
pub mod emitter;
mod error_class;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics;
#[cfg(feature = "query")]
pub mod query;
pub mod removal;
#[cfg(feature = "serve")]
pub mod render;
#[cfg(feature = "serve")]
pub mod request;
#[cfg(feature = "runner")]
pub mod runner;
#[cfg(feature = "serve")]
pub mod serve;
pub mod sink;
#[cfg(test)]
mod testing;

pub use bus::{Bus, BusAuth, BusConfig, BusError, BusMode, BusTls, NatsBus, Secret};
pub use consumer::Fold;
pub use domain::event::{Event, EventKind, RemovalReason};
pub use domain::failure::dead_lettered_item;
pub use domain::model::{DeadLetteredItem, ErrorType, FailureDetail, WorktreeArtifacts};
pub use domain::signature::{classify, signature, Signature};
pub use emitter::{
    AntiEntropyConfig, AntiEntropyStats, EmitError, Emitter, EmitterBuilder, PublishOutcome,
    Receipt, ReconcilerConfig, RetentionConfig, StoredReceipt, TopicPolicies, TopicPolicy,
};
pub use error_class::{Cause, ErrorClass};
pub use sink::{Sink, SinkConfig, SinkError, SledSink};
