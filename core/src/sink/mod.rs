//! The durable sink: the event log in segment files of our own, with its projection in sled.
//!
//! # Layout
//!
//! | where | what |
//! | --- | --- |
//! | `mod.rs` (here) | the [`Sink`] trait, [`SinkError`], this design note |
//! | `config.rs` | [`SinkConfig`], [`LogRetention`], the limits of a value |
//! | `open.rs` | opening a data directory: lock, epoch, recovery of the log, the projection caught up, migration of older formats |
//! | `handle/` | [`LocalSink`], the handle callers hold: appends go to the writer, reads to the projection |
//! | `log/` | the segment log: frames, segments, the index, the reader and the log writer (the durable truth) |
//! | `writer/` | the one writer thread: group commit, checkpoints of sled, epochs, the sequence floor, retention of segments |
//! | `projection/` | sled as a projection of the log: staging, the applier, keys, item records, index runs, publish state, parked events, counters, reads |
//! | `legacy/` | the journal of format 2 and its migration |
//! | `remove.rs` | clear, purge, delete and removal in chunks, as commands on any [`Sink`] |
//! | `log_fs.rs`, `fault_fs.rs`, `faults.rs` | the file system the log writes through, and the faults the tests inject into it |
//!
//! Dependencies between them run one way: `log` ← `projection` ← `writer` ← `handle` ← `open`
//! (`legacy` reads the log and writes the projection during a migration).
//!
//! # What is durable when
//!
//! * [`Sink::append`] resolves `Ok(events)` only after the events are in the **segment log**
//!   (`log/` in the data directory, `log/`) and the segment was `fdatasync`ed. `Ok` survives
//!   `kill -9`, a power cut and a reopen, and the bytes come back identical.
//! * **sled is the projection**: items, indexes and per-job counters, applied after the log
//!   made the group durable, as one sled batch that also carries the `applied_through` mark
//!   (`projection/projector.rs`). sled is made durable at **checkpoints** (once a second when anything
//!   changed, [`SinkConfig::checkpoint_every`], on close, around a rebuild). Opening applies
//!   the log from the mark on, so the projection always catches up with the log. sled writes
//!   its own snapshot only while opening; a process that wrote much makes it current when it
//!   is done ([`refresh_snapshot`]), so the next open does not replay those writes.
//! * **An item in sled points into the log** (`projection/item_record.rs`): its value is the sequences of
//!   its events, and reading it folds them. Before retention deletes a segment, the live items
//!   created in it are rewritten whole in sled (`projection/inline_items.rs`), durably, so none pins the log.
//! * **Publishing** is a watermark plus exceptions (`projection/publish_state.rs`), saved at checkpoints;
//!   the reconciler reads unpublished events from the log, never past its durable mark. After
//!   a crash an event may be published again, with the same `event_id`, which JetStream and
//!   consumers both drop. Duplicates are allowed; loss is not.
//! * A log segment is deleted only when every event in it is applied, checkpointed, published
//!   (or parked events are elsewhere), every live item created in it is kept whole, and it is
//!   past the log retention ([`LogRetention`]).
//!
//! # Group commit
//!
//! One writer thread (`writer/`) owns every write: it takes all requests waiting in its queue,
//! decides each on top of the ones before it, appends the whole group to the log with one
//! write and one `fdatasync`, applies the projection, and answers every waiter. Queries made
//! after an answer see the change. The writer is the only code that flushes sled (with the
//! blocking `flush`; concurrent `flush_async` deadlocks sled 0.34, sled issue 1308 on GitHub).
//!
//! # Sequences and ids are never reused
//!
//! The log hands out sequences and never hands one out twice, also after a failed write,
//! sync, rotation or apply (see `log/`). Every open of a data directory starts a new random
//! epoch (`writer/epoch.rs`) that every event carries in its id (`"{node}:{epoch}:{seq}"`), so a
//! replaced or restored directory writes new ids.
//!
//! # Formats
//!
//! Format 3 is this one (its projection format 5 keeps items as pointer records and indexes
//! them by age, recency and FIFO order in sorted runs of entries, a sled key per run, not per
//! entry, `projection/index_runs/`; projections of formats 2 to 4 are taken over when opened,
//! `projection/format.rs`). A directory of format 2 (the log in sled as `l/seq` keys, with a
//! journal) is migrated when opened (`legacy/migrate.rs`). A projection built with another layout is
//! rebuilt from the log when opened; [`LocalSink::rebuild_projection`] (`dlq rebuild`) rebuilds
//! it on demand.

mod config;
#[cfg(test)]
mod error_tests;
#[cfg(any(test, feature = "testing"))]
mod fault_fs;
#[cfg(any(test, feature = "testing"))]
pub mod faults;
mod handle;
#[cfg(test)]
mod known_items_tests;
mod legacy;
pub(crate) mod log;
mod log_fs;
#[cfg(not(any(test, feature = "testing")))]
mod no_faults;
mod open;
mod projection;
mod remove;
#[cfg(test)]
mod run_cache_tests;
mod writer;

/// What tests outside the crate must reach inside the sink: not part of the API, and built
/// only with the `testing` feature.
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod test_support {
    pub use super::config::LOG_DIR;
    pub use super::legacy::journal::DIR as JOURNAL_DIR;
    pub use super::projection::keys::item as item_key;
    pub use super::projection::keys::log as log_key;
    pub use super::projection::sled_open::open_waiting_for_lock;
    pub use super::projection::sled_open::SEGMENT_SIZE as SLED_SEGMENT_SIZE;
    /// The key prefixes of the sled tree, for footprint measurements.
    pub mod key_prefixes {
        pub use super::super::projection::keys::{
            AGE_RUNS, BY_AGE, BY_RECENCY, BY_SIGNATURE, FIFO, FIFO_RUNS, ITEM, JOB_COUNT, LOG,
            PARKED, RECENCY_RUNS, UNPUBLISHED,
        };
    }
    /// The segment log on its own, with its simulated disk, crash model and crash harness.
    pub mod log {
        pub use crate::sink::log::{
            crash, frame, harness, io, segment, sim, LogConfig, LogError, LogIndex, LogReader,
            LogWriter, Record, Records, Recovery, SegmentIndex,
        };
    }
}

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use thiserror::Error;

use crate::domain::command::Command;
use crate::domain::event::{EncodedEvent, Event};
use crate::error_class::Cause;

pub(crate) use config::MAX_VALUE_BYTES;
pub use config::{LogRetention, SinkConfig};
#[cfg(any(test, feature = "testing"))]
pub use faults::Faults;
#[cfg(any(test, feature = "testing"))]
pub use handle::KeyValue;
pub use handle::LocalSink;
/// The journal's decoders, for `crate::fuzzing`.
#[cfg(feature = "fuzzing")]
pub(crate) use legacy::journal::{replay as replay_journal, segment_file_name};
#[cfg(feature = "fuzzing")]
pub(crate) use legacy::journal_record::{Records as JournalRecords, MAGIC as JOURNAL_MAGIC};
pub use log::LogError;
#[cfg(not(any(test, feature = "testing")))]
pub(crate) use no_faults::Faults;
pub use projection::counters::JobCounters;
pub use projection::parked::Parked;
pub(crate) use projection::sled_open;
pub use projection::snapshot::refresh_snapshot;
pub use remove::{clear, delete, purge, remove_in_chunks, REMOVE_CHUNK};
pub(crate) use writer::checkpoint;
pub use writer::checkpoint::CheckpointError;

/// One event an append stored: the exact bytes the log holds for it when the sink has them
/// (the bus publishes those bytes, so the event is encoded once), or the whole event.
#[derive(Debug, Clone)]
pub enum Appended {
    /// The event as the log holds it, with the fields its headers need: what
    /// [`Sink::append_encoded`] of the local sink answers. The item stays with the sink's
    /// projection instead of being copied for the caller (issue 37).
    Encoded(EncodedEvent),
    /// The whole event (boxed: an event is several times the size of its bytes' handle);
    /// whoever publishes it encodes it.
    Event(Box<Event>),
}

impl Appended {
    /// An event without its bytes: whoever publishes it encodes it.
    pub fn unencoded(event: Event) -> Self {
        Appended::Event(Box::new(event))
    }

    /// The event's log sequence (0: a volatile event).
    pub fn seq(&self) -> u64 {
        match self {
            Appended::Encoded(encoded) => encoded.seq,
            Appended::Event(event) => event.seq,
        }
    }

    /// The event's id.
    pub fn event_id(&self) -> &str {
        match self {
            Appended::Encoded(encoded) => &encoded.event_id,
            Appended::Event(event) => &event.event_id,
        }
    }

    /// The job the event concerns.
    pub fn job_id(&self) -> &str {
        match self {
            Appended::Encoded(encoded) => &encoded.job_id,
            Appended::Event(event) => &event.job_id,
        }
    }

    /// The kind's snake-case name.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Appended::Encoded(encoded) => encoded.kind,
            Appended::Event(event) => event.kind.name(),
        }
    }

    /// The event's id, taken.
    pub fn into_event_id(self) -> String {
        match self {
            Appended::Encoded(encoded) => encoded.event_id,
            Appended::Event(event) => event.event_id,
        }
    }

    /// The whole event: decoded from its bytes when only those are here.
    pub fn into_event(self) -> Result<Event, serde_json::Error> {
        match self {
            Appended::Encoded(encoded) => encoded.decode(),
            Appended::Event(event) => Ok(*event),
        }
    }
}

/// The whole events of an append's answer (decoded where it held only their bytes).
pub(crate) fn whole_events(appended: Vec<Appended>) -> Result<Vec<Event>, SinkError> {
    let whole = |stored: Appended| {
        let seq = stored.seq();
        stored.into_event().map_err(|err| SinkError::Corrupt {
            key: format!("log event {seq}"),
            reason: err.to_string(),
            source: Some(err.into()),
        })
    };
    appended.into_iter().map(whole).collect()
}

/// The writer's final answer to an append whose caller was told [`SinkError::Unconfirmed`].
pub struct LateAnswer(tokio::sync::oneshot::Receiver<writer::Answer>);

impl LateAnswer {
    pub(crate) fn new(answer: tokio::sync::oneshot::Receiver<writer::Answer>) -> Self {
        LateAnswer(answer)
    }

    /// Waits for the writer's answer: the stored events, or why the late write failed. `None`
    /// when the writer stopped without answering (the sink was closed).
    pub async fn wait(self) -> Option<Result<Vec<Event>, SinkError>> {
        let answer = self.0.await.ok()?;
        Some(answer.and_then(whole_events))
    }
}

impl std::fmt::Debug for LateAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LateAnswer")
    }
}

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

    /// Like [`append`](Sink::append), and when the answer is [`SinkError::Unconfirmed`], also
    /// the writer's final answer, still to come ([`LateAnswer`]): so a caller told "stored
    /// late" learns when the late write failed instead. Sinks that never answer
    /// `Unconfirmed` keep this default (no late answer).
    fn append_with_late(
        &self,
        command: Command,
    ) -> impl Future<Output = (Result<Vec<Event>, SinkError>, Option<LateAnswer>)> + Send {
        async move { (self.append(command).await, None) }
    }

    /// Like [`append_with_late`](Sink::append_with_late), with each event's bytes as stored
    /// where the sink has them ([`Appended`]), so publishing does not encode it again. The
    /// default has none: the publisher encodes.
    fn append_encoded(
        &self,
        command: Command,
    ) -> impl Future<Output = (Result<Vec<Appended>, SinkError>, Option<LateAnswer>)> + Send {
        async move {
            let (result, late) = self.append_with_late(command).await;
            let appended = result.map(|events| events.into_iter().map(Appended::unencoded));
            (appended.map(Iterator::collect), late)
        }
    }

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

    /// Keeps every log segment holding an event from `floor` on, whatever the retention says
    /// (`None`: no such floor): anti-entropy must be able to read back every event it still
    /// checks.
    fn hold_log_from(&self, floor: Option<u64>) {
        let _ = floor;
    }

    /// Makes every publish mark recorded so far durable. Anti-entropy calls it before it
    /// publishes a lost event again under a repair id: a mark a power cut rolled back would
    /// have the reconciler publish the event once more under its own id, beside the repair.
    /// Sinks whose marks are durable at once keep this default.
    fn sync_publish_marks(&self) -> impl Future<Output = Result<(), SinkError>> + Send {
        async { Ok(()) }
    }

    /// Flushes everything, including publish marks, and stops accepting appends.
    fn close(&self) -> impl Future<Output = Result<(), SinkError>> + Send;
}

/// Why a sink operation failed. Every variant that comes from another error keeps it as its
/// [`source`](std::error::Error::source); the message already includes its text.
#[derive(Debug, Error)]
pub enum SinkError {
    /// The database could not be opened.
    #[error("cannot open the sink at {path}: {reason}. {hint}")]
    Open {
        /// The data directory.
        path: PathBuf,
        /// What went wrong (the cause's text included).
        reason: String,
        /// What to do about it.
        hint: &'static str,
        /// The error behind `reason`, if one was reported.
        #[source]
        source: Option<Cause>,
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
    /// The log did not acknowledge the events (a write, `fdatasync` or segment creation
    /// failed): they are not known to be durable, and may or may not be on disk.
    #[error("the events were not made durable (they may or may not be on disk): {reason}")]
    NotDurable {
        /// The events as they were staged. Their sequences are burned (never used again, and
        /// nobody's predecessor): never publish them under these ids; the emitter publishes
        /// a volatile copy of a dead-letter instead.
        events: Vec<Event>,
        /// The flush error's text.
        reason: String,
        /// The log's error (shared by every append of the group); none for an injected fault.
        #[source]
        source: Option<Arc<LogError>>,
    },
    /// A file-system call of the sink failed (a sidecar file, a thread that could not start,
    /// an injected write fault).
    #[error("sink I/O failed: {context}: {source}")]
    Io {
        /// What the sink was doing.
        context: String,
        /// The error of the operating system.
        #[source]
        source: std::io::Error,
    },
    /// sled (the projection's store) failed.
    #[error("sink I/O failed: {0}")]
    Sled(#[from] sled::Error),
    /// The segment log failed to read (its message says what to do).
    #[error("sink I/O failed: {0}")]
    Log(#[from] LogError),
    /// Making sled durable (a checkpoint) failed; the log keeps every event until one succeeds.
    #[error("sink I/O failed: {0}")]
    Checkpoint(#[from] checkpoint::CheckpointError),
    /// A record could not be encoded as JSON.
    #[error("sink I/O failed: cannot encode {what}: {source}")]
    Encode {
        /// What was being encoded.
        what: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The projection is behind the log and applying the log to it failed: appends are
    /// refused until it succeeds.
    #[error("sink I/O failed: the projection is behind the log and cannot be updated ({source}); nothing was written. Check the disk, then restart: opening applies the log")]
    Behind {
        /// Why applying failed (shared by every append of the group).
        #[source]
        source: Arc<SinkError>,
    },
    /// The sink's own state cannot be used (a lock poisoned by a panic); there is no other
    /// error behind it.
    #[error("sink I/O failed: {0}")]
    Unavailable(&'static str),
    /// An unpublished event's log entry is missing or cannot be decoded; the reconciler parks
    /// it (see [`Sink::park`]) and goes on with the rest.
    #[error("unpublished event {seq} cannot be read: {reason}")]
    Unreadable {
        /// Its log sequence.
        seq: u64,
        /// What is wrong with it.
        reason: String,
        /// The read or decode error, if there was one.
        #[source]
        source: Option<Cause>,
    },
    /// A stored record could not be decoded.
    #[error("corrupt record at key {key}: {reason}; run `dlq rebuild` if it is in the projection")]
    Corrupt {
        /// The key, escaped.
        key: String,
        /// The decode error's text.
        reason: String,
        /// The decode error, if there was one.
        #[source]
        source: Option<Cause>,
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

/// Escapes a key for error messages.
pub(crate) fn show_key(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}
