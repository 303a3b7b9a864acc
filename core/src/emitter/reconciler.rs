//! The reconciler: publishes every event the bus never acknowledged.
//!
//! It wakes every `interval` (or when the emitter gives up on a publish), and when the bus is
//! healthy walks the sink's unpublished set in sequence order, publishing up to `max_in_flight`
//! events at a time (pipelined acks) with their original `event_id`, optionally rate-limited.
//! A pass stops at the first failure and resumes from the start of the set on the next wake, so
//! order is kept and nothing is skipped. The backlog gauges (`dlq_unpublished_events`, the
//! oldest's age, `dlq_parked_events`) are read once per `interval` and after a pass that
//! published, not on every wake. Because the unpublished set is persisted, a restarted
//! process resumes where the last one stopped.
//!
//! Two failures are not worth waiting for: the bus refusing an event for good
//! (`crate::bus::BusError::is_permanent`, e.g. larger than the server's `max_payload`) and a
//! log entry that cannot be read ([`SinkError::Unreadable`]). Retrying either would stop every
//! pass at the same event and every later event behind it, so the reconciler **parks** it
//! ([`Sink::park`]: still stored, listed by `dlq status`, retried by
//! `dlq reconcile --retry-parked`), counts `dlq_parked_total{reason}`, logs it and goes on.
//! Before parking it publishes a stand-in at the event's place in its chain
//! (`super::stand_in`), so no consumer waits for it: a stub (id, item, reason, size) for an
//! event refused for good, whose full event follows once the bus takes it; a loss marker
//! (counted, `dlq_loss_markers_total`) for an entry that cannot be read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::stream::{FuturesOrdered, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::bus::Bus;
use crate::domain::event::{EncodedEvent, Event};
use crate::emitter::anti_entropy::Tracker;
use crate::emitter::stand_in;
use crate::emitter::InFlight;
use crate::metrics as m;
use crate::sink::{Sink, SinkError};

/// How the reconciler runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcilerConfig {
    /// Whether a reconciler runs at all. Off, events whose publish failed stay unpublished until
    /// a process with a reconciler (`dlq reconcile`) runs: only for drills comparing with the
    /// baseline of a sink-then-publish emitter without a reconciler.
    pub enabled: bool,
    /// How often it checks the backlog and the bus.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Most publishes awaiting an acknowledgement at once.
    pub max_in_flight: usize,
    /// Most events published per second; `None` for no limit.
    pub rate_limit: Option<u32>,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig {
            enabled: true,
            interval: Duration::from_secs(1),
            max_in_flight: 256,
            rate_limit: None,
        }
    }
}

/// The background task; built by [`crate::emitter::EmitterBuilder`].
pub(crate) struct Reconciler<S, B> {
    pub(crate) sink: Arc<S>,
    pub(crate) bus: Arc<B>,
    pub(crate) config: ReconcilerConfig,
    pub(crate) in_flight: InFlight,
    pub(crate) wake: Arc<Notify>,
    pub(crate) shutdown: CancellationToken,
    /// Where acknowledged events are remembered for anti-entropy, when it runs.
    pub(crate) tracker: Option<Arc<Tracker>>,
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PassReport {
    /// Events acknowledged in this pass.
    pub published: u64,
    /// Events parked in this pass (refused for good, or unreadable).
    pub parked: u64,
    /// Whether the pass stopped on a failure.
    pub interrupted: bool,
}

impl<S: Sink, B: Bus> Reconciler<S, B> {
    /// Runs until shutdown.
    pub(crate) async fn run(self) {
        let mut reported: Option<tokio::time::Instant> = None;
        loop {
            // Once per interval, not per wake: while the bus is down every failed emit wakes the
            // reconciler, and reading the backlog (the oldest event from the log, the parked
            // set) thousands of times a second took the emitters' cores (docs/benchmarks.md).
            if reported.is_none_or(|at| at.elapsed() >= self.config.interval) {
                self.report_backlog();
                reported = Some(tokio::time::Instant::now());
            }
            let ready = self.bus.is_healthy() && {
                let prepared = self.bus.prepare().await;
                if let Err(err) = &prepared {
                    warn!(error = %err, "bus not ready; will retry");
                }
                prepared.is_ok()
            };
            if ready {
                match self.pass().await {
                    Ok(report) if report.published > 0 || report.parked > 0 => {
                        info!(
                            published = report.published,
                            parked = report.parked,
                            "reconciler published backlog"
                        );
                        self.report_backlog();
                        reported = Some(tokio::time::Instant::now());
                    }
                    Ok(_) => {}
                    Err(err) => warn!(error = %err, "reconciler cannot read the sink"),
                }
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.config.interval) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// Publishes unpublished events in order until the set is empty or a publish fails.
    ///
    /// Publishes are pipelined: up to `max_in_flight` await their acks while the next events
    /// are read from the sink, and each ack frees a slot for the next event at once.
    pub(crate) async fn pass(&self) -> Result<PassReport, SinkError> {
        let window = self.config.max_in_flight.max(1);
        let mut report = PassReport::default();
        let mut source = Unpublished::new(window);
        let mut pending = FuturesOrdered::new();
        let (started, mut sent) = (Instant::now(), 0u64);
        loop {
            while pending.len() < window && !report.interrupted && !self.shutdown.is_cancelled() {
                let event = match source.next(self.sink.as_ref(), &self.in_flight) {
                    Ok(Some(event)) => event,
                    Ok(None) => break,
                    // Parked, the entry leaves the unpublished set: the next read goes past it.
                    // A loss marker takes its place in its chain first.
                    Err(SinkError::Unreadable { seq, reason, .. }) => {
                        if !self.publish_loss_marker(seq, &reason).await? {
                            report.interrupted = true;
                            continue;
                        }
                        self.park(seq, None, &reason, "unreadable", &mut report)?;
                        continue;
                    }
                    Err(err) => return Err(err),
                };
                sent += 1;
                self.pace(started, sent).await;
                let bus = self.bus.as_ref();
                pending.push_back(async move {
                    let result = bus.publish_encoded(&event).await;
                    (event, result)
                });
            }
            let Some((event, result)) = pending.next().await else {
                return Ok(report);
            };
            match result {
                Ok(published) => {
                    self.sink.mark_published(event.seq)?;
                    if let Some(tracker) = &self.tracker {
                        tracker.acknowledged(event.seq, &event.event_id, &published);
                    }
                    metrics::counter!(m::RECONCILED).increment(1);
                    report.published += 1;
                }
                Err(err) if err.is_permanent() => {
                    let reason = err.to_string();
                    // A stub takes its place in its chain first, so consumers go on.
                    if !self.publish_stub(&event, &reason).await {
                        report.interrupted = true;
                        continue;
                    }
                    self.park(
                        event.seq,
                        Some(&event.event_id),
                        &reason,
                        err.label(),
                        &mut report,
                    )?;
                }
                Err(err) => {
                    debug!(event_id = %event.event_id, error = %err, "reconcile publish failed");
                    report.interrupted = true;
                }
            }
        }
    }

    /// Publishes the stub of `event`, which the bus refused for good ([`Event::stub`]); false
    /// when the bus failed in a way worth retrying (the pass stops; the event stays
    /// unpublished). An event that cannot be decoded, or a stub refused too, is parked
    /// without one (logged: consumers then wait for it until the gap is accepted).
    async fn publish_stub(&self, event: &EncodedEvent, reason: &str) -> bool {
        let stub = match event.decode() {
            Ok(full) => full.stub(reason, event.json.len() as u64),
            Err(err) => {
                warn!(event_id = %event.event_id, error = %err, "cannot decode the refused event: parked without a stub");
                return true;
            }
        };
        self.publish_stand_in(&stub, "stub").await
    }

    /// Publishes the loss marker of the unreadable entry `seq` ([`stand_in::loss_marker`]);
    /// false when the bus failed in a way worth retrying.
    async fn publish_loss_marker(&self, seq: u64, reason: &str) -> Result<bool, SinkError> {
        let Some(marker) = stand_in::loss_marker(self.sink.as_ref(), seq, reason)? else {
            return Ok(true);
        };
        metrics::counter!(m::LOSS_MARKERS).increment(1);
        Ok(self.publish_stand_in(&marker, "loss marker").await)
    }

    async fn publish_stand_in(&self, stand_in: &Event, what: &str) -> bool {
        match self.bus.publish(stand_in).await {
            Ok(_) => true,
            Err(err) if err.is_permanent() => {
                warn!(event_id = %stand_in.event_id, error = %err, "the bus refused the {what} too: consumers wait for this event until the gap is accepted");
                true
            }
            Err(err) => {
                debug!(event_id = %stand_in.event_id, error = %err, "publishing the {what} failed");
                false
            }
        }
    }

    /// Sets an event aside that can never be published as it is, so the rest can be.
    fn park(
        &self,
        seq: u64,
        event_id: Option<&str>,
        reason: &str,
        label: &'static str,
        report: &mut PassReport,
    ) -> Result<(), SinkError> {
        if self.sink.park(seq, event_id, reason)? {
            metrics::counter!(m::PARKED_TOTAL, "reason" => label).increment(1);
            warn!(
                seq,
                event_id = event_id.unwrap_or("?"),
                reason,
                "event parked: it stays stored and is listed by `dlq status`; `dlq reconcile --retry-parked` tries it again"
            );
            report.parked += 1;
        }
        Ok(())
    }

    /// Sleeps so that `total` events take at least `total / rate` seconds since `started`.
    async fn pace(&self, started: Instant, total: u64) {
        let Some(rate) = self.config.rate_limit.filter(|r| *r > 0) else {
            return;
        };
        let due = Duration::from_secs_f64(total as f64 / f64::from(rate));
        let elapsed = started.elapsed();
        if due > elapsed {
            tokio::select! {
                _ = tokio::time::sleep(due - elapsed) => {}
                _ = self.shutdown.cancelled() => {}
            }
        }
    }

    fn report_backlog(&self) {
        match self.sink.backlog() {
            Ok(backlog) => {
                metrics::gauge!(m::UNPUBLISHED).set(backlog.count as f64);
                let age = backlog
                    .oldest
                    .map(|oldest| (Utc::now() - oldest).num_milliseconds().max(0) as f64 / 1000.0)
                    .unwrap_or(0.0);
                metrics::gauge!(m::OLDEST_UNPUBLISHED_AGE).set(age);
            }
            Err(err) => warn!(error = %err, "cannot read the unpublished backlog"),
        }
        match self.sink.parked() {
            Ok(parked) => metrics::gauge!(m::PARKED).set(parked.len() as f64),
            Err(err) => warn!(error = %err, "cannot read the parked events"),
        }
    }
}

/// The sink's unpublished events in sequence order, read `chunk` at a time, without those the
/// emitter is publishing itself.
struct Unpublished {
    chunk: usize,
    after: u64,
    buffered: std::collections::VecDeque<EncodedEvent>,
    exhausted: bool,
}

impl Unpublished {
    fn new(chunk: usize) -> Self {
        Unpublished {
            chunk,
            after: 0,
            buffered: Default::default(),
            exhausted: false,
        }
    }

    /// The next event to publish; `None` once the set is read to its end.
    fn next<S: Sink>(
        &mut self,
        sink: &S,
        busy: &InFlight,
    ) -> Result<Option<EncodedEvent>, SinkError> {
        while self.buffered.is_empty() && !self.exhausted {
            let batch = sink.unpublished(self.after, self.chunk)?;
            let Some(last) = batch.last() else {
                self.exhausted = true;
                break;
            };
            self.after = last.seq;
            let busy = busy.lock().map(|set| set.clone()).unwrap_or_default();
            self.buffered
                .extend(batch.into_iter().filter(|e| !busy.contains(&e.seq)));
        }
        Ok(self.buffered.pop_front())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use tokio::time::Instant;

    use super::*;
    use crate::domain::command::Command;
    use crate::testing::{item, FakeBus, MemorySink};

    async fn reconciler(
        events: usize,
        bus: FakeBus,
        config: ReconcilerConfig,
    ) -> Reconciler<MemorySink, FakeBus> {
        let sink = MemorySink::default();
        for n in 0..events {
            let job = format!("job-{}", n % 3);
            let command = Command::DeadLetter {
                topic: "t".into(),
                item: item(&job, &format!("i{n}")).into(),
            };
            sink.append(command).await.unwrap();
        }
        Reconciler {
            sink: Arc::new(sink),
            bus: Arc::new(bus),
            config,
            in_flight: InFlight::default(),
            wake: Arc::new(Notify::new()),
            shutdown: CancellationToken::new(),
            tracker: None,
        }
    }

    fn ids(n: usize) -> Vec<String> {
        (1..=n).map(|seq| format!("mem:{seq}")).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn publishes_in_sequence_order_within_the_window() {
        let bus = FakeBus {
            latency: Duration::from_millis(10),
            ..FakeBus::default()
        };
        let config = ReconcilerConfig {
            max_in_flight: 4,
            ..ReconcilerConfig::default()
        };
        let r = reconciler(30, bus, config).await;
        let report = r.pass().await.unwrap();
        assert_eq!(report.published, 30);
        assert_eq!(*r.bus.attempts.lock().unwrap(), ids(30));
        assert_eq!(r.bus.max_in_flight.load(Ordering::SeqCst), 4);
        assert_eq!(r.sink.backlog().unwrap().count, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_stops_the_pass_and_the_next_pass_resumes() {
        let bus = FakeBus {
            fail_first: 1.into(),
            ..FakeBus::default()
        };
        let config = ReconcilerConfig {
            max_in_flight: 5,
            ..ReconcilerConfig::default()
        };
        let r = reconciler(12, bus, config).await;
        let first = r.pass().await.unwrap();
        assert!(first.interrupted);
        assert_eq!(
            first.published, 4,
            "the rest of the first window still lands"
        );
        assert_eq!(r.sink.backlog().unwrap().count, 8);
        let second = r.pass().await.unwrap();
        assert!(!second.interrupted);
        assert_eq!(second.published, 8);
        let acked: std::collections::BTreeSet<String> =
            r.bus.acked.lock().unwrap().iter().cloned().collect();
        assert_eq!(acked, ids(12).into_iter().collect());
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_refused_for_good_is_parked_and_the_rest_published() {
        let bus = FakeBus {
            fail_first: 1.into(),
            reject: true.into(),
            ..FakeBus::default()
        };
        let r = reconciler(5, bus, ReconcilerConfig::default()).await;
        let report = r.pass().await.unwrap();
        assert_eq!(
            (report.published, report.parked, report.interrupted),
            (4, 1, false)
        );
        let parked = r.sink.parked().unwrap();
        assert_eq!(parked.len(), 1);
        assert_eq!(parked[0].event_id.as_deref(), Some("mem:1"));
        assert_eq!(r.sink.backlog().unwrap().count, 0, "parked is not backlog");
        assert_eq!(r.pass().await.unwrap(), PassReport::default(), "left alone");

        // Retried on command: back in the unpublished set, published once the bus takes it.
        assert_eq!(r.sink.unpark_all().unwrap(), 1);
        assert_eq!(r.pass().await.unwrap().published, 1);
        assert!(r.sink.parked().unwrap().is_empty());
        // The four others, the stub that stood in for mem:1 meanwhile, and mem:1 itself.
        let acked = r.bus.acked.lock().unwrap().clone();
        assert_eq!(acked.len(), 6, "{acked:?}");
        assert!(acked.iter().any(|id| id == "mem:1~held"), "{acked:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_spreads_publishes_over_time() {
        let config = ReconcilerConfig {
            max_in_flight: 10,
            rate_limit: Some(50),
            ..ReconcilerConfig::default()
        };
        let r = reconciler(100, FakeBus::default(), config).await;
        let started = Instant::now();
        assert_eq!(r.pass().await.unwrap().published, 100);
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn events_the_emitter_is_publishing_are_left_alone() {
        let r = reconciler(3, FakeBus::default(), ReconcilerConfig::default()).await;
        r.in_flight.lock().unwrap().insert(2);
        assert_eq!(r.pass().await.unwrap().published, 2);
        assert_eq!(*r.bus.attempts.lock().unwrap(), vec!["mem:1", "mem:3"]);
    }

    #[tokio::test(start_paused = true)]
    async fn run_waits_for_a_healthy_bus() {
        let bus = FakeBus {
            unhealthy: true.into(),
            ..FakeBus::default()
        };
        let r = reconciler(2, bus, ReconcilerConfig::default()).await;
        let (sink, bus, shutdown) = (r.sink.clone(), r.bus.clone(), r.shutdown.clone());
        let task = tokio::spawn(r.run());
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(bus.attempts.lock().unwrap().is_empty());
        bus.unhealthy.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(sink.backlog().unwrap().count, 0);
        shutdown.cancel();
        task.await.unwrap();
    }
}
