//! The durable sink: an append-only event log with its projections, in sled.
//!
//! # What is durable when
//!
//! * [`Sink::append`] resolves `Ok(events)` only after the group's key changes are in the
//!   [`journal`] **and** the journal was `fdatasync`ed. `Ok` therefore survives `kill -9`, a
//!   power cut and a reopen: opening replays the journal into sled.
//! * A group of commands becomes one journal record and one sled `Batch` on one tree: the log
//!   entries, their membership in the unpublished set, the items and every index change. A
//!   record is replayed whole or not at all, and sled recovers a batch atomically, so a crash
//!   never leaves a log entry without its projection or its unpublished marker.
//! * sled itself is made durable at **checkpoints** (sled's `flush`, then `fdatasync`): once a
//!   second when anything changed ([`SinkConfig::checkpoint_every`]), when the journal passes
//!   64 MiB, on close and around a rebuild. Each starts a new journal segment.
//! * Marking an event published only deletes its unpublished marker and is not journaled. After
//!   a crash such a marker may come back (from sled or from the journal's replay); the event is
//!   then published twice, with the same `event_id`, which JetStream and consumers both drop.
//!   Duplicates are allowed; loss is not.
//!
//! # Group commit
//!
//! One writer thread ([`writer`]) owns every write: it takes all requests waiting in its queue,
//! decides each on top of the ones before it, writes the whole group to the journal and to sled
//! as one batch, makes it durable once (one `fdatasync` of the journal) and answers every
//! waiter. This gives concurrent appends one shared fsync. The writer is also the only code that
//! flushes sled (at checkpoints, with the blocking `flush`); it never calls sled's `flush_async`
//! (concurrent `flush_async` deadlocks sled 0.34, sled issue 1308 on GitHub). sled's own periodic flusher is
//! disabled.
//!
//! Why a journal: sled's `flush` rewrites pages, 12–40 KiB on disk for each 1.9 KB event when
//! it ran once per group; the journal writes each change once, and the checkpoints' sled
//! flushes cover a second of groups each.
//!
//! # Layout
//!
//! One tree; see [`keys`]. Log `l/seq`, unpublished `u/seq`, parked `p/seq` (events the
//! reconciler set aside, see [`parked`]), items `i/job\0item`, indexes by
//! signature, by age, by recency and in FIFO order (all per job), and per-job counters
//! ([`counters`]). A database whose projection has another layout is rebuilt from its log when
//! opened. The next sequence is the last log
//! key's plus one (or the sequence floor, if higher).
//!
//! # Ids are never reused
//!
//! Every open of a data directory starts a new random epoch ([`epoch`]) that every event it
//! writes carries in its id (`"{node}:{epoch}:{seq}"`): a replaced directory (whose sequence
//! starts again at 1) or a restored copy (whose sequence continues below ids already published)
//! writes under a new epoch, so its ids are new. Within one directory, the sequence floor
//! ([`seq_floor`]) keeps the log sequence from going back when sled recovers a damaged database
//! as a shorter prefix of its log: after a crash the sequence may jump (a gap); it never goes
//! back.
//!
//! # Recovery
//!
//! Opening runs sled's own recovery. A database that cannot be opened yields
//! [`SinkError::Open`] with what to do (see docs/operations.md, "Recovering a data directory"); the
//! projection can always be rebuilt from the log with [`SledSink::rebuild_projection`].

mod counters;
mod epoch;
pub mod faults;
mod journal;
mod journal_record;
mod keys;
#[doc(hidden)]
pub mod log;
mod parked;
mod reads;
mod remove;
mod scan;
mod seq_floor;
mod sled_sink;
mod staged;
mod writer;

/// What tests outside the crate must reach inside the sink: not part of the API.
#[doc(hidden)]
pub mod test_support {
    pub use super::journal::DIR as JOURNAL_DIR;
    pub use super::keys::item as item_key;
    pub use super::keys::log as log_key;
    /// The key prefixes of the sled tree, for footprint measurements.
    pub mod key_prefixes {
        pub use super::super::keys::{
            BY_AGE, BY_RECENCY, BY_SIGNATURE, FIFO, ITEM, JOB_COUNT, LOG, PARKED, UNPUBLISHED,
        };
    }
}

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use thiserror::Error;

use crate::domain::command::Command;
use crate::domain::event::{EncodedEvent, Event};

pub use counters::JobCounters;
pub use faults::Faults;
/// The journal's decoders, for `crate::fuzzing`.
#[cfg(feature = "fuzzing")]
pub(crate) use journal::{replay as replay_journal, segment_file_name};
#[cfg(feature = "fuzzing")]
pub(crate) use journal_record::{Records as JournalRecords, MAGIC as JOURNAL_MAGIC};
pub use parked::Parked;
pub use remove::{clear, purge, remove_in_chunks, REMOVE_CHUNK};
pub(crate) use sled_sink::MAX_VALUE_BYTES;
pub use sled_sink::{KeyValue, SinkConfig, SledSink};

/// The backlog of events the bus has not acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// How many events are unpublished.
    pub count: u64,
    /// When the oldest unpublished event was written.
    pub oldest: Option<DateTime<Utc>>,
}

/// A durable, append-only event store with projections.
pub trait Sink: Send + Sync + 'static {
    /// Decides, stores and fsyncs the events of `command`; resolves once they are durable.
    fn append(
        &self,
        command: Command,
    ) -> impl Future<Output = Result<Vec<Event>, SinkError>> + Send;

    /// Records that the bus acknowledged the event with log sequence `seq`.
    fn mark_published(&self, seq: u64) -> Result<(), SinkError>;

    /// Up to `limit` unpublished events with a sequence above `after`, in sequence order, as
    /// stored (ready to publish, decoded only as far as the headers need). An entry that cannot
    /// be read fails the call with [`SinkError::Unreadable`], naming its sequence.
    fn unpublished(&self, after: u64, limit: usize) -> Result<Vec<EncodedEvent>, SinkError>;

    /// The stored event at log sequence `seq`, as it is published; `None` when the log has no
    /// such entry. Anti-entropy re-publishes only what this returns: what the sink holds.
    fn stored(&self, seq: u64) -> Result<Option<EncodedEvent>, SinkError>;

    /// Moves the unpublished event `seq` into the parked set, saying why: the reconciler no
    /// longer tries it, but it stays stored and listed ([`parked`](Sink::parked)) until
    /// [`unpark_all`](Sink::unpark_all). False when `seq` was not unpublished.
    fn park(&self, seq: u64, event_id: Option<&str>, reason: &str) -> Result<bool, SinkError>;

    /// The parked events, in sequence order.
    fn parked(&self) -> Result<Vec<Parked>, SinkError>;

    /// Moves every parked event back into the unpublished set; returns how many.
    fn unpark_all(&self) -> Result<u64, SinkError>;

    /// Size and age of the unpublished backlog.
    fn backlog(&self) -> Result<Backlog, SinkError>;

    /// The node id stamped on this sink's events.
    fn node_id(&self) -> &str;

    /// Flushes everything, including publish marks, and stops accepting appends.
    fn close(&self) -> impl Future<Output = Result<(), SinkError>> + Send;
}

/// Why a sink operation failed.
#[derive(Debug, Error)]
pub enum SinkError {
    /// The database could not be opened.
    #[error("cannot open the sink at {path}: {reason}. {hint}")]
    Open {
        /// The data directory.
        path: PathBuf,
        /// What sled reported.
        reason: String,
        /// What to do about it.
        hint: &'static str,
    },
    /// The command was refused; nothing was written.
    #[error("{0}")]
    Rejected(String),
    /// An item's id was not found; nothing was written.
    #[error("item '{item_id}' not found in job '{job_id}'")]
    NotFound {
        /// The job searched.
        job_id: String,
        /// The item asked for.
        item_id: String,
    },
    /// The writer did not take the request within the store timeout (it was busy with earlier
    /// groups). The caller withdrew it: it was not stored and never will be.
    #[error("the sink's writer did not take the write within {0:?}; it was withdrawn and not stored (the disk may be slow or full)")]
    Timeout(Duration),
    /// The writer took the request but did not confirm it within the store timeout. It will
    /// most likely be stored (and then published by the reconciler) or fail; either way it must
    /// not be sent again.
    #[error("the sink's writer took the write but did not confirm it within {0:?}; it is stored late unless the disk fails, and the reconciler publishes it then (do not send it again)")]
    Unconfirmed(Duration),
    /// The events were written but the flush failed: they are not known to be durable.
    #[error("events written but not flushed to disk: {reason}")]
    NotDurable {
        /// The events, so the caller can still publish them under their ids.
        events: Vec<Event>,
        /// The flush error.
        reason: String,
    },
    /// A disk or sled error.
    #[error("sink I/O failed: {0}")]
    Io(String),
    /// An unpublished event's log entry is missing or cannot be decoded; the reconciler parks
    /// it (see [`Sink::park`]) and goes on with the rest.
    #[error("unpublished event {seq} cannot be read: {reason}")]
    Unreadable {
        /// Its log sequence.
        seq: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A stored record could not be decoded.
    #[error("corrupt record at key {key}: {reason}; run `dlq rebuild` if it is in the projection")]
    Corrupt {
        /// The key, escaped.
        key: String,
        /// The decode error.
        reason: String,
    },
    /// The sink was closed.
    #[error("the sink is closed")]
    Closed,
}

impl SinkError {
    /// True when the command's events may be (or become) stored although the call failed:
    /// [`SinkError::Unconfirmed`] and [`SinkError::NotDurable`]. Sending the command again
    /// could then store it twice.
    pub fn may_be_stored(&self) -> bool {
        matches!(
            self,
            SinkError::Unconfirmed(_) | SinkError::NotDurable { .. }
        )
    }

    /// Which kind of failure this is for the one who asked.
    pub fn class(&self) -> crate::ErrorClass {
        match self {
            SinkError::NotFound { .. } => crate::ErrorClass::NotFound,
            _ => crate::ErrorClass::Failure,
        }
    }
}

impl From<sled::Error> for SinkError {
    fn from(err: sled::Error) -> Self {
        SinkError::Io(err.to_string())
    }
}

/// Escapes a key for error messages.
pub(crate) fn show_key(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}
