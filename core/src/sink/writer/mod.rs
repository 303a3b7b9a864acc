//! The single writer thread: decides, logs, applies and checkpoints every write.
//!
//! The thread drains every request already queued (up to `max_group`), decides each append on
//! top of the ones before it ([`Staged`], over the groups not applied yet), appends the group's
//! events to the segment log with one write and one `fdatasync` ([`LogWriter::append`]), hands
//! the group's projection changes to the applier thread ([`crate::sink::projection::applier`]), and answers
//! every waiter: `Ok` means durable in the log. Applying to sled runs beside the next group's
//! `fdatasync`; a query made after an answer waits for it (read your writes).
//!
//! A **checkpoint** makes sled durable (sled's `flush`, an `fdatasync` of sled's log file, an
//! fsync of new blob files), with the publish state saved in it first, and then deletes the log
//! segments that are applied, checkpointed, published and past retention ([`Retention`]). It
//! runs on a tick ([`super::SinkConfig::checkpoint_every`]) when anything changed, on close and
//! around a rebuild. A tick's flush runs on a thread of its own ([`BackgroundFlush`]) while the
//! writer goes on; its segments are deleted by the first group after it ended.
//!
//! If the log refuses a group (ENOSPC, EIO on write, sync, create, rename), nothing of it is
//! applied or acknowledged, its sequences are burned, and the next group starts a new segment:
//! the sink recovers by itself once the disk does. If sled refuses a group's projection after
//! the log made it durable, the group is still acknowledged (it is durable) and the next group
//! first applies the log from sled's mark on; while that fails, appends are refused.
//!
//! # Who owns an append: the [`Claim`]
//!
//! Every append carries a claim that the writer and the waiting caller race for. The writer
//! claims a request when it takes it into a group, before deciding it; a caller whose store
//! timeout ran out withdraws it. Exactly one of them wins. A withdrawn request is dropped
//! unread, so a caller that withdrew knows its command will never be stored and may fall back
//! (the emitter's volatile publish); a caller that lost the race knows the writer has it and
//! will store it or fail it, so it must not send a second copy.

pub(crate) mod checkpoint;
mod checkpoints;
pub(super) mod epoch;
pub(super) mod log_node;
pub(super) mod log_retention;
mod rebuild;
pub(super) mod seq_floor;
mod ticker;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use chrono::Utc;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::domain::command::{decide, Command, DecideError, Limits};
use crate::domain::event::{EncodedEvent, Event};
use crate::metrics as m;
use crate::sink::log::{LogError, LogWriter};
use crate::sink::log_fs::Fs;
use crate::sink::projection::applier::{Applied, Job, Jobs};
use crate::sink::projection::known_items::KnownItems;
use crate::sink::projection::projector;
use crate::sink::projection::publish_state::PublishState;
use crate::sink::projection::staged::Staged;
use crate::sink::{Appended, Faults, SinkError};
use checkpoint::{BackgroundFlush, SharedFlusher};
use epoch::Epoch;
use log_retention::Retention;
pub(super) use ticker::spawn_ticker;

/// A message to the writer thread.
pub(crate) enum Request {
    /// Store the events of a command; answer once durable.
    Append {
        command: Box<Command>,
        reply: oneshot::Sender<Answer>,
        /// Taken by the writer, or withdrawn by a caller that stopped waiting.
        claim: Claim,
        /// Answer with the whole events ([`Appended::Event`]); otherwise with their bytes only
        /// ([`Appended::Encoded`]), and each new item moves into the projection uncopied.
        whole: bool,
    },
    /// Rebuild the projection from the log and the items kept whole; answer with the number
    /// of events applied.
    Rebuild {
        reply: oneshot::Sender<Result<u64, SinkError>>,
    },
    /// Checkpoint if anything changed since the last one (sent periodically).
    Tick,
    /// Checkpoint now.
    Checkpoint {
        reply: oneshot::Sender<Result<(), SinkError>>,
    },
    /// Checkpoint and stop.
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
    pub(crate) tree: sled::Tree,
    pub(crate) flusher: SharedFlusher,
    /// A tick's checkpoint whose flush runs beside the writer.
    pub(crate) flushing: Option<BackgroundFlush>,
    /// The event log: the source of truth.
    pub(crate) log: LogWriter<Fs>,
    /// What the applier thread has applied, and the groups it has still to apply.
    pub(crate) applied: Arc<Applied>,
    /// Where durable groups go to be applied (`None` once closing).
    pub(crate) jobs: Option<Jobs>,
    /// The applier thread, joined on close.
    pub(crate) applier: Option<std::thread::JoinHandle<()>>,
    /// True when anything was applied since the last checkpoint.
    pub(crate) changed: bool,
    pub(crate) publish: Arc<Mutex<PublishState>>,
    pub(crate) retention: Retention,
    pub(crate) node_id: String,
    /// This open's incarnation of the data directory (see [`epoch`]).
    pub(crate) epoch: Epoch,
    pub(crate) limits: Limits,
    pub(crate) max_event_bytes: usize,
    pub(crate) max_group: usize,
    pub(crate) faults: Faults,
    /// The item keys the tree may hold, so a new item is decided without reading sled.
    pub(crate) known: KnownItems,
}

/// The writer's answer to an append: each stored event with the bytes the log holds for it.
pub(crate) type Answer = Result<Vec<Appended>, SinkError>;

type Reply = oneshot::Sender<Answer>;

/// Why the log did not acknowledge a group.
enum CommitError {
    /// The log's error, shared by every append of the group.
    Log(Arc<LogError>),
    /// A test injected the failure ([`Faults`]).
    Injected,
}

impl CommitError {
    /// The text each append's [`SinkError::NotDurable`] shows.
    fn reason(&self) -> String {
        match self {
            CommitError::Log(err) => err.to_string(),
            CommitError::Injected => "injected flush fault".into(),
        }
    }

    /// The log's error, the source of each append's [`SinkError::NotDurable`].
    fn log_error(&self) -> Option<Arc<LogError>> {
        match self {
            CommitError::Log(err) => Some(err.clone()),
            CommitError::Injected => None,
        }
    }
}

impl Writer {
    /// Runs until a `Close` arrives or every sender is gone, then checkpoints one last time.
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
                self.log.store_active_sidecar();
                return;
            }
        }
        self.stop_applier();
        if let Err(err) = self.checkpoint() {
            warn!(error = %err, "final checkpoint of the sink failed");
        }
        self.log.store_active_sidecar();
    }

    /// Lets the applier finish what it was given, and joins it.
    fn stop_applier(&mut self) {
        self.jobs = None;
        self.applied.closing();
        if let Some(handle) = self.applier.take() {
            if handle.join().is_err() {
                warn!("the sink's applier thread panicked");
            }
        }
    }

    /// Handles one group; returns true when asked to stop.
    fn handle_group(&mut self, group: Vec<Request>) -> bool {
        self.faults.wait_while_paused();
        self.finish_flush(false);
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
        let commands = group
            .iter()
            .filter(|r| matches!(r, Request::Append { .. }))
            .count();
        let appends = commands > 0;
        if appends {
            self.faults.wait_stall();
        }
        let mut answers: Vec<(Reply, Answer)> = Vec::new();
        let (mut rebuilds, mut closing, mut ticked) = (Vec::new(), Vec::new(), false);
        let mut checkpoints = Vec::new();
        let caught_up = if appends { self.catch_up() } else { Ok(()) };
        self.known.poll(&self.tree, commands as u64);
        if self.known.wants_refresh() {
            // The scan must find every item staged so far in the tree.
            self.applied.wait_idle();
            self.known.refresh(&self.tree);
        }
        let first = self.log.next_seq();
        let mut seq = first;
        let mut payloads = Vec::new();
        let (base, base_first) = self.applied.base();
        let reader = self.log.reader();
        let mut staged = Staged::over(&self.tree, &reader, base, base_first.unwrap_or(first))
            .knowing(&self.known);
        staged.reserve(group.len());
        // One epoch pin around the group's decisions: sled's reads below nest in it, and a
        // nested pin never runs the garbage collection of sled's old pages (crossbeam-epoch
        // collects on every 128th outermost pin). Without it the writer freed the applier's
        // garbage, about 45 % of its time at 64 emitters (docs/benchmarks.md). `sled::pin` is
        // public in sled 0.34 but hidden from its docs; Cargo.lock holds sled at 0.34.7.
        let pinned = sled::pin();
        for request in group {
            match request {
                Request::Append {
                    command,
                    reply,
                    whole,
                    ..
                } => {
                    let result = match &caught_up {
                        Ok(()) => self.stage(&mut staged, first, &mut seq, *command, whole),
                        Err(behind) => Err(SinkError::Behind {
                            source: behind.clone(),
                        }),
                    };
                    // Each event's bytes go to the log and, shared, to the caller who
                    // publishes them: encoded once.
                    let result = result.map(|(json, appended)| {
                        payloads.extend(json);
                        appended
                    });
                    answers.push((reply, result));
                }
                Request::Rebuild { reply } => rebuilds.push(reply),
                Request::Tick => ticked = true,
                Request::Checkpoint { reply } => checkpoints.push(reply),
                Request::Close { reply } => closing.push(reply),
            }
        }
        drop(pinned);
        if !payloads.is_empty() {
            let (writes, layer) = staged.into_parts();
            self.known.staged(layer.item_keys());
            if let Err(failed) = self.commit(&payloads, writes, layer, seq) {
                fail_stored(&mut answers, |events| SinkError::NotDurable {
                    events,
                    reason: failed.reason(),
                    source: failed.log_error(),
                });
            }
        }
        count_stored(&answers);
        for (reply, result) in answers {
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
        for reply in checkpoints {
            let _ = reply.send(self.checkpoint().map_err(SinkError::from));
        }
        let stop = !closing.is_empty();
        if stop {
            self.stop_applier();
        }
        let marks = self.publish_dirty();
        let mut checkpointed = Ok(());
        if stop {
            checkpointed = self.checkpoint();
            if let Err(reason) = &checkpointed {
                warn!(%reason, "sink checkpoint failed; the log keeps every event until one succeeds");
            }
        } else if ticked && (marks || self.changed) {
            self.start_checkpoint();
        }
        for reply in closing {
            let _ = reply.send(checkpointed.clone().map_err(SinkError::from));
        }
        stop
    }

    /// Decides one command on the group's staged state; returns its events' JSON for the log
    /// and the caller's answer (`whole`: the events, else their bytes).
    fn stage(
        &self,
        staged: &mut Staged<'_>,
        group_first: u64,
        seq: &mut u64,
        command: Command,
        whole: bool,
    ) -> Result<(Vec<Bytes>, Vec<Appended>), SinkError> {
        if self.faults.fail_writes() {
            // Shaped like the disk failure it stands for.
            return Err(SinkError::Io {
                context: "injected write fault".into(),
                source: std::io::Error::other("Faults::set_fail_writes is on"),
            });
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
                // The group's first event names the last durable event when that is not
                // `seq - 1` of this epoch: the epoch's first event, or the first after a
                // group the log refused (its sequences are burned: nobody may wait for them).
                let (prev_epoch, prev_seq) = match (seq == group_first)
                    .then(|| self.epoch.predecessor(seq))
                    .flatten()
                {
                    Some((epoch, prev)) => (epoch, Some(prev)),
                    None => (None, None),
                };
                Event {
                    event_id: Event::stored_id(&self.node_id, &self.epoch.id, seq),
                    node_id: self.node_id.clone(),
                    seq,
                    epoch: Some(self.epoch.id.clone()),
                    prev_epoch,
                    prev_seq,
                    timestamp: now,
                    job_id: draft.job_id,
                    topic: draft.topic,
                    kind: draft.kind,
                }
            })
            .collect();
        let json = encode_for_log(&events, self.max_event_bytes)?;
        let appended = if whole {
            events.iter().cloned().map(Appended::unencoded).collect()
        } else {
            let with_json = events.iter().zip(&json);
            with_json
                .map(|(event, json)| {
                    Appended::Encoded(EncodedEvent::with_json(event, json.clone()))
                })
                .collect()
        };
        let count = events.len() as u64;
        staged.stage_owned(events)?;
        *seq += count;
        Ok((json, appended))
    }

    /// Makes a group durable in the log, then hands its projection to the applier. An error
    /// means the log did not acknowledge the group: nothing of it is applied and its sequences
    /// are burned.
    fn commit(
        &mut self,
        payloads: &[Bytes],
        writes: Vec<crate::sink::projection::Write>,
        layer: crate::sink::projection::staged::Layer,
        end: u64,
    ) -> Result<(), CommitError> {
        if self.faults.fail_flush() {
            self.log.skip_to(end);
            return Err(CommitError::Injected);
        }
        let range = self
            .log
            .append(payloads)
            .map_err(|err| CommitError::Log(Arc::new(err)))?;
        // One per fdatasync'd group; the benchmarks and tests read the counter
        // (`dlq_testkit::group_commits`).
        metrics::counter!(m::SINK_GROUP_COMMITS).increment(1);
        debug!(events = payloads.len(), "sink group made durable");
        self.changed = true;
        let through = range.end.saturating_sub(1);
        self.epoch.committed(through);
        if range.end != end {
            // Cannot happen: the group's sequences were taken from the log's next sequence.
            warn!(?range, end, "the log handed out other sequences than staged; the projection is applied from the log");
            self.applied
                .fail("sequences differ from the staged ones".into(), 0);
            return Ok(());
        }
        self.applied.push(range.start, through, layer);
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(Job { writes, through }).is_ok());
        if !sent {
            self.applied
                .fail("the applier thread stopped".into(), through);
        }
        Ok(())
    }

    /// After the applier stopped on a failure: waits for it to drop what it was given, then
    /// applies the log from sled's mark, so decisions see every durable event. An error
    /// refuses the group's appends.
    fn catch_up(&mut self) -> Result<(), Arc<SinkError>> {
        if self.applied.failure().is_none() {
            return Ok(());
        }
        self.applied.wait_idle();
        let from = projector::applied_through(&self.tree).unwrap_or(0);
        match projector::catch_up(&self.tree, &self.log.reader(), from) {
            Ok((through, _)) => {
                // The catch-up put items in the tree that no group of this writer staged.
                self.known.forget();
                self.applied.recovered(through);
                self.changed = true;
                Ok(())
            }
            Err(err) => Err(Arc::new(err)),
        }
    }

    fn publish_dirty(&self) -> bool {
        self.publish
            .lock()
            .map(|state| state.is_dirty())
            .unwrap_or(true)
    }
}

/// Each event's JSON, as the log stores it and the bus carries it; an event above
/// `max_event_bytes` refuses the whole command.
fn encode_for_log(events: &[Event], max_event_bytes: usize) -> Result<Vec<Bytes>, SinkError> {
    let mut payloads = Vec::with_capacity(events.len());
    for event in events {
        let json = event.to_json().map_err(|source| SinkError::Encode {
            what: format!("event {}", event.seq),
            source,
        })?;
        if json.len() > max_event_bytes {
            return Err(SinkError::Rejected(format!(
                "event of {} bytes exceeds the limit of {max_event_bytes} bytes (max_event_bytes): shorten item_data or the failure texts",
                json.len()
            )));
        }
        payloads.push(Bytes::from(json));
    }
    Ok(payloads)
}

/// Adds a group's stored events to the per-kind counter: once per kind and group (a labelled
/// counter is a registry lookup each time, a cost per event otherwise).
fn count_stored(answers: &[(Reply, Answer)]) {
    let stored = answers
        .iter()
        .filter_map(|(_, result)| result.as_ref().ok());
    for (kind, count) in tally_kinds(stored.flatten()) {
        metrics::counter!(m::EVENTS_STORED, "kind" => kind).increment(count);
    }
}

/// How many of `events` there are of each kind, kinds in order of first appearance.
fn tally_kinds<'a>(events: impl Iterator<Item = &'a Appended>) -> Vec<(&'static str, u64)> {
    let mut kinds: Vec<(&'static str, u64)> = Vec::new();
    for kind in events.map(Appended::kind_name) {
        match kinds.iter_mut().find(|(seen, _)| *seen == kind) {
            Some((_, count)) => *count += 1,
            None => kinds.push((kind, 1)),
        }
    }
    kinds
}

/// Turns every stored (non-empty) answer of a group into the error `error` makes of its events
/// (decoded again where the answer held only their bytes: a failure's cold path).
fn fail_stored(answers: &mut [(Reply, Answer)], error: impl Fn(Vec<Event>) -> SinkError) {
    for (_, result) in answers.iter_mut() {
        if matches!(result, Ok(appended) if !appended.is_empty()) {
            if let Ok(appended) = std::mem::replace(result, Ok(Vec::new())) {
                let events = appended.into_iter().filter_map(|stored| {
                    let event_id = stored.event_id().to_owned();
                    stored
                        .into_event()
                        .map_err(|err| warn!(%event_id, error = %err, "an event the log refused cannot be decoded again for its error"))
                        .ok()
                });
                *result = Err(error(events.collect()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::event::{EventKind, RemovalReason};

    fn stored(seq: u64, kind: EventKind) -> Appended {
        Appended::unencoded(Event {
            event_id: Event::stored_id("n", "00000000000000e1", seq),
            node_id: "n".into(),
            seq,
            epoch: Some("00000000000000e1".into()),
            prev_epoch: None,
            prev_seq: None,
            timestamp: Utc::now(),
            job_id: "j".into(),
            topic: "t".into(),
            kind,
        })
    }

    /// The per-kind counter of stored events goes up by every event of the group, counted
    /// once per kind.
    #[test]
    fn a_group_is_tallied_by_kind() {
        let removed = |seq| {
            stored(
                seq,
                EventKind::ItemRemoved {
                    item_id: format!("i{seq}"),
                    reason: RemovalReason::Evicted,
                    removed_by: None,
                    generation: None,
                },
            )
        };
        let audit = stored(
            2,
            EventKind::EmitFailed {
                failed_event_id: "n:00000000000000e1:1".into(),
                attempts: 3,
                error: "down".into(),
            },
        );
        let group = [removed(1), audit, removed(3), removed(4)];
        assert_eq!(
            tally_kinds(group.iter()),
            vec![("item_removed", 3), ("emit_failed", 1)]
        );
        assert!(tally_kinds(std::iter::empty()).is_empty());
    }
}
