//! The single writer thread: decides, stages and group-commits every write.
//!
//! The thread drains every request already queued (up to `max_group`), decides and stages each
//! append on top of the ones before it ([`Staged`]), writes the group's key changes to the
//! [`Journal`], applies them to sled as one atomic batch, makes the journal durable once
//! (`fdatasync`) and only then answers every waiter.
//!
//! A **checkpoint** makes sled itself durable — sled's `flush`, an `fdatasync` of sled's log
//! file, and an fsync of any new blob file — and then starts a new journal segment. It runs on a
//! tick ([`super::SinkConfig::checkpoint_every`]) when anything changed, when the journal passes
//! [`CHECKPOINT_BYTES`], on close and around a rebuild. If the journal cannot be written, a
//! group falls back to a checkpoint of its own. The writer is the only code that flushes the
//! database.
//!
//! # Who owns an append: the [`Claim`]
//!
//! Every append carries a claim that the writer and the waiting caller race for. The writer
//! claims a request when it takes it into a group, before deciding it; a caller whose store
//! timeout ran out withdraws it. Exactly one of them wins. A withdrawn request is dropped
//! unread, so a caller that withdrew knows its command will never be stored and may fall back
//! (the emitter's volatile publish); a caller that lost the race knows the writer has it and
//! will store it or fail it, so it must not send a second copy.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use chrono::Utc;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::epoch::Epoch;
use super::journal::{self, Journal};
use super::journal_record::Write;
use super::seq_floor::SeqFloor;
use super::staged::Staged;
use super::{keys, Faults, SinkError};
use crate::domain::command::{decide, Command, DecideError, Limits};
use crate::domain::event::Event;
use crate::metrics as m;

/// A message to the writer thread.
pub(crate) enum Request {
    /// Store the events of a command; answer once durable.
    Append {
        command: Box<Command>,
        reply: oneshot::Sender<Result<Vec<Event>, SinkError>>,
        /// Taken by the writer, or withdrawn by a caller that stopped waiting.
        claim: Claim,
    },
    /// Clear the projection and replay the log; answer with the number of events replayed.
    Rebuild {
        reply: oneshot::Sender<Result<u64, SinkError>>,
    },
    /// Checkpoint if anything changed since the last one (sent periodically).
    Tick,
    /// Flush and stop.
    Close {
        reply: oneshot::Sender<Result<(), SinkError>>,
    },
}

/// Who owns an append request: the writer once it takes it, or the caller who gave up first.
/// Cloning shares the claim.
#[derive(Debug, Clone, Default)]
pub(crate) struct Claim(Arc<AtomicU8>);

const QUEUED: u8 = 0;
const TAKEN: u8 = 1;
const WITHDRAWN: u8 = 2;

impl Claim {
    /// The writer takes the request; false when the caller withdrew it first.
    pub(crate) fn take(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, TAKEN, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The caller withdraws the request; false when the writer already took it.
    pub(crate) fn withdraw(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, WITHDRAWN, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }
}

/// State owned by the writer thread.
pub(crate) struct Writer {
    pub(crate) db: sled::Db,
    pub(crate) tree: sled::Tree,
    /// sled's log file, fdatasync'd after each flush (see [`Writer::flush`]).
    pub(crate) log_file: File,
    /// sled's blob directory; new blob files are fsync'd after each flush.
    pub(crate) blobs_dir: PathBuf,
    /// Blob files already fsync'd.
    pub(crate) synced_blobs: HashSet<OsString>,
    /// Reserved sequence numbers, so ids are never reused (see [`super::seq_floor`]).
    pub(crate) seq_floor: SeqFloor,
    /// Where groups become durable between checkpoints.
    pub(crate) journal: Journal,
    pub(crate) node_id: String,
    /// This open's incarnation of the data directory (see [`super::epoch`]).
    pub(crate) epoch: Epoch,
    pub(crate) next_seq: u64,
    pub(crate) limits: Limits,
    pub(crate) max_event_bytes: usize,
    pub(crate) max_group: usize,
    pub(crate) faults: Faults,
    pub(crate) unpublished: Arc<AtomicU64>,
    pub(crate) marks_dirty: Arc<AtomicBool>,
}

type Reply = oneshot::Sender<Result<Vec<Event>, SinkError>>;

/// A checkpoint runs as soon as the journal's current segment holds this many bytes.
pub const CHECKPOINT_BYTES: u64 = 64 << 20;

impl Writer {
    /// Runs until a `Close` arrives or every sender is gone, then flushes one last time.
    pub(crate) fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        while let Some(first) = rx.blocking_recv() {
            let mut group = vec![first];
            while group.len() < self.max_group {
                match rx.try_recv() {
                    Ok(request) => group.push(request),
                    Err(_) => break,
                }
            }
            if self.handle_group(group) {
                return;
            }
        }
        if let Err(err) = self.checkpoint().and_then(|()| self.close_floor()) {
            warn!(error = %err, "final flush of the sink failed");
        }
    }

    /// Handles one group; returns true when asked to stop.
    fn handle_group(&mut self, group: Vec<Request>) -> bool {
        self.faults.wait_while_paused();
        // Claim the appends first: one withdrawn by its caller is dropped unread.
        let group: Vec<Request> = group
            .into_iter()
            .filter(|request| match request {
                Request::Append { claim, .. } => {
                    let taken = claim.take();
                    if !taken {
                        debug!("append withdrawn by its caller before the writer took it");
                    }
                    taken
                }
                _ => true,
            })
            .collect();
        let stall = self.faults.stall();
        let appends = group.iter().any(|r| matches!(r, Request::Append { .. }));
        if appends && !stall.is_zero() {
            std::thread::sleep(stall);
        }
        let mut answers: Vec<(Reply, Result<Vec<Event>, SinkError>)> = Vec::new();
        let (mut rebuilds, mut closing, mut ticked) = (Vec::new(), Vec::new(), false);
        let mut seq = self.next_seq;
        let mut staged = Staged::new(&self.tree, seq);
        for request in group {
            match request {
                Request::Append { command, reply, .. } => {
                    let result = self.stage(&mut staged, &mut seq, &command);
                    answers.push((reply, result));
                }
                Request::Rebuild { reply } => rebuilds.push(reply),
                Request::Tick => ticked = true,
                Request::Close { reply } => closing.push(reply),
            }
        }
        let durable = if staged.is_empty() {
            Ok(())
        } else {
            let writes = staged.into_writes();
            match self.commit(writes, seq) {
                Ok(()) => self.make_durable(),
                Err(reason) => {
                    fail_stored(&mut answers, |_| SinkError::Io(reason.clone()));
                    Ok(())
                }
            }
        };
        if let Err(reason) = durable {
            fail_stored(&mut answers, |events| SinkError::NotDurable {
                events,
                reason: reason.clone(),
            });
        }
        for (reply, result) in answers {
            if let Ok(events) = &result {
                for event in events {
                    metrics::counter!(m::EVENTS_STORED, "kind" => event.kind.name()).increment(1);
                }
            }
            // A waiter that gave up after the writer took its request (`Unconfirmed`) is gone:
            // stored events are published by the reconciler; a failure must at least be seen.
            if let Err(Err(err)) = reply.send(result) {
                metrics::counter!(m::SINK_FAILURES).increment(1);
                warn!(error = %err, "an append whose caller stopped waiting failed: it was not stored");
            }
        }
        for reply in rebuilds {
            let _ = reply.send(self.rebuild_durably());
        }
        let stop = !closing.is_empty();
        let marks = self.marks_dirty.load(Ordering::SeqCst);
        let due = stop
            || self.journal.pending() >= CHECKPOINT_BYTES
            || (ticked && (marks || self.journal.pending() > 0));
        let mut checkpointed = Ok(());
        if due {
            checkpointed = self.checkpoint();
            if let Err(reason) = &checkpointed {
                warn!(%reason, "sink checkpoint failed; the journal keeps every group until one succeeds");
            }
        }
        if stop && checkpointed.is_ok() {
            checkpointed = self.close_floor();
        }
        for reply in closing {
            let _ = reply.send(checkpointed.clone().map_err(SinkError::Io));
        }
        stop
    }

    /// Decides one command on the group's staged state and stages its events.
    fn stage(
        &self,
        staged: &mut Staged<'_>,
        seq: &mut u64,
        command: &Command,
    ) -> Result<Vec<Event>, SinkError> {
        if self.faults.fail_writes() {
            return Err(SinkError::Io("injected write fault".into()));
        }
        let drafts = decide(&*staged, command, self.limits).map_err(|err| match err {
            DecideError::NotFound { job_id, item_id } => SinkError::NotFound { job_id, item_id },
            DecideError::State(err) => err,
            other => SinkError::Rejected(other.to_string()),
        })?;
        let now = Utc::now();
        let events: Vec<Event> = drafts
            .into_iter()
            .zip(*seq..)
            .map(|(draft, seq)| {
                // The epoch's first event names what the directory held when it was opened.
                let first = !self.epoch.started && seq == self.next_seq;
                Event {
                    event_id: Event::stored_id(&self.node_id, &self.epoch.id, seq),
                    node_id: self.node_id.clone(),
                    seq,
                    epoch: Some(self.epoch.id.clone()),
                    prev_epoch: first.then(|| self.epoch.prev_epoch.clone()).flatten(),
                    prev_seq: first.then_some(self.epoch.prev_seq),
                    timestamp: now,
                    job_id: draft.job_id,
                    topic: draft.topic,
                    kind: draft.kind,
                }
            })
            .collect();
        staged.stage_events(&events, Some(self.max_event_bytes))?;
        *seq += events.len() as u64;
        Ok(events)
    }

    /// Journals and applies a group's writes; `next_seq` is the sequence after the group's last
    /// event. A journal write error only marks the journal unusable: [`Writer::make_durable`]
    /// then falls back to a checkpoint.
    fn commit(&mut self, writes: Vec<Write>, next_seq: u64) -> Result<(), String> {
        if next_seq > self.next_seq {
            self.seq_floor
                .reserve(next_seq - 1)
                .map_err(|err| err.to_string())?;
        }
        if self.faults.fail_journal() {
            self.journal.disable();
        }
        if self.journal.healthy() {
            if let Err(reason) = self.journal.append(&writes) {
                warn!(%reason, "falling back to flushing sled for each group until the next checkpoint");
            }
        }
        if let Err(err) = self.tree.apply_batch(journal::batch(writes)) {
            // The journal may hold this group although sled refused it: stop appending behind
            // it, so the next group checkpoints and the segment holding it is dropped.
            self.journal.disable();
            return Err(err.to_string());
        }
        let added = next_seq - self.next_seq;
        self.unpublished.fetch_add(added, Ordering::SeqCst);
        self.epoch.started = true;
        self.next_seq = next_seq;
        Ok(())
    }

    /// Makes the groups committed so far durable: an `fdatasync` of the journal, or a checkpoint
    /// when the journal cannot take them.
    fn make_durable(&mut self) -> Result<(), String> {
        if self.faults.fail_flush() {
            return Err("injected flush fault".into());
        }
        if self.journal.healthy() {
            match self.journal.sync() {
                Ok(()) => {
                    debug!("sink group made durable");
                    return Ok(());
                }
                Err(reason) => warn!(%reason, "falling back to a checkpoint"),
            }
        }
        self.checkpoint()?;
        debug!("sink group made durable");
        Ok(())
    }

    /// Makes sled durable, then (if anything was journaled, or the journal is unusable) starts a
    /// new journal segment and drops the old ones. A failed rotation leaves the journal unusable
    /// (groups then checkpoint themselves) but sled is durable, so it is not an error.
    fn checkpoint(&mut self) -> Result<(), String> {
        self.marks_dirty.store(false, Ordering::SeqCst);
        if let Err(reason) = self.flush() {
            self.marks_dirty.store(true, Ordering::SeqCst);
            return Err(reason);
        }
        // Nothing appended since the last rotate: the current segment is empty, nothing to drop.
        if self.journal.pending() > 0 || !self.journal.healthy() {
            self.rotate_journal();
        }
        Ok(())
    }

    fn rotate_journal(&mut self) {
        if let Err(reason) = self.journal.rotate() {
            warn!(%reason, "sled is durable but the journal could not start a new segment");
        }
    }

    /// Makes sled durable: everything applied to the tree so far survives a crash afterwards.
    fn flush(&mut self) -> Result<(), String> {
        if self.faults.fail_flush() {
            return Err("injected flush fault".into());
        }
        // sled 0.34's flush writes the log with sync_file_range on Linux: data pages reach the
        // device, but neither its volatile cache nor the file size are made durable, and blob
        // files (large values, large rewritten nodes) are never synced at all.
        let bytes = self.db.flush().map_err(|err| err.to_string())?;
        self.log_file
            .sync_data()
            .map_err(|err| format!("fdatasync of the log failed: {err}"))?;
        self.sync_new_blobs()
            .map_err(|err| format!("fsync of a blob file failed: {err}"))?;
        debug!(bytes, "sink checkpoint");
        Ok(())
    }

    /// Fsyncs blob files not synced yet, then their directory.
    fn sync_new_blobs(&mut self) -> std::io::Result<()> {
        let entries = match std::fs::read_dir(&self.blobs_dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(err),
        };
        let mut present = HashSet::new();
        let mut synced_any = false;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if !self.synced_blobs.contains(&name) {
                match File::open(entry.path()) {
                    Ok(file) => file.sync_all()?,
                    // sled removed it in the meantime: nothing to make durable.
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(err) => return Err(err),
                }
                synced_any = true;
            }
            present.insert(name);
        }
        if synced_any {
            File::open(&self.blobs_dir)?.sync_all()?;
        }
        self.synced_blobs = present;
        Ok(())
    }

    /// After a successful final flush: the floor becomes the exact next sequence, so the next
    /// open continues without a gap.
    fn close_floor(&mut self) -> Result<(), String> {
        self.seq_floor
            .write(self.next_seq)
            .map_err(|err| err.to_string())
    }

    /// Rebuilds the projection from the log if it was built with another layout than
    /// [`keys::CURRENT_PROJECTION_FORMAT`] (or never built: a new database); the log is the
    /// source of truth, so an upgrade never loses anything. Returns the events replayed.
    pub(crate) fn ensure_projection_format(&mut self) -> Result<u64, SinkError> {
        let stored = self
            .tree
            .get(keys::PROJECTION_FORMAT)?
            .and_then(|bytes| keys::decode_u64(&bytes));
        if stored == Some(keys::CURRENT_PROJECTION_FORMAT) {
            return Ok(0);
        }
        let replayed = self.rebuild_durably()?;
        if replayed > 0 {
            tracing::info!(
                replayed,
                from = ?stored,
                to = keys::CURRENT_PROJECTION_FORMAT,
                "rebuilt the projection from the log for the new layout"
            );
        }
        Ok(replayed)
    }

    /// [`Writer::rebuild`] between two checkpoints. The projection's format key is removed by
    /// the first, so a crash mid-rebuild leaves a projection that the next open rebuilds again,
    /// never a half-built one taken for current; the rebuild's own writes are not journaled.
    fn rebuild_durably(&mut self) -> Result<u64, SinkError> {
        self.tree.remove(keys::PROJECTION_FORMAT)?;
        self.checkpoint().map_err(SinkError::Io)?;
        let replayed = self.rebuild()?;
        self.checkpoint().map_err(SinkError::Io)?;
        Ok(replayed)
    }

    /// Clears every projection key and replays the whole log through the projection, then
    /// records the projection layout.
    fn rebuild(&mut self) -> Result<u64, SinkError> {
        for prefix in keys::PROJECTION_PREFIXES {
            let mut batch = sled::Batch::default();
            for entry in self.tree.scan_prefix(prefix) {
                batch.remove(entry?.0);
            }
            self.tree.apply_batch(batch)?;
        }
        let mut replayed = 0u64;
        let mut chunk = Vec::new();
        for entry in self.tree.scan_prefix(keys::LOG) {
            let (key, value) = entry?;
            chunk.push(Event::from_json(&value).map_err(|err| SinkError::Corrupt {
                key: super::show_key(&key),
                reason: err.to_string(),
            })?);
            if chunk.len() == 10_000 {
                replayed += self.replay(&std::mem::take(&mut chunk))?;
            }
        }
        replayed += self.replay(&chunk)?;
        self.tree.insert(
            keys::PROJECTION_FORMAT,
            &keys::CURRENT_PROJECTION_FORMAT.to_be_bytes(),
        )?;
        Ok(replayed)
    }

    fn replay(&self, events: &[Event]) -> Result<u64, SinkError> {
        let first_seq = events.first().map_or(0, |e| e.seq);
        let mut staged = Staged::new(&self.tree, first_seq);
        for event in events {
            staged.stage_events(std::slice::from_ref(event), None)?;
        }
        self.tree
            .apply_batch(journal::batch(staged.into_writes()))?;
        Ok(events.len() as u64)
    }

    /// After sled recovered and the journal was replayed: checkpoints, so the replayed
    /// segments are deleted and the next crash replays only what follows.
    pub(crate) fn settle_replay(&mut self) -> Result<(), SinkError> {
        self.flush().map_err(|reason| {
            SinkError::Io(format!(
                "cannot checkpoint after replaying the journal (it was kept): {reason}"
            ))
        })?;
        self.rotate_journal();
        Ok(())
    }
}

/// Turns every stored (non-empty) answer of a group into the error `error` makes of its events.
fn fail_stored(
    answers: &mut [(Reply, Result<Vec<Event>, SinkError>)],
    error: impl Fn(Vec<Event>) -> SinkError,
) {
    for (_, result) in answers.iter_mut() {
        if matches!(result, Ok(events) if !events.is_empty()) {
            if let Ok(events) = std::mem::replace(result, Ok(Vec::new())) {
                *result = Err(error(events));
            }
        }
    }
}
