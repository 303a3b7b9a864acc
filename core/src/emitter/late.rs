//! `Unconfirmed` means "stored, or reported". A caller told [`super::EmitError::Unconfirmed`]
//! does not emit again: the writer has its request and stores it late. If that late write
//! fails (the group was refused: nothing of it is kept), the emitter still holds a copy of the
//! dead-letter, and keeps it until one of two things happens:
//!
//! - the sink stores it again (a new append: durable, in its node's chain, published by the
//!   reconciler like any stored event, and kept over restarts);
//! - or the bus takes it as a volatile event (published, not stored), as for any dead-letter
//!   the sink did not store.
//!
//! Both are tried at once and then every [`RETRY`], counted in `dlq_unstored_waiting`
//! meanwhile. At shutdown one last store is tried before the sink closes. Only a shutdown (or
//! crash) before either succeeds loses it: logged as an error and counted
//! (`dlq_unstored_dropped_total`). The task holds a handle to the emitter while it waits.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, error, info, warn};

use super::Emitter;
use crate::bus::Bus;
use crate::domain::command::Command;
use crate::domain::event::{Event, EventKind};
use crate::metrics as m;
use crate::sink::{LateAnswer, Sink, SinkError};

/// How often a waiting copy is offered to the sink and the bus again.
const RETRY: Duration = Duration::from_secs(1);

/// Where a late-failed write's copy ended.
enum Kept {
    Stored,
    Published,
    Not,
}

impl<S: Sink, B: Bus> Emitter<S, B> {
    /// Waits for the writer's late answer; if the late write failed, counts it
    /// (`dlq_late_store_failures_total`) and keeps the dead-letter as the module doc says.
    pub(super) fn watch_late_answer(&self, topic: &str, late: LateAnswer, volatile: Option<Event>) {
        let emitter = self.clone();
        let topic = topic.to_owned();
        let task = tokio::spawn(async move {
            let Some(Err(err)) = late.wait().await else {
                return;
            };
            metrics::counter!(m::LATE_STORE_FAILURES, "topic" => topic.clone()).increment(1);
            let Some(event) = volatile else {
                error!(error = %err, topic, "a write reported as stored late failed, and it is not a dead-letter: nothing can be kept in its place");
                return;
            };
            warn!(error = %err, topic, event_id = %event.event_id, "a write reported as stored late failed; storing it again, or publishing it as a volatile event");
            emitter.keep_late_failed(&topic, &event).await;
        });
        if let Ok(mut tasks) = self.inner.tasks.lock() {
            tasks.retain(|task| !task.is_finished());
            tasks.push(task);
        }
    }

    /// Volatile copies of late-failed writes still waiting to be stored or published.
    pub fn unstored_waiting(&self) -> u64 {
        self.inner.unstored_waiting.load(Ordering::Relaxed)
    }

    async fn keep_late_failed(&self, topic: &str, event: &Event) {
        self.inner.unstored_waiting.fetch_add(1, Ordering::Relaxed);
        self.report_waiting();
        let mut publish = true;
        loop {
            match self.try_keep(topic, event, &mut publish).await {
                Kept::Stored | Kept::Published => break,
                Kept::Not => {}
            }
            let shutdown = tokio::select! {
                _ = self.inner.shutdown.cancelled() => true,
                _ = tokio::time::sleep(RETRY) => false,
            };
            if shutdown {
                if !matches!(self.store_again(topic, event).await, Kept::Stored) {
                    metrics::counter!(m::UNSTORED_DROPPED).increment(1);
                    error!(topic, event_id = %event.event_id, "shut down before a write whose late store failed could be stored or published: this failure is lost");
                }
                break;
            }
        }
        self.inner.unstored_waiting.fetch_sub(1, Ordering::Relaxed);
        self.report_waiting();
    }

    /// One try: store it again, else publish it (while the bus has not refused it for good).
    async fn try_keep(&self, topic: &str, event: &Event, publish: &mut bool) -> Kept {
        if let Kept::Stored = self.store_again(topic, event).await {
            return Kept::Stored;
        }
        if !*publish {
            return Kept::Not;
        }
        match self.inner.bus.publish(event).await {
            Ok(_) => {
                metrics::counter!(m::PUBLISHED, "topic" => topic.to_owned()).increment(1);
                info!(topic, event_id = %event.event_id, "published the volatile copy of a write whose late store failed");
                Kept::Published
            }
            Err(err) if err.is_permanent() => {
                warn!(error = %err, topic, event_id = %event.event_id, "the bus refused the volatile copy for good; only storing it again is tried now");
                *publish = false;
                Kept::Not
            }
            Err(err) => {
                debug!(error = %err, event_id = %event.event_id, "volatile copy not published yet");
                Kept::Not
            }
        }
    }

    /// Appends the dead-letter anew (a new sequence; the refused group's are burned).
    async fn store_again(&self, topic: &str, event: &Event) -> Kept {
        let EventKind::DeadLettered { item } = &event.kind else {
            return Kept::Not;
        };
        let command = Command::DeadLetter {
            topic: topic.to_owned(),
            item: item.clone(),
        };
        let (result, late) = self.inner.sink.append_with_late(command).await;
        let result = match (result, late) {
            (Err(SinkError::Unconfirmed(_)), Some(late)) => match late.wait().await {
                Some(result) => result,
                None => Err(SinkError::Closed),
            },
            (result, _) => result,
        };
        match result {
            Ok(stored) => {
                let ids: Vec<&str> = stored.iter().map(|e| e.event_id.as_str()).collect();
                info!(topic, volatile_id = %event.event_id, stored = ?ids, "stored again a write whose late store failed");
                self.inner.wake_reconciler.notify_one();
                Kept::Stored
            }
            Err(err) => {
                debug!(error = %err, event_id = %event.event_id, "storing a late-failed write again failed");
                Kept::Not
            }
        }
    }

    fn report_waiting(&self) {
        let now = self.inner.unstored_waiting.load(Ordering::Relaxed);
        metrics::gauge!(m::UNSTORED_WAITING).set(now as f64);
    }
}
