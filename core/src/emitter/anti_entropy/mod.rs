//! Anti-entropy: re-publishes this node's acknowledged events that the stream lost.
//!
//! A JetStream PubAck means the server has the message, not that it reached the disk: with
//! the server's default `sync_interval` (2 min) a crash of the NATS host can lose messages it
//! acknowledged, and an operator (or a bug) can delete messages. The sink still holds every
//! such event and has marked it published, so the reconciler never sends it again.
//!
//! So every durable event the bus acknowledges (on the emit path or by the reconciler) is
//! remembered (`tracked`: per second, the log sequences as ranges and the span of stream
//! sequences their PubAcks named, a few dozen bytes however many events). Every `interval` a
//! pass reads the `Nats-Msg-Id` of every message the stream holds over the tracked span, in
//! bulk ([`Bus::scan_ids`]: headers only, thousands per request), and compares this node's ids
//! with what it tracks. A missing one is read back from the sink ([`Sink::stored`]: only what
//! the sink holds is ever published) and published again under a repair id,
//! `{event_id}~anti-entropy-{unix ms}`: the stream's duplicate window remembers a deleted
//! message's id, and a re-publish under the original id inside it is answered "duplicate" and
//! **not stored**. The payload is unchanged, so consumers still drop a copy they hold by
//! `(node, seq)`. The repaired copy is checked in turn. An event is forgotten once a pass
//! finds it held more than `horizon` after it was acknowledged (it outlived the server's sync
//! window), or when the stream's own limits removed it. Nothing here changes the stream.
//!
//! The sink keeps every log segment holding a tracked event ([`Sink::hold_log_from`]: lowered
//! at once when an older event is acknowledged, set exactly after each pass), so a lost event
//! can always be read back. The age of the oldest tracked acknowledgement is a gauge
//! (`dlq_anti_entropy_oldest_unchecked_age_seconds`): about `horizon` plus `interval` when the
//! passes keep up. Past `max_tracked` ranges the oldest events are dropped unchecked, counted
//! and logged, never silently.
//!
//! What is remembered lives in memory: events acknowledged by a process that has since
//! stopped are not checked (`dlq republish` compares the whole log with the stream).

mod seqs;
mod tracked;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::bus::{Bus, BusError, Published};
use crate::metrics as m;
use crate::sink::{Sink, SinkError};
pub(crate) use tracked::Tracked;
use tracked::{Found, Start};

/// One bucket of acknowledgements per this much time.
const SLICE: Duration = Duration::from_secs(1);

/// How anti-entropy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AntiEntropyConfig {
    /// Whether acknowledged events are checked at all.
    pub enabled: bool,
    /// Time between passes.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How long after its acknowledgement an event must still be found in the stream before
    /// it is no longer checked: longer than the server's `sync_interval` (2 min by default)
    /// plus the time a crashed server takes to come back.
    #[serde(with = "humantime_serde")]
    pub horizon: Duration,
    /// Most stream messages one pass reads (the acknowledgements past it wait for the next
    /// passes).
    pub max_checks_per_pass: usize,
    /// Most ranges of log sequences remembered (a few dozen bytes each: 1,000,000 is at most
    /// ~50 MiB; events acknowledged in order take one range per second whatever the rate);
    /// past it the oldest events are no longer checked, and that is counted and logged.
    pub max_tracked: usize,
}

impl Default for AntiEntropyConfig {
    fn default() -> Self {
        AntiEntropyConfig {
            enabled: true,
            interval: Duration::from_secs(30),
            horizon: Duration::from_secs(300),
            max_checks_per_pass: 50_000_000,
            max_tracked: 1_000_000,
        }
    }
}

/// What anti-entropy has done since the emitter was built (per emitter; the metrics are the
/// process-wide sums).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AntiEntropyStats {
    /// Passes that completed.
    pub passes: u64,
    /// Events checked.
    pub checked: u64,
    /// Events found missing.
    pub missing: u64,
    /// Missing events the stream stored again.
    pub republished: u64,
    /// Re-publishes answered as duplicates (not stored; checked again next pass).
    pub duplicates: u64,
    /// Events remembered now.
    pub tracked: u64,
}

/// Tells the sink the lowest log sequence anti-entropy may still need ([`Sink::hold_log_from`]).
pub(crate) struct LogHold(Box<dyn Fn(Option<u64>) + Send + Sync>);

impl std::fmt::Debug for LogHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogHold")
    }
}

/// Shared between the emitter (which records acknowledgements) and the task.
#[derive(Debug)]
pub(crate) struct Tracker {
    set: Mutex<Tracked>,
    hold: LogHold,
    /// The floor the sink was last given (0: none).
    held: AtomicU64,
    passes: AtomicU64,
    checked: AtomicU64,
    missing: AtomicU64,
    republished: AtomicU64,
    duplicates: AtomicU64,
}

impl Tracker {
    /// `hold` is told, whenever it changes, the lowest log sequence still tracked: the log
    /// must keep its segment.
    pub(crate) fn new(
        config: &AntiEntropyConfig,
        hold: impl Fn(Option<u64>) + Send + Sync + 'static,
    ) -> Self {
        Tracker {
            set: Mutex::new(Tracked::new(config.max_tracked, SLICE)),
            hold: LogHold(Box::new(hold)),
            held: AtomicU64::new(0),
            passes: AtomicU64::new(0),
            checked: AtomicU64::new(0),
            missing: AtomicU64::new(0),
            republished: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
        }
    }

    fn set(&self) -> std::sync::MutexGuard<'_, Tracked> {
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers that the bus acknowledged the stored event `seq` (JetStream only: a PubAck
    /// without a stream sequence cannot be checked).
    pub(crate) fn acknowledged(&self, seq: u64, msg_id: &str, published: &Published) {
        if let Some(stream_seq) = published.stream_seq {
            let recorded = {
                let mut set = self.set();
                let recorded = set.record(seq, msg_id, stream_seq, Instant::now());
                if recorded.is_some() {
                    self.lower_floor(seq);
                }
                recorded
            };
            self.recorded(seq, msg_id, recorded);
        }
    }

    /// Keeps the log from `seq` on at once, when the sink was told a higher floor (an old
    /// event the reconciler published late), rather than only at the end of the next pass.
    /// Called with the set locked, so it cannot cross [`Tracker::hold_floor`].
    fn lower_floor(&self, seq: u64) {
        let held = self.held.load(Ordering::SeqCst);
        if held == 0 || seq < held {
            self.held.store(seq, Ordering::SeqCst);
            (self.hold.0)(Some(seq));
        }
    }

    /// Tells the sink the floor of `set` (which the caller holds locked).
    fn hold_floor(&self, set: &Tracked) {
        let floor = set.floor();
        self.held.store(floor.unwrap_or(0), Ordering::SeqCst);
        (self.hold.0)(floor);
    }

    /// Counts and logs what recording an acknowledgement left unchecked.
    fn recorded(&self, seq: u64, msg_id: &str, recorded: Option<u64>) {
        match recorded {
            None => warn!(
                seq,
                msg_id, "anti-entropy cannot check an event whose id does not end in its sequence"
            ),
            Some(0) => {}
            Some(dropped) => {
                metrics::counter!(m::ANTI_ENTROPY_DROPPED).increment(dropped);
                warn!(dropped, "anti-entropy tracks too many scattered sequences (max_tracked): the oldest acknowledged events are no longer checked");
            }
        }
    }

    pub(crate) fn stats(&self) -> AntiEntropyStats {
        AntiEntropyStats {
            passes: self.passes.load(Ordering::Relaxed),
            checked: self.checked.load(Ordering::Relaxed),
            missing: self.missing.load(Ordering::Relaxed),
            republished: self.republished.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            tracked: self.set().len(),
        }
    }
}

/// Why a pass stopped early; the next pass tries again.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PassError {
    /// The stream could not be read, or a re-publish was not acknowledged.
    #[error("anti-entropy: {0}; will try again next pass")]
    Bus(#[from] BusError),
    /// The sink could not be read.
    #[error("anti-entropy cannot read the sink: {0}; will try again next pass")]
    Sink(#[from] SinkError),
}

/// The background task; built by [`crate::emitter::EmitterBuilder`].
pub(crate) struct AntiEntropy<S, B> {
    pub(crate) sink: Arc<S>,
    pub(crate) bus: Arc<B>,
    pub(crate) config: AntiEntropyConfig,
    pub(crate) tracker: Arc<Tracker>,
    pub(crate) shutdown: CancellationToken,
}

impl<S: Sink, B: Bus> AntiEntropy<S, B> {
    /// Runs a pass every `interval` until shutdown.
    pub(crate) async fn run(self) {
        if !self.bus.can_probe() {
            debug!("the bus keeps no stream: anti-entropy does not run");
            return;
        }
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.config.interval) => {}
            }
            if !self.bus.is_healthy() {
                continue;
            }
            match self.pass().await {
                Ok(0) => {}
                Ok(republished) => {
                    warn!(republished, "anti-entropy re-published events the stream had lost after acknowledging them")
                }
                Err(err) => info!("{err}"),
            }
        }
    }

    /// Checks the tracked events due (all of them, within `max_checks_per_pass` messages read);
    /// returns how many events the stream stored again.
    pub(crate) async fn pass(&self) -> Result<u64, PassError> {
        let budget = self.config.max_checks_per_pass as u64;
        let due = self.tracker.set().due(budget);
        let mut republished = 0;
        if let Some(due) = due {
            let mut found: Found = due
                .prefixes
                .iter()
                .map(|prefix| (prefix.clone(), Default::default()))
                .collect::<HashMap<_, _>>();
            let now = Instant::now();
            let extent = {
                let mut visit = |_stream_seq: u64, msg_id: &str| {
                    if let Some((prefix, seq)) = tracked::split_id(msg_id) {
                        if let Some(seqs) = found.get_mut(prefix) {
                            seqs.insert(seq);
                        }
                    }
                };
                self.bus.scan_ids(due.lo, due.hi, &mut visit).await?
            };
            let start = Start {
                first_seq: extent.first_seq,
                limited: extent.limited,
            };
            let settled = self
                .tracker
                .set()
                .settle(&due, &found, start, now, self.config.horizon);
            self.count(
                &self.tracker.checked,
                m::ANTI_ENTROPY_CHECKED,
                settled.checked,
            );
            if !settled.missing.is_empty() {
                // The events' publish marks durable first, so no power cut can have the
                // reconciler publish them again beside their repairs.
                self.sink.sync_publish_marks().await?;
            }
            for (prefix, seq) in settled.missing {
                self.count(&self.tracker.missing, m::ANTI_ENTROPY_MISSING, 1);
                republished += self.repair(&prefix, seq).await?;
            }
        }
        self.tracker.passes.fetch_add(1, Ordering::Relaxed);
        self.publish_state();
        Ok(republished)
    }

    /// Sets the gauges and tells the sink which log sequences must stay.
    fn publish_state(&self) {
        let (len, oldest) = {
            let set = self.tracker.set();
            self.tracker.hold_floor(&set);
            (set.len(), set.oldest())
        };
        metrics::gauge!(m::ANTI_ENTROPY_TRACKED).set(len as f64);
        let age = oldest.map_or(0.0, |at| at.elapsed().as_secs_f64());
        metrics::gauge!(m::ANTI_ENTROPY_OLDEST_UNCHECKED_AGE).set(age);
        metrics::gauge!(m::ANTI_ENTROPY_LAST_PASS).set(unix_now());
    }

    /// Publishes the stored copy of the lost event `seq` again; 1 when the stream stored it.
    async fn repair(&self, prefix: &str, seq: u64) -> Result<u64, PassError> {
        let Some(event) = self.sink.stored(seq)? else {
            warn!(
                seq,
                "anti-entropy: the stream lost an event the sink no longer has; not re-published"
            );
            self.tracker.set().forget(prefix, seq);
            return Ok(0);
        };
        let msg_id = repair_id(&event.event_id, unix_millis());
        let published = self.bus.publish_encoded_as(&event, &msg_id).await?;
        let Some(stream_seq) = published.stream_seq else {
            self.tracker.set().forget(prefix, seq);
            return Ok(0);
        };
        let recorded = {
            let mut set = self.tracker.set();
            let recorded = set.replace(seq, &msg_id, stream_seq, Instant::now());
            if recorded.is_some() {
                self.tracker.lower_floor(seq);
            }
            recorded
        };
        self.tracker.recorded(seq, &msg_id, recorded);
        if published.duplicate {
            // Only if this repair id was used before; the entry now names that message and
            // the next pass checks it.
            self.count(&self.tracker.duplicates, m::ANTI_ENTROPY_DUPLICATES, 1);
            warn!(event_id = %event.event_id, msg_id, "anti-entropy re-publish answered as a duplicate; checking it again next pass");
            return Ok(0);
        }
        self.count(&self.tracker.republished, m::ANTI_ENTROPY_REPUBLISHED, 1);
        info!(event_id = %event.event_id, msg_id, stream_seq, "anti-entropy re-published an event the stream had lost");
        Ok(1)
    }

    fn count(&self, counter: &AtomicU64, metric: &'static str, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(metric).increment(n);
    }
}

/// The `Nats-Msg-Id` a repaired event goes out under: its event id, marked and stamped so
/// that the duplicate window (which remembers the lost message's id) cannot drop it.
pub(crate) fn repair_id(event_id: &str, unix_millis: u128) -> String {
    format!("{event_id}~anti-entropy-{unix_millis}")
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repair_id_keeps_the_event_id_and_differs_from_it() {
        let id = repair_id("n:7", 1_700_000_000_123);
        assert_eq!(id, "n:7~anti-entropy-1700000000123");
        assert_ne!(repair_id("n:7", 1), repair_id("n:7", 2));
    }

    #[test]
    fn defaults_outlast_the_servers_sync_interval() {
        let config = AntiEntropyConfig::default();
        assert!(config.enabled);
        assert!(config.horizon > Duration::from_secs(120));
        assert!(config.interval < config.horizon);
    }
}
