//! The single writer thread: decides, applies and group-commits every write.
//!
//! The thread drains every request already queued (up to `max_group`), applies each append as
//! one atomic sled batch, then calls the blocking `flush` once for the whole group and answers
//! every waiter. It is the only code that flushes the database.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use chrono::Utc;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::reads::TreeView;
use super::seq_floor::SeqFloor;
use super::sled_sink::MAX_VALUE_BYTES;
use super::{keys, Faults, SinkError};
use crate::decide::{decide, Command, DecideError, Limits};
use crate::event::Event;
use crate::metrics as m;
use crate::projection::{apply, Change, StateView, StoredItem};

/// A message to the writer thread.
pub(crate) enum Request {
    /// Store the events of a command; answer once durable.
    Append {
        command: Box<Command>,
        reply: oneshot::Sender<Result<Vec<Event>, SinkError>>,
    },
    /// Clear the projection and replay the log; answer with the number of events replayed.
    Rebuild {
        reply: oneshot::Sender<Result<u64, SinkError>>,
    },
    /// Flush if publish marks are waiting (sent periodically).
    Tick,
    /// Flush and stop.
    Close {
        reply: oneshot::Sender<Result<(), SinkError>>,
    },
}

/// State owned by the writer thread.
pub(crate) struct Writer {
    pub(crate) db: sled::Db,
    /// sled's log file, fdatasync'd after each flush (see [`Writer::flush`]).
    pub(crate) log_file: std::fs::File,
    /// Reserved sequence numbers, so ids are never reused (see [`super::seq_floor`]).
    pub(crate) seq_floor: SeqFloor,
    pub(crate) tree: sled::Tree,
    pub(crate) node_id: String,
    pub(crate) next_seq: u64,
    pub(crate) limits: Limits,
    pub(crate) max_event_bytes: usize,
    pub(crate) max_group: usize,
    pub(crate) faults: Faults,
    pub(crate) unpublished: Arc<AtomicU64>,
    pub(crate) marks_dirty: Arc<AtomicBool>,
}

type Reply = oneshot::Sender<Result<Vec<Event>, SinkError>>;

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
        if let Err(err) = self.flush().and_then(|()| self.close_floor()) {
            warn!(error = %err, "final flush of the sink failed");
        }
    }

    /// After a successful final flush: the floor becomes the exact next sequence, so the next
    /// open continues without a gap.
    fn close_floor(&mut self) -> Result<(), String> {
        self.seq_floor
            .write(self.next_seq)
            .map_err(|err| err.to_string())
    }

    /// Handles one group; returns true when asked to stop.
    fn handle_group(&mut self, group: Vec<Request>) -> bool {
        let stall = self.faults.stall();
        if !stall.is_zero() {
            std::thread::sleep(stall);
        }
        let mut answered: Vec<(Reply, Result<Vec<Event>, SinkError>)> = Vec::new();
        let mut closing = Vec::new();
        let mut need_flush = self.marks_dirty.swap(false, Ordering::SeqCst);
        for request in group {
            match request {
                Request::Append { command, reply } => {
                    let result = self.append(&command);
                    need_flush |= matches!(&result, Ok(events) if !events.is_empty());
                    answered.push((reply, result));
                }
                Request::Rebuild { reply } => {
                    let result = self.rebuild();
                    need_flush = true;
                    let _ = reply.send(result);
                }
                Request::Tick => {}
                Request::Close { reply } => {
                    need_flush = true;
                    closing.push(reply);
                }
            }
        }
        let flushed = if need_flush { self.flush() } else { Ok(()) };
        for (reply, result) in answered {
            if let (Ok(()), Ok(events)) = (&flushed, &result) {
                for event in events {
                    metrics::counter!(m::EVENTS_STORED, "kind" => event.kind.name()).increment(1);
                }
            }
            let result = match (&flushed, result) {
                (Err(reason), Ok(events)) if !events.is_empty() => Err(SinkError::NotDurable {
                    events,
                    reason: reason.clone(),
                }),
                (_, result) => result,
            };
            // A waiter that gave up (store timeout) is gone; its events are still stored.
            let _ = reply.send(result);
        }
        let stop = !closing.is_empty();
        let flushed = match (&flushed, stop) {
            (Ok(()), true) => self.close_floor(),
            _ => flushed,
        };
        for reply in closing {
            let _ = reply.send(flushed.clone().map_err(SinkError::Io));
        }
        stop
    }

    fn flush(&self) -> Result<(), String> {
        if self.faults.fail_flush() {
            return Err("injected flush fault".into());
        }
        // sled 0.34's flush writes the log with sync_file_range on Linux: data pages reach the
        // device, but neither its volatile cache nor the file size are made durable. The
        // fdatasync that follows does both, once per group.
        let bytes = self.db.flush().map_err(|err| err.to_string())?;
        self.log_file
            .sync_data()
            .map_err(|err| format!("fdatasync of the log failed: {err}"))?;
        debug!(bytes, "sink group flushed and synced");
        Ok(())
    }

    /// Decides and applies one command as one atomic batch (not yet flushed).
    fn append(&mut self, command: &Command) -> Result<Vec<Event>, SinkError> {
        if self.faults.fail_writes() {
            return Err(SinkError::Io("injected write fault".into()));
        }
        let view = TreeView { tree: &self.tree };
        let drafts = decide(&view, command, self.limits).map_err(|err| match err {
            DecideError::NotFound { job_id, item_id } => SinkError::NotFound { job_id, item_id },
            DecideError::State(err) => err,
            other => SinkError::Rejected(other.to_string()),
        })?;
        if drafts.is_empty() {
            return Ok(Vec::new());
        }
        let now = Utc::now();
        let mut staged = Staged::new(&self.tree);
        let mut events = Vec::with_capacity(drafts.len());
        let mut seq = self.next_seq;
        for draft in drafts {
            let event = Event {
                event_id: Event::stored_id(&self.node_id, seq),
                node_id: self.node_id.clone(),
                seq,
                timestamp: now,
                job_id: draft.job_id,
                topic: draft.topic,
                kind: draft.kind,
            };
            let json = event
                .to_json()
                .map_err(|err| SinkError::Io(err.to_string()))?;
            if json.len() > self.max_event_bytes {
                return Err(SinkError::Rejected(format!(
                    "event of {} bytes exceeds the limit of {} bytes (max_event_bytes): shorten item_data or the failure texts",
                    json.len(),
                    self.max_event_bytes
                )));
            }
            staged.batch.insert(keys::log(seq), json);
            let millis = now.timestamp_millis().max(0).to_be_bytes();
            staged.batch.insert(keys::unpublished(seq), &millis);
            staged.apply_event(&event)?;
            events.push(event);
            seq += 1;
        }
        staged.batch.insert(keys::NEXT_SEQ, &seq.to_be_bytes());
        let batch = staged.finish()?;
        self.seq_floor.reserve(seq - 1)?;
        self.tree.apply_batch(batch)?;
        self.next_seq = seq;
        self.unpublished
            .fetch_add(events.len() as u64, Ordering::SeqCst);
        Ok(events)
    }

    /// Clears every projection key and replays the whole log through [`apply`].
    fn rebuild(&mut self) -> Result<u64, SinkError> {
        for prefix in keys::PROJECTION_PREFIXES {
            let mut batch = sled::Batch::default();
            for entry in self.tree.scan_prefix(prefix) {
                batch.remove(entry?.0);
            }
            self.tree.apply_batch(batch)?;
        }
        let view = TreeView { tree: &self.tree };
        let mut replayed = 0;
        let mut staged = Staged::new(&self.tree);
        for entry in self.tree.scan_prefix(keys::LOG) {
            let (key, _) = entry?;
            let Some(seq) = keys::seq_of(&key) else {
                continue;
            };
            if let Some(event) = view.event(seq)? {
                staged.apply_event(&event)?;
                replayed += 1;
            }
            if replayed % 10_000 == 0 {
                let batch = std::mem::replace(&mut staged, Staged::new(&self.tree)).finish()?;
                self.tree.apply_batch(batch)?;
            }
        }
        self.tree.apply_batch(staged.finish()?)?;
        Ok(replayed)
    }
}

/// A batch being built, with the state it has changed so far (so that several events in one
/// batch see each other's effects).
struct Staged<'a> {
    view: TreeView<'a>,
    batch: sled::Batch,
    items: HashMap<(String, String), Option<StoredItem>>,
    counts: HashMap<String, u64>,
}

impl<'a> Staged<'a> {
    fn new(tree: &'a sled::Tree) -> Self {
        Staged {
            view: TreeView { tree },
            batch: sled::Batch::default(),
            items: HashMap::new(),
            counts: HashMap::new(),
        }
    }

    /// Folds one event into the batch: item, indexes and job count.
    fn apply_event(&mut self, event: &Event) -> Result<(), SinkError> {
        let Some(item_id) = event.kind.item_id() else {
            return Ok(());
        };
        let key = (event.job_id.clone(), item_id.to_owned());
        let previous = match self.items.get(&key) {
            Some(staged) => staged.clone(),
            None => self.view.item(&key.0, &key.1)?,
        };
        match apply(previous.as_ref(), event) {
            Change::Put { item, previous } => {
                if let Some(previous) = &previous {
                    self.unindex(previous);
                } else {
                    self.add_count(&event.job_id, 1)?;
                }
                let value =
                    serde_json::to_vec(&*item).map_err(|err| SinkError::Io(err.to_string()))?;
                if value.len() > MAX_VALUE_BYTES {
                    return Err(SinkError::Rejected(format!(
                        "item '{}' of job '{}' would grow to {} bytes with this failure (limit {MAX_VALUE_BYTES}): resolve, clear or purge it",
                        key.1,
                        key.0,
                        value.len()
                    )));
                }
                self.batch.insert(keys::item(&key.0, &key.1), value);
                self.index(&item);
                self.items.insert(key, Some(*item));
            }
            Change::Delete { previous } => {
                self.unindex(&previous);
                self.batch.remove(keys::item(&key.0, &key.1));
                self.add_count(&event.job_id, -1)?;
                self.items.insert(key, None);
            }
            Change::Unchanged => {}
        }
        Ok(())
    }

    fn index(&mut self, stored: &StoredItem) {
        let item = &stored.item;
        let ms = item.first_attempt.timestamp_millis();
        self.batch.insert(
            keys::by_signature(&item.error_signature, &item.job_id, &item.item_id),
            &[],
        );
        self.batch
            .insert(keys::by_age(ms, &item.job_id, &item.item_id), &[]);
        self.batch.insert(
            keys::fifo(&item.job_id, stored.created_seq, &item.item_id),
            &[],
        );
    }

    fn unindex(&mut self, stored: &StoredItem) {
        let item = &stored.item;
        let ms = item.first_attempt.timestamp_millis();
        self.batch.remove(keys::by_signature(
            &item.error_signature,
            &item.job_id,
            &item.item_id,
        ));
        self.batch
            .remove(keys::by_age(ms, &item.job_id, &item.item_id));
        self.batch
            .remove(keys::fifo(&item.job_id, stored.created_seq, &item.item_id));
    }

    fn add_count(&mut self, job_id: &str, delta: i64) -> Result<(), SinkError> {
        let current = match self.counts.get(job_id) {
            Some(count) => *count,
            None => self.view.job_len(job_id)?,
        };
        let next = current.saturating_add_signed(delta);
        self.counts.insert(job_id.to_owned(), next);
        Ok(())
    }

    fn finish(mut self) -> Result<sled::Batch, SinkError> {
        for (job, count) in self.counts.drain() {
            if count == 0 {
                self.batch.remove(keys::job_count(&job));
            } else {
                self.batch
                    .insert(keys::job_count(&job), &count.to_be_bytes());
            }
        }
        Ok(self.batch)
    }
}
