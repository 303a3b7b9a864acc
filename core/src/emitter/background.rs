//! The durable-only promise: [`Emitter::store`] returns once the sink made the events durable
//! and leaves publishing to a background task, bounded so that a bus outage never queues
//! unbounded work.
//!
//! Each stored emit either
//! - spawns one background task that publishes its events with the topic's attempts and
//!   delays (see `publish`: in-flight set, final-failure metric, `EmitFailed` audit event and
//!   reconciler wake, exactly as [`Emitter::dead_letter`]), holding one of
//!   [`EmitterBuilder::background_limit`](super::EmitterBuilder::background_limit) slots; or
//! - when the bus is known down, every slot is taken, or the emitter is shutting down, spawns
//!   nothing: its events are durable and unpublished, the reconciler publishes them once the
//!   bus is healthy, and `dlq_emit_deferred_total{topic,reason}` counts them once.
//!
//! No event is lost either way (the sink's unpublished set holds it until a PubAck), and each
//! is counted once: published, failed, or deferred. [`Emitter::shutdown`] cancels the tasks'
//! retry delays and waits for every slot to come back before it closes the sink, so no task
//! publishes or appends an audit event after the sink closed.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tracing::debug;

use super::publish::{PublishOutcome, Waiter};
use super::{EmitError, Emitter};
use crate::bus::Bus;
use crate::domain::command::Command;
use crate::domain::model::DeadLetteredItem;
use crate::metrics as m;
use crate::sink::{Appended, Sink};

/// Background publishes running at once unless the builder says otherwise.
pub(super) const DEFAULT_LIMIT: usize = 1024;

/// What a durable-only emit achieved: its events are durable; the publish may still be running.
#[derive(Debug)]
pub struct StoredReceipt {
    /// Ids of the events written, in order (an eviction comes before the item it made room for).
    pub event_ids: Vec<String>,
    publish: Pending,
}

#[derive(Debug)]
enum Pending {
    Known(PublishOutcome),
    Running(oneshot::Receiver<PublishOutcome>),
}

impl StoredReceipt {
    /// Waits for the background publish and says how it ended. Dropping the receipt instead
    /// changes nothing: the publish goes on.
    pub async fn outcome(self) -> PublishOutcome {
        match self.publish {
            Pending::Known(outcome) => outcome,
            // The task ended without a word (its runtime stopped): what it did not publish
            // is still unpublished in the sink.
            Pending::Running(answer) => answer.await.unwrap_or(PublishOutcome::LeftToReconciler),
        }
    }

    /// Waits for the background publish; true when the bus acknowledged every event.
    pub async fn published(self) -> bool {
        self.outcome().await == PublishOutcome::Published
    }
}

/// The slots of the background publishes: bounds them and lets shutdown wait for them.
pub(super) struct Background {
    slots: Arc<Semaphore>,
    limit: u32,
}

impl Background {
    pub(super) fn new(limit: usize) -> Self {
        let limit = limit.min(Semaphore::MAX_PERMITS).min(u32::MAX as usize) as u32;
        Background {
            slots: Arc::new(Semaphore::new(limit as usize)),
            limit,
        }
    }

    fn try_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// Waits until every background publish has ended; none starts afterwards.
    pub(super) async fn drain(&self) {
        if let Ok(all) = self.slots.acquire_many(self.limit).await {
            all.forget();
        }
        self.slots.close();
    }
}

impl<S: Sink, B: Bus> Emitter<S, B> {
    /// Dead-letters a failed item and returns once it is durable; publishing goes on in the
    /// background (see [`StoredReceipt`]). Never waits longer than the sink's store timeout,
    /// whatever the bus does.
    pub async fn store(
        &self,
        topic: &str,
        item: DeadLetteredItem,
    ) -> Result<StoredReceipt, EmitError> {
        let command = Command::DeadLetter {
            topic: topic.to_owned(),
            item: item.into(),
        };
        self.submit_stored(topic, command).await
    }

    /// Stores any command's events and returns once they are durable, publishing them in the
    /// background as [`Emitter::store`] does. Sink failures are those of [`Emitter::submit`].
    pub async fn submit_stored(
        &self,
        topic: &str,
        command: Command,
    ) -> Result<StoredReceipt, EmitError> {
        let started = Instant::now();
        let result = self
            .append(topic, command)
            .await
            .map(|events| self.publish_in_background(topic, events));
        metrics::histogram!(m::EMIT_DURATION).record(started.elapsed().as_secs_f64());
        result
    }

    fn publish_in_background(&self, topic: &str, events: Vec<Appended>) -> StoredReceipt {
        let event_ids = events.iter().map(|a| a.event_id().to_owned()).collect();
        if events.is_empty() {
            return StoredReceipt {
                event_ids,
                publish: Pending::Known(PublishOutcome::Published),
            };
        }
        let slot = if self.inner.shutdown.is_cancelled() {
            Err("shutdown")
        } else if !self.inner.bus.is_healthy() {
            Err("bus_down")
        } else {
            self.inner.background.try_slot().ok_or("pending_limit")
        };
        let publish = match slot {
            Ok(slot) => {
                let (answer, outcome) = oneshot::channel();
                let (emitter, topic) = (self.clone(), topic.to_owned());
                tokio::spawn(async move {
                    let outcome = emitter
                        .publish_all(&topic, &events, true, Waiter::Background)
                        .await;
                    // The emitter clone goes before the slot: shutdown waits for the slots,
                    // and a caller may open the data directory again once it returned.
                    drop(emitter);
                    drop(slot);
                    let _ = answer.send(outcome);
                });
                Pending::Running(outcome)
            }
            Err(reason) => {
                metrics::counter!(m::EMIT_DEFERRED, "topic" => topic.to_owned(), "reason" => reason)
                    .increment(events.len() as u64);
                debug!(
                    topic,
                    reason,
                    events = events.len(),
                    "publish left to the reconciler"
                );
                self.inner.wake_reconciler.notify_one();
                Pending::Known(PublishOutcome::LeftToReconciler)
            }
        };
        StoredReceipt { event_ids, publish }
    }
}

#[cfg(test)]
mod tests;
