//! The bus an event is published on once it is durable in the sink.
//!
//! [`Bus::publish`] resolves `Ok` only when the bus has acknowledged the event: with JetStream
//! that is the PubAck, which means the stream stored it. A timeout proves nothing (the message
//! may or may not have arrived), so it is an error and the event stays unpublished; publishing it
//! again is safe because the event id travels as `Nats-Msg-Id`.

pub mod auth;
mod config;
pub mod context;
mod denials;
#[cfg(test)]
mod error_tests;
mod failover;
mod nats;
mod payload;
mod probe;
mod scan;
pub mod stream;

use std::future::Future;
use std::time::Duration;

use thiserror::Error;

use crate::domain::event::{EncodedEvent, Event};
use crate::error_class::Cause;

pub use auth::{BusAuth, BusTls, Secret};
pub use config::{BusConfig, BusMode};
pub use denials::Denials;
pub use failover::{through_failover, FAILOVER_WAIT};
pub use nats::{connect_client, connect_watched, NatsBus};
pub use payload::payload_warning;
pub use probe::{Presence, Probe};
pub use scan::Extent;

/// The servers of a comma-separated URL list (`nats://a:4222,nats://b:4222`), trimmed, for
/// async-nats, which parses a single string as one URL.
pub fn server_list(urls: &str) -> Vec<&str> {
    urls.split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .collect()
}

/// Header carrying the event id; JetStream drops duplicates by it.
pub const HEADER_MSG_ID: &str = "Nats-Msg-Id";
/// Header carrying the event kind, e.g. `dead_lettered`.
pub(crate) const HEADER_KIND: &str = "Dlq-Event-Kind";
/// Header carrying the job id.
pub(crate) const HEADER_JOB: &str = "Dlq-Job-Id";
/// Header carrying the node id of the emitter.
pub(crate) const HEADER_NODE: &str = "Dlq-Node-Id";

/// What the bus said when it acknowledged an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// Stream sequence the event was stored at (JetStream mode only).
    pub stream_seq: Option<u64>,
    /// The stream already had this event id (a safe re-publish).
    pub duplicate: bool,
}

/// Something events can be published on.
pub trait Bus: Send + Sync + 'static {
    /// Publishes one encoded event; `Ok` only once the bus acknowledged it.
    fn publish_encoded(
        &self,
        event: &EncodedEvent,
    ) -> impl Future<Output = Result<Published, BusError>> + Send;

    /// Encodes and publishes one event; `Ok` only once the bus acknowledged it.
    fn publish(&self, event: &Event) -> impl Future<Output = Result<Published, BusError>> + Send {
        let encoded = EncodedEvent::encode(event).map_err(BusError::Encode);
        async move { self.publish_encoded(&encoded?).await }
    }

    /// Whether the connection is up right now (the reconciler waits for this).
    fn is_healthy(&self) -> bool;

    /// Gets the bus ready for publishing (e.g. creates the stream when it is missing, or checks the one that exists). Called by the
    /// reconciler at start and whenever the bus is healthy; cheap once done.
    fn prepare(&self) -> impl Future<Output = Result<(), BusError>> + Send {
        async { Ok(()) }
    }

    /// Whether this bus can say which acknowledged messages it still holds
    /// ([`Bus::probe`]) and take a repair ([`Bus::publish_encoded_as`]): JetStream can, core
    /// NATS (which keeps nothing) cannot. Anti-entropy runs only when it can.
    fn can_probe(&self) -> bool {
        false
    }

    /// For each probe, whether the stream still holds that message at that stream sequence.
    /// One answer per probe, in order.
    fn probe(
        &self,
        probes: &[Probe],
    ) -> impl Future<Output = Result<Vec<Presence>, BusError>> + Send {
        let _ = probes;
        async {
            Err(BusError::rejected(
                "this bus cannot say what it holds (JetStream only)",
            ))
        }
    }

    /// Calls `visit(stream_seq, msg_id)` for every message the stream holds from stream
    /// sequence `from` through `to`, in order, reading them in bulk (anti-entropy); returns the
    /// stream's extent when the read began.
    fn scan_ids(
        &self,
        from: u64,
        to: u64,
        visit: &mut (dyn FnMut(u64, &str) + Send),
    ) -> impl Future<Output = Result<Extent, BusError>> + Send {
        let _ = (from, to, visit);
        async {
            Err(BusError::rejected(
                "this bus cannot say what it holds (JetStream only)",
            ))
        }
    }

    /// Publishes one stored event under `msg_id` instead of its event id (a repair the
    /// duplicate window must not drop; the payload keeps the event id, by which consumers
    /// drop copies they hold). `Ok` only once acknowledged.
    fn publish_encoded_as(
        &self,
        event: &EncodedEvent,
        msg_id: &str,
    ) -> impl Future<Output = Result<Published, BusError>> + Send {
        let _ = (event, msg_id);
        async {
            Err(BusError::rejected(
                "re-publishing under a new id needs a JetStream stream",
            ))
        }
    }
}

/// Why a publish was not acknowledged. In every case the event may be published again.
///
/// A variant that comes from another error (async-nats, I/O, JSON) keeps it as its
/// [`source`](std::error::Error::source); the message already includes its text.
#[derive(Debug, Error)]
pub enum BusError {
    /// The client is not connected (server down or unreachable); nothing was sent.
    #[error("not connected to the bus")]
    Disconnected,
    /// No acknowledgement within the publish timeout; the event may or may not have arrived.
    #[error("no acknowledgement within {0:?}")]
    Timeout(Duration),
    /// The stream could not be read or created.
    #[error("cannot set up stream: {message}")]
    StreamSetup {
        /// What failed, the cause's text included.
        message: String,
        /// The server's or the client's error, if there was one.
        #[source]
        source: Option<Cause>,
    },
    /// The stream exists but cannot hold dlq's events (its subjects, its storage); dlq does
    /// not change it: the message says what to do.
    #[error("{0}")]
    StreamUnfit(String),
    /// The bus refused the message (too large, wrong stream, ...).
    #[error("the bus refused the event: {message}")]
    Rejected {
        /// Why, the cause's text included.
        message: String,
        /// The client's error, if there was one.
        #[source]
        source: Option<Cause>,
    },
    /// The event could not be encoded.
    #[error("cannot encode the event: {0}")]
    Encode(#[source] serde_json::Error),
    /// Any other transport error.
    #[error("bus error: {message}")]
    Transport {
        /// What failed, the cause's text included.
        message: String,
        /// The client's error, if there was one.
        #[source]
        source: Option<Cause>,
    },
    /// The bus settings cannot work (conflicting credentials, plaintext credentials off
    /// loopback, a key file that cannot be read); nothing was sent.
    #[error("invalid bus settings: {message}")]
    Config {
        /// What is wrong and what to do, the cause's text included.
        message: String,
        /// The error reading a file, if there was one.
        #[source]
        source: Option<Cause>,
    },
    /// The server refused the connection (credentials, TLS, permissions), or its host name
    /// does not resolve; the message names the cause and the fix. Trying again with the same
    /// settings cannot help.
    #[error("cannot connect to the bus: {message}")]
    Refused {
        /// The cause and the fix.
        message: String,
        /// The client's connect error.
        #[source]
        source: Option<Cause>,
    },
    /// No server answered (down, a port nothing listens on, no route, no answer in time); the
    /// message names the server and what to check. It may answer later.
    #[error("cannot connect to the bus: {message}")]
    Unreachable {
        /// The server and what to check.
        message: String,
        /// The client's connect error.
        #[source]
        source: Option<Cause>,
    },
}

impl BusError {
    /// [`BusError::StreamSetup`] with no other error behind it.
    pub(crate) fn stream_setup(message: impl Into<String>) -> Self {
        BusError::StreamSetup {
            message: message.into(),
            source: None,
        }
    }

    /// [`BusError::Rejected`] with no other error behind it.
    pub fn rejected(message: impl Into<String>) -> Self {
        BusError::Rejected {
            message: message.into(),
            source: None,
        }
    }

    /// [`BusError::Transport`] with no other error behind it.
    pub(crate) fn transport(message: impl Into<String>) -> Self {
        BusError::Transport {
            message: message.into(),
            source: None,
        }
    }

    /// [`BusError::Config`] with no other error behind it.
    pub fn config(message: impl Into<String>) -> Self {
        BusError::Config {
            message: message.into(),
            source: None,
        }
    }

    /// The same error, caused by `cause` (kept as its source; the message is unchanged).
    /// Variants without a source are returned as they are.
    pub(crate) fn caused_by(mut self, cause: impl Into<Cause>) -> Self {
        match &mut self {
            BusError::StreamSetup { source, .. }
            | BusError::Rejected { source, .. }
            | BusError::Transport { source, .. }
            | BusError::Config { source, .. }
            | BusError::Refused { source, .. }
            | BusError::Unreachable { source, .. } => *source = Some(cause.into()),
            BusError::Disconnected
            | BusError::Timeout(_)
            | BusError::StreamUnfit(_)
            | BusError::Encode(_) => {}
        }
        self
    }

    /// True when publishing the same event again cannot succeed ([`BusError::Rejected`],
    /// [`BusError::Encode`]): the emitter does not retry it and the reconciler parks it.
    pub(crate) fn is_permanent(&self) -> bool {
        matches!(self, BusError::Rejected { .. } | BusError::Encode(_))
    }

    /// The label used for this error in metrics.
    pub fn label(&self) -> &'static str {
        match self {
            BusError::Disconnected => "disconnected",
            BusError::Timeout(_) => "timeout",
            BusError::StreamSetup { .. } => "stream_setup",
            BusError::StreamUnfit(_) => "stream_unfit",
            BusError::Rejected { .. } => "rejected",
            BusError::Encode(_) => "encode",
            BusError::Transport { .. } => "transport",
            BusError::Config { .. } => "config",
            BusError::Refused { .. } => "refused",
            BusError::Unreachable { .. } => "unreachable",
        }
    }
}
