//! dlq-ops — the operator side of the dlq dead-letter queue.
//!
//! The core library (`dlq`, in `core/`) is what a scheduler embeds: the emitter, the durable
//! sink, the bus, consumers. This crate is what operators use on top of it: the `dlq` command
//! line, the admin HTTP API and web page (`dlq serve`), operator queries (list, stats,
//! analyze, export, import, CEL filters) and the MapReduce job runner (`dlq run`, `dlq
//! retry`).
//!
//! # Layout
//!
//! Layers depend only downwards: the core → services → front ends.
//!
//! - Services: [`query`] (list, stats, analyze, export, import, CEL filters), [`runner`] (the
//!   MapReduce job runner).
//! - Front ends: [`render`] and [`request`] (what the CLI and the admin API share), [`serve`]
//!   (the admin HTTP API and page, and the client the CLI forwards through) and [`cli`].
//!
//! # Features
//!
//! `query`, `runner`, `serve` and `cli` are on by default; each turns on the ones before it
//! that it needs. `fuzzing` is for this repository's fuzz targets only.

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "query")]
pub mod query;
#[cfg(feature = "serve")]
pub mod render;
#[cfg(feature = "serve")]
pub mod request;
#[cfg(feature = "runner")]
pub mod runner;
#[cfg(feature = "serve")]
pub mod serve;
