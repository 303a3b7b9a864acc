//! Publishing a command's stored events under its topic's policy, for both promises of the
//! emitter: [`Emitter::dead_letter`] (the caller waits) and the background publish of
//! [`Emitter::store`] (nobody waits).
//!
//! The topic's attempts and delays are one budget per emit, shared by its events, so
//! [`Emitter::budget`] holds for every command. An event being published is in the in-flight
//! set, which the reconciler leaves alone. After a final failure the rest are not tried: the
//! failure is counted (`dlq_emit_failures_total{topic}`), audited (`EmitFailed`) and the
//! reconciler woken; it publishes what is left once the bus is healthy.
//!
//! The one difference between the two: a background publish gives up as soon as the bus is
//! known down (a retry delay ends early, counted as the final failure), because nothing waits
//! for it and the reconciler publishes the backlog when the bus is back. A caller's retries
//! sleep their delays in full, as the policy says.

use std::time::Duration;

use foldhash::HashSet;
use tracing::{debug, warn};

use super::{Emitter, TopicPolicy};
use crate::bus::{Bus, BusError, Published};
use crate::domain::command::Command;
use crate::metrics as m;
use crate::sink::{Appended, Sink};

/// How often a background retry delay checks whether the bus is still connected.
const HEALTH_POLL: Duration = Duration::from_millis(250);

/// Who waits for a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiter {
    /// The emit call: retry delays are slept in full.
    Caller,
    /// A background task: a retry delay ends, and the publish gives up, once the bus is known
    /// down or the emitter shuts down.
    Background,
}

/// How publishing an emit's events ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The bus acknowledged every event of the emit.
    Published,
    /// An event's publish attempts ran out: counted in `dlq_emit_failures_total{topic}` and
    /// audited with an `EmitFailed` event. The reconciler publishes what is unpublished.
    Failed,
    /// Not (all) tried: the bus was known down, too many background publishes were pending,
    /// or the emit's retry budget was spent. The events are durable and unpublished; the
    /// reconciler publishes them once the bus is healthy.
    LeftToReconciler,
}

/// What is left of one emit's publish budget: the topic's delays, one per retry. The first
/// attempt is free; each retry takes the next delay, whichever event it is for.
struct Attempts {
    delays: std::vec::IntoIter<Duration>,
    first_used: bool,
}

impl Attempts {
    fn new(policy: &TopicPolicy) -> Self {
        Attempts {
            delays: policy.delays().into_iter(),
            first_used: false,
        }
    }

    /// Takes the first attempt of the next event: the free one for the first event, a retry's
    /// slot (without its delay: nothing failed) for a later one. True when nothing is left.
    fn spent(&mut self) -> bool {
        if !self.first_used {
            self.first_used = true;
            return false;
        }
        self.delays.next().is_none()
    }

    /// The delay before the next retry, if the budget has one.
    fn retry(&mut self) -> Option<Duration> {
        self.delays.next()
    }
}

impl<S: Sink, B: Bus> Emitter<S, B> {
    /// Publishes the events in order, each as the bytes the sink stored when it gave them
    /// (encoded once), else encoded here. After a final failure, or once the budget is spent,
    /// the rest are not tried: they stay unpublished for the reconciler. `durable` is false for
    /// the volatile copy of an event the sink failed to store (no in-flight mark, no audit).
    pub(super) async fn publish_all(
        &self,
        topic: &str,
        events: &[Appended],
        durable: bool,
        waiter: Waiter,
    ) -> PublishOutcome {
        let mut budget = Attempts::new(&self.inner.policies.for_topic(topic));
        for event in events {
            if budget.spent() {
                self.inner.wake_reconciler.notify_one();
                return PublishOutcome::LeftToReconciler;
            }
            if !self
                .publish_one(topic, event, durable, &mut budget, waiter)
                .await
            {
                return PublishOutcome::Failed;
            }
        }
        PublishOutcome::Published
    }

    async fn publish_one(
        &self,
        topic: &str,
        appended: &Appended,
        durable: bool,
        budget: &mut Attempts,
        waiter: Waiter,
    ) -> bool {
        let seq = appended.seq();
        if durable {
            self.in_flight(|set| set.insert(seq));
        }
        let outcome = self.publish_with_retry(appended, budget, waiter).await;
        if durable {
            if let Ok(published) = &outcome {
                if let Err(err) = self.inner.sink.mark_published(seq) {
                    warn!(error = %err, event_id = %appended.event_id(), "cannot mark event published; it will be published again");
                }
                if let Some(tracker) = &self.inner.tracker {
                    tracker.acknowledged(seq, appended.event_id(), published);
                }
            }
            self.in_flight(|set| set.remove(&seq));
        }
        match outcome {
            Ok(_) => {
                metrics::counter!(m::PUBLISHED, "topic" => topic.to_owned()).increment(1);
                true
            }
            Err((attempts, err)) => {
                // Boxed, as the retry wait below: cold paths kept out of every emit's future.
                Box::pin(self.record_emit_failure(topic, appended, attempts, err, durable)).await;
                false
            }
        }
    }

    async fn publish_with_retry(
        &self,
        appended: &Appended,
        budget: &mut Attempts,
        waiter: Waiter,
    ) -> Result<Published, (u32, BusError)> {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let published = match appended {
                Appended::Encoded(encoded) => self.inner.bus.publish_encoded(encoded).await,
                Appended::Event(event) => self.inner.bus.publish(event).await,
            };
            let err = match published {
                Ok(published) => return Ok(published),
                Err(err) => err,
            };
            debug!(event_id = %appended.event_id(), attempts, error = %err, "publish attempt failed");
            let retryable = !err.is_permanent();
            let Some(delay) = budget.retry().filter(|_| retryable) else {
                return Err((attempts, err));
            };
            if !Box::pin(self.wait_to_retry(delay, waiter)).await {
                return Err((attempts, err));
            }
        }
    }

    /// Sleeps a retry delay; false when the retry should not be made (shutdown, or for a
    /// background publish, the bus known down).
    async fn wait_to_retry(&self, delay: Duration, waiter: Waiter) -> bool {
        let shutdown = self.inner.shutdown.cancelled();
        match waiter {
            Waiter::Caller => tokio::select! {
                _ = tokio::time::sleep(delay) => true,
                _ = shutdown => false,
            },
            Waiter::Background => tokio::select! {
                _ = tokio::time::sleep(delay) => self.inner.bus.is_healthy(),
                _ = shutdown => false,
                _ = self.bus_down() => false,
            },
        }
    }

    /// Resolves once the bus reports itself disconnected.
    async fn bus_down(&self) {
        while self.inner.bus.is_healthy() {
            tokio::time::sleep(HEALTH_POLL).await;
        }
    }

    async fn record_emit_failure(
        &self,
        topic: &str,
        event: &Appended,
        attempts: u32,
        err: BusError,
        durable: bool,
    ) {
        metrics::counter!(m::EMIT_FAILURES, "topic" => topic.to_owned()).increment(1);
        let event_id = event.event_id();
        warn!(event_id, topic, attempts, error = %err, "publish failed after every retry");
        if durable {
            let audit = Command::RecordEmitFailure {
                job_id: event.job_id().to_owned(),
                topic: topic.to_owned(),
                failed_event_id: event_id.to_owned(),
                attempts,
                error: err.to_string(),
            };
            if let Err(err) = self.inner.sink.append(audit).await {
                metrics::counter!(m::SINK_FAILURES).increment(1);
                warn!(error = %err, "cannot store the emit-failure audit event");
            }
        }
        self.inner.wake_reconciler.notify_one();
    }

    fn in_flight(&self, change: impl FnOnce(&mut HashSet<u64>) -> bool) {
        if let Ok(mut set) = self.inner.in_flight.lock() {
            change(&mut set);
        }
    }
}
