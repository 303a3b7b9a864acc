//! dlq — a durable dead-letter queue for work that keeps failing.
//!
//! A scheduler hands each failed work item to an [`Emitter`]. The emitter writes it first to
//! a durable [`Sink`] as an event in an append-only log, then publishes the event on the NATS
//! [`Bus`]; its reconciler re-publishes whatever the bus never acknowledged. Consumers rebuild
//! the items from the stream alone ([`Fold`]). Operators query and change the items through
//! the `dlq` command line and the admin API of `dlq serve` (the `dlq-ops` package).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use dlq::{BusConfig, DeadLetteredItem, EmitterBuilder, FailureDetail, NatsBus, SinkConfig, LocalSink};
//!
//! let sink = LocalSink::open(SinkConfig::new("dlq-data"))?;
//! let bus = NatsBus::connect(BusConfig::default()).await?;
//! let emitter = EmitterBuilder::new(sink, bus).build();
//! // Classified from the message and exit code: CommandFailed { exit_code: 101 }.
//! let failure = FailureDetail::builder("exit status 101")
//!     .exit_code(101)
//!     .agent("agent-1")
//!     .step("shell: cargo test")
//!     .duration(Duration::from_millis(4_500))
//!     .build();
//! let item = DeadLetteredItem::new("job-1", "item-7", serde_json::json!({}), vec![failure])?;
//! let receipt = emitter.dead_letter("mapreduce", item).await?;
//! println!("durable; published: {}", receipt.published);
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
//! Layers depend only downwards: domain → storage and transport → services.
//!
//! - `domain`: items, failures, error types and signatures, the events of the log, and the
//!   pure rules that turn requests into events and events into state. No I/O.
//! - `sink` (storage): the durable log and the sled store operators query.
//!   `bus` (transport): the `Bus` trait and NATS JetStream, with credentials and TLS
//!   ([`BusAuth`], [`BusTls`]; `bus::auth`).
//! - Services: `emitter` (sink first, then the bus; its reconciler, retention and
//!   anti-entropy), [`consumer`] (rebuilding the state from the stream), `removal` (clear and
//!   purge).
//! - [`config`] (the YAML configuration file) and [`metrics`] (metric names) serve every layer.
//!
//! The operator side (the `dlq` command line, the admin API and page, queries, the MapReduce
//! job runner) is the `dlq-ops` package, built on this crate; a scheduler needs none of it.
//!
//! The embedding API is the names re-exported at this crate's root, plus [`consumer`]
//! (writing a consumer), [`config`] (the YAML file) and [`metrics`] (metric names). The
//! modules named above without a link are public for `dlq-ops` and this repository's tests
//! only: hidden from the documentation, with no stability promise.
//!
//! # Features
//!
//! None is needed to embed the emitter. `testing` (the simulated disks, crash model and fault
//! switches the tests drive) and `fuzzing` (entry points for the fuzz targets) are for this
//! repository's tests only.

// The embedding API is the names re-exported below, plus `consumer` (writing a consumer),
// `config` (the YAML file) and `metrics` (metric names). The other modules are public for the
// operator package (`dlq-ops`) and this repository's tests only: hidden from the
// documentation, with no stability promise.
#[doc(hidden)]
pub mod bus;
pub mod config;
pub mod consumer;
#[doc(hidden)]
pub mod domain;
#[doc(hidden)]
pub mod emitter;
mod error_class;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod metrics;
#[doc(hidden)]
pub mod removal;
#[doc(hidden)]
pub mod sink;
#[cfg(test)]
mod testing;

pub use bus::{Bus, BusAuth, BusConfig, BusError, BusMode, BusTls, NatsBus, Secret};
pub use consumer::Fold;
pub use domain::attempt::FailureBuilder;
pub use domain::event::{Event, EventKind, RedriveTarget, RemovalReason, RemovedBy};
pub use domain::failure::NoFailures;
pub use domain::model::{
    DeadLetteredItem, ErrorType, FailureDetail, Redrive, RedriveState, WorktreeArtifacts,
};
pub use domain::signature::{classify, signature, Outcome, Signature};
pub use emitter::{
    AntiEntropyConfig, AntiEntropyStats, Canary, CanarySize, EmitError, Emitter, EmitterBuilder,
    PublishOutcome, Receipt, ReconcilerConfig, RedriveError, RedriveHandler, RedriveItem,
    RedrivePlan, RedriveReport, RetentionConfig, StoredReceipt, TopicPolicies, TopicPolicy,
};
pub use error_class::{Cause, ErrorClass};
pub use sink::{LocalSink, Sink, SinkConfig, SinkError};
