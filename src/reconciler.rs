//! The reconciler: publishes every event the bus never acknowledged.
//!
//! It wakes every `interval` (or when the emitter gives up on a publish), and when the bus is
//! healthy walks the sink's unpublished set in sequence order, publishing up to `max_in_flight`
//! events at a time (pipelined acks) with their original `event_id`, optionally rate-limited.
//! A pass stops at the first failure and resumes from the start of the set on the next wake, so
//! order is kept and nothing is skipped. Because the unpublished set is persisted, a restarted
//! process resumes where the last one stopped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::bus::Bus;
use crate::emitter::InFlight;
use crate::event::Event;
use crate::metrics as m;
use crate::sink::{Sink, SinkError};

/// How the reconciler runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReconcilerConfig {
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
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassReport {
    /// Events acknowledged in this pass.
    pub published: u64,
    /// Whether the pass stopped on a failure.
    pub interrupted: bool,
}

impl<S: Sink, B: Bus> Reconciler<S, B> {
    /// Runs until shutdown.
    pub(crate) async fn run(self) {
        loop {
            self.report_backlog();
            let ready = self.bus.is_healthy() && {
                let prepared = self.bus.prepare().await;
                if let Err(err) = &prepared {
                    warn!(error = %err, "bus not ready; will retry");
                }
                prepared.is_ok()
            };
            if ready {
                match self.pass().await {
                    Ok(report) if report.published > 0 => {
                        info!(published = report.published, "reconciler published backlog");
                        self.report_backlog();
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
    pub(crate) async fn pass(&self) -> Result<PassReport, SinkError> {
        let window = self.config.max_in_flight.max(1);
        let mut report = PassReport::default();
        let mut after = 0;
        let started = Instant::now();
        loop {
            if self.shutdown.is_cancelled() {
                return Ok(report);
            }
            let batch = self.sink.unpublished(after, window)?;
            let Some(last) = batch.last() else {
                return Ok(report);
            };
            after = last.seq;
            let todo: Vec<Event> = {
                let busy = self
                    .in_flight
                    .lock()
                    .map(|set| set.clone())
                    .unwrap_or_default();
                batch
                    .into_iter()
                    .filter(|e| !busy.contains(&e.seq))
                    .collect()
            };
            self.pace(started, report.published + todo.len() as u64)
                .await;
            let results = join_all(todo.iter().map(|event| self.bus.publish(event))).await;
            for (event, result) in todo.iter().zip(results) {
                match result {
                    Ok(_) => {
                        self.sink.mark_published(event.seq)?;
                        metrics::counter!(m::RECONCILED).increment(1);
                        report.published += 1;
                    }
                    Err(err) => {
                        debug!(event_id = %event.event_id, error = %err, "reconcile publish failed");
                        report.interrupted = true;
                    }
                }
            }
            if report.interrupted {
                return Ok(report);
            }
        }
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
    }
}
