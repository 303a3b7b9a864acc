//! The emitter: sink first, then the bus, with per-topic retries and an audit trail.
//!
//! [`Emitter::dead_letter`] is what a scheduler calls on its failure path. It returns
//! `Ok` only once the event is durable in the sink; whether the bus acknowledged it too is in
//! the [`Receipt`]. It never panics and never waits longer than [`Emitter::budget`]: the store
//! timeout plus the topic's publish attempts and delays. When publishing finally fails it counts
//! `dlq_emit_failures_total{topic}`, appends an `EmitFailed` audit event and wakes the
//! reconciler, which publishes everything left behind once the bus is back.
//!
//! When the sink fails, a dead-letter is still published without a durable copy (a volatile
//! id), but only when the sink provably never stored it: a store timeout on a request the
//! writer had already taken is [`EmitError::Unconfirmed`] and publishes nothing, because the
//! writer stores it late and the reconciler publishes that copy (see `sink::writer`, `Claim`).

pub mod anti_entropy;
pub mod reconciler;
mod retention;
mod topic_policy;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use thiserror::Error;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

pub use anti_entropy::{AntiEntropyConfig, AntiEntropyStats};
pub use reconciler::ReconcilerConfig;
pub use retention::RetentionConfig;
pub use topic_policy::{RetryBackoff, TopicPolicies, TopicPolicy};

use crate::bus::{Bus, BusError, Published};
use crate::domain::command::Command;
use crate::domain::event::{Event, EventKind};
use crate::domain::model::DeadLetteredItem;
use crate::metrics as m;
use crate::sink::{Sink, SinkError};
use anti_entropy::{AntiEntropy, Tracker};
use reconciler::Reconciler;
use retention::retention_task;

/// The emitter of a dlq process: the sled sink and NATS.
pub type NodeEmitter = Emitter<crate::sink::SledSink, crate::bus::NatsBus>;

/// What an emit achieved. Returned only when the events are durable in the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// Ids of the events written, in order (an eviction comes before the item it made room for).
    pub event_ids: Vec<String>,
    /// Whether the bus acknowledged every one of them (if not, the reconciler will publish them).
    pub published: bool,
}

/// Why an emit did not make its events durable.
#[derive(Debug, Error)]
pub enum EmitError {
    /// The request was refused; nothing was stored or published.
    #[error("refused: {0}")]
    Rejected(String),
    /// The item named does not exist; nothing changed.
    #[error("item '{item_id}' not found in job '{job_id}'")]
    NotFound {
        /// The job searched.
        job_id: String,
        /// The item asked for.
        item_id: String,
    },
    /// The sink failed and did not store the events. A dead-letter was still published to the
    /// bus under a volatile id (`published`), which is safe only because the sink provably
    /// never stored it (or, for [`SinkError::NotDurable`], published under its stored ids).
    #[error("not stored durably ({source}); published to the bus: {published}")]
    NotStored {
        /// What the sink said.
        source: SinkError,
        /// Ids of the events published anyway.
        event_ids: Vec<String>,
        /// Whether the bus acknowledged them.
        published: bool,
    },
    /// The sink's writer took the command but did not confirm it within the store timeout.
    /// It is stored late unless the disk fails (the writer then counts
    /// `dlq_sink_failures_total` and logs it), and the reconciler publishes what was stored.
    /// Nothing was published now, so the bus never holds a second copy: do not emit it again.
    #[error("{source}")]
    Unconfirmed {
        /// What the sink said ([`SinkError::Unconfirmed`]).
        source: SinkError,
    },
}

impl EmitError {
    /// True when the failure left nothing durable (callers may want to log the item themselves).
    /// False for [`EmitError::Unconfirmed`]: that command is most likely stored.
    pub fn is_not_stored(&self) -> bool {
        matches!(self, EmitError::NotStored { .. })
    }

    /// True when the sink took the command but did not confirm it in time
    /// ([`EmitError::Unconfirmed`]): treat it as recorded, never send it again.
    pub fn is_unconfirmed(&self) -> bool {
        matches!(self, EmitError::Unconfirmed { .. })
    }
}

/// Events being published by an emit call right now: the reconciler leaves them alone.
pub(crate) type InFlight = Arc<Mutex<HashSet<u64>>>;

/// A cloneable, `Send + Sync` handle that schedulers use to dead-letter failed items.
pub struct Emitter<S: Sink, B: Bus> {
    inner: Arc<Inner<S, B>>,
}

impl<S: Sink, B: Bus> Clone for Emitter<S, B> {
    fn clone(&self) -> Self {
        Emitter {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<S, B> {
    sink: Arc<S>,
    bus: Arc<B>,
    policies: TopicPolicies,
    publish_timeout: Duration,
    store_timeout: Duration,
    in_flight: InFlight,
    wake_reconciler: Arc<Notify>,
    shutdown: CancellationToken,
    volatile_counter: AtomicU64,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Acknowledged events anti-entropy checks (`None` when it is off).
    tracker: Option<Arc<Tracker>>,
}

impl<S, B> Drop for Inner<S, B> {
    fn drop(&mut self) {
        // The last handle is gone: stop the background tasks (mini-redis's DropGuard shape).
        self.shutdown.cancel();
    }
}

/// Builds an [`Emitter`].
pub struct EmitterBuilder<S, B> {
    sink: S,
    bus: B,
    policies: TopicPolicies,
    publish_timeout: Duration,
    store_timeout: Duration,
    reconciler: Option<ReconcilerConfig>,
    retention: Option<RetentionConfig>,
    anti_entropy: Option<AntiEntropyConfig>,
}

impl<S: Sink, B: Bus> EmitterBuilder<S, B> {
    /// Starts a builder with default policies and a reconciler.
    pub fn new(sink: S, bus: B) -> Self {
        EmitterBuilder {
            sink,
            bus,
            policies: TopicPolicies::default(),
            publish_timeout: Duration::from_secs(2),
            store_timeout: Duration::from_secs(2),
            reconciler: Some(ReconcilerConfig::default()),
            retention: None,
            anti_entropy: Some(AntiEntropyConfig::default()),
        }
    }

    /// Anti-entropy settings (on by default), or `None` to run without it: see
    /// [`anti_entropy`] (checks that the stream still holds what it acknowledged).
    pub fn anti_entropy(mut self, config: Option<AntiEntropyConfig>) -> Self {
        self.anti_entropy = config;
        self
    }

    /// Purge items past retention in the background (off unless set).
    pub fn retention(mut self, config: Option<RetentionConfig>) -> Self {
        self.retention = config;
        self
    }

    /// Retry policies by topic.
    pub fn policies(mut self, policies: TopicPolicies) -> Self {
        self.policies = policies;
        self
    }

    /// The per-attempt publish timeout the bus uses (only used to compute the budget).
    pub fn publish_timeout(mut self, timeout: Duration) -> Self {
        self.publish_timeout = timeout;
        self
    }

    /// The sink's store timeout (only used to compute the budget).
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// Reconciler settings, or `None` to run without one (a plain sink-then-publish emitter with no second chance).
    pub fn reconciler(mut self, config: Option<ReconcilerConfig>) -> Self {
        self.reconciler = config;
        self
    }

    /// Builds the handle and starts the reconciler (and anti-entropy, retention). Needs a
    /// Tokio runtime.
    pub fn build(self) -> Emitter<S, B> {
        let anti_entropy = self.anti_entropy.filter(|config| config.enabled);
        let tracker = anti_entropy.map(|config| Arc::new(Tracker::new(&config)));
        let inner = Arc::new(Inner {
            sink: Arc::new(self.sink),
            bus: Arc::new(self.bus),
            policies: self.policies,
            publish_timeout: self.publish_timeout,
            store_timeout: self.store_timeout,
            in_flight: InFlight::default(),
            wake_reconciler: Arc::new(Notify::new()),
            shutdown: CancellationToken::new(),
            volatile_counter: AtomicU64::new(0),
            tasks: Mutex::new(Vec::new()),
            tracker: tracker.clone(),
        });
        if let Some(config) = self.reconciler.filter(|config| config.enabled) {
            let reconciler = Reconciler {
                sink: inner.sink.clone(),
                bus: inner.bus.clone(),
                config,
                in_flight: inner.in_flight.clone(),
                wake: inner.wake_reconciler.clone(),
                shutdown: inner.shutdown.child_token(),
                tracker: tracker.clone(),
            };
            let handle = tokio::spawn(reconciler.run());
            if let Ok(mut tasks) = inner.tasks.lock() {
                tasks.push(handle);
            }
        }
        if let (Some(config), Some(tracker)) = (anti_entropy, tracker) {
            let task = AntiEntropy {
                sink: inner.sink.clone(),
                bus: inner.bus.clone(),
                config,
                tracker,
                shutdown: inner.shutdown.child_token(),
            };
            let handle = tokio::spawn(task.run());
            if let Ok(mut tasks) = inner.tasks.lock() {
                tasks.push(handle);
            }
        }
        if let Some(config) = self.retention {
            let task = retention_task(
                inner.sink.clone(),
                config,
                inner.wake_reconciler.clone(),
                inner.shutdown.child_token(),
            );
            let handle = tokio::spawn(task);
            if let Ok(mut tasks) = inner.tasks.lock() {
                tasks.push(handle);
            }
        }
        Emitter { inner }
    }
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
    /// The sink.
    pub fn sink(&self) -> &S {
        &self.inner.sink
    }

    /// The bus.
    pub fn bus(&self) -> &B {
        &self.inner.bus
    }

    /// The longest an emit on `topic` can take: the store timeout for the event, the topic's
    /// publish attempts and delays, and the store timeout again for an audit event.
    pub fn budget(&self, topic: &str) -> Duration {
        let policy = self.inner.policies.for_topic(topic);
        self.inner.store_timeout * 2 + policy.budget(self.inner.publish_timeout)
    }

    /// Dead-letters a failed item of `item.job_id`, coming from scheduler `topic`.
    pub async fn dead_letter(
        &self,
        topic: &str,
        item: DeadLetteredItem,
    ) -> Result<Receipt, EmitError> {
        let command = Command::DeadLetter {
            topic: topic.to_owned(),
            item: Box::new(item),
        };
        self.submit(topic, command).await
    }

    /// Stores any command's events, then publishes them as [`Emitter::dead_letter`] does.
    pub async fn submit(&self, topic: &str, command: Command) -> Result<Receipt, EmitError> {
        let started = Instant::now();
        let volatile = self.volatile_event(topic, &command);
        let result = match self.inner.sink.append(command).await {
            Ok(events) => {
                let published = self.publish_all(topic, &events, true).await;
                Ok(Receipt {
                    event_ids: events.into_iter().map(|e| e.event_id).collect(),
                    published,
                })
            }
            Err(SinkError::NotFound { job_id, item_id }) => {
                Err(EmitError::NotFound { job_id, item_id })
            }
            Err(SinkError::Rejected(reason)) => Err(EmitError::Rejected(reason)),
            Err(err @ SinkError::Unconfirmed(_)) => {
                // The writer has it: a volatile copy now would be a second one later.
                metrics::counter!(m::SINK_FAILURES).increment(1);
                warn!(error = %err, topic, "sink slow; the reconciler publishes the event once stored");
                self.inner.wake_reconciler.notify_one();
                Err(EmitError::Unconfirmed { source: err })
            }
            Err(err) => self.publish_unstored(topic, err, volatile).await,
        };
        metrics::histogram!(m::EMIT_DURATION).record(started.elapsed().as_secs_f64());
        result
    }

    /// The sink failed and did not store the command (or stored it without making it durable):
    /// publish what we can so the failure is not lost twice. Only reached for errors where the
    /// writer provably never stored the command (`Timeout` means it was withdrawn unread,
    /// `Io`/`Closed` that nothing was written) or handed back the stored events (`NotDurable`).
    async fn publish_unstored(
        &self,
        topic: &str,
        err: SinkError,
        volatile: Option<Event>,
    ) -> Result<Receipt, EmitError> {
        metrics::counter!(m::SINK_FAILURES).increment(1);
        warn!(error = %err, topic, "sink failed; publishing without durable copy");
        let events = match err {
            SinkError::NotDurable { ref events, .. } => events.clone(),
            _ => volatile.into_iter().collect(),
        };
        let published = !events.is_empty() && self.publish_all(topic, &events, false).await;
        Err(EmitError::NotStored {
            source: err,
            event_ids: events.into_iter().map(|e| e.event_id).collect(),
            published,
        })
    }

    /// An event to publish if the sink fails: only dead-letters can be built without state.
    fn volatile_event(&self, topic: &str, command: &Command) -> Option<Event> {
        let Command::DeadLetter { item, .. } = command else {
            return None;
        };
        let node_id = self.inner.sink.node_id();
        let now = Utc::now();
        let counter = self.inner.volatile_counter.fetch_add(1, Ordering::Relaxed);
        let nanos = now.timestamp_nanos_opt().unwrap_or(0);
        Some(Event {
            event_id: Event::volatile_id(node_id, nanos, counter),
            node_id: node_id.to_owned(),
            seq: 0,
            epoch: None,
            prev_epoch: None,
            prev_seq: None,
            timestamp: now,
            job_id: item.job_id.clone(),
            topic: topic.to_owned(),
            kind: EventKind::DeadLettered {
                item: (**item).clone(),
            },
        })
    }

    /// Publishes the events in order; true when all were acknowledged. The topic's attempts
    /// and delays are one budget for the whole emit, shared by its events (a dead-letter that
    /// evicts another item publishes two), so [`Emitter::budget`] holds for every command.
    /// After a final failure, or once the budget is spent, the rest are not tried: they stay
    /// unpublished for the reconciler.
    async fn publish_all(&self, topic: &str, events: &[Event], durable: bool) -> bool {
        let mut budget = Attempts::new(&self.inner.policies.for_topic(topic));
        for event in events {
            if budget.spent() {
                self.inner.wake_reconciler.notify_one();
                return false;
            }
            if !self.publish_one(topic, event, durable, &mut budget).await {
                return false;
            }
        }
        true
    }

    async fn publish_one(
        &self,
        topic: &str,
        event: &Event,
        durable: bool,
        budget: &mut Attempts,
    ) -> bool {
        if durable {
            self.in_flight(|set| set.insert(event.seq));
        }
        let outcome = self.publish_with_retry(event, budget).await;
        if durable {
            if let Ok(published) = &outcome {
                if let Err(err) = self.inner.sink.mark_published(event.seq) {
                    warn!(error = %err, event_id = %event.event_id, "cannot mark event published; it will be published again");
                }
                if let Some(tracker) = &self.inner.tracker {
                    tracker.acknowledged(event.seq, &event.event_id, published);
                }
            }
            self.in_flight(|set| set.remove(&event.seq));
        }
        match outcome {
            Ok(_) => {
                metrics::counter!(m::PUBLISHED, "topic" => topic.to_owned()).increment(1);
                true
            }
            Err((attempts, err)) => {
                self.record_emit_failure(topic, event, attempts, err, durable)
                    .await;
                false
            }
        }
    }

    async fn publish_with_retry(
        &self,
        event: &Event,
        budget: &mut Attempts,
    ) -> Result<Published, (u32, BusError)> {
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let err = match self.inner.bus.publish(event).await {
                Ok(published) => return Ok(published),
                Err(err) => err,
            };
            debug!(event_id = %event.event_id, attempts, error = %err, "publish attempt failed");
            let retryable = !err.is_permanent();
            let Some(delay) = budget.retry().filter(|_| retryable) else {
                return Err((attempts, err));
            };
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.inner.shutdown.cancelled() => return Err((attempts, err)),
            }
        }
    }

    async fn record_emit_failure(
        &self,
        topic: &str,
        event: &Event,
        attempts: u32,
        err: BusError,
        durable: bool,
    ) {
        metrics::counter!(m::EMIT_FAILURES, "topic" => topic.to_owned()).increment(1);
        warn!(event_id = %event.event_id, topic, attempts, error = %err, "publish failed after every retry");
        if durable {
            let audit = Command::RecordEmitFailure {
                job_id: event.job_id.clone(),
                topic: topic.to_owned(),
                failed_event_id: event.event_id.clone(),
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

    /// What anti-entropy has checked and repaired so far; `None` when it is off.
    pub fn anti_entropy_stats(&self) -> Option<AntiEntropyStats> {
        self.inner.tracker.as_ref().map(|tracker| tracker.stats())
    }

    /// Wakes the reconciler now (e.g. after bulk changes appended straight to the sink).
    pub fn wake_reconciler(&self) {
        self.inner.wake_reconciler.notify_one();
    }

    /// Stops the background tasks, waits for them, then flushes and closes the sink.
    pub async fn shutdown(&self) -> Result<(), SinkError> {
        self.inner.shutdown.cancel();
        let tasks: Vec<JoinHandle<()>> = match self.inner.tasks.lock() {
            Ok(mut tasks) => tasks.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for task in tasks {
            let _ = task.await;
        }
        self.inner.sink.close().await
    }
}

#[cfg(test)]
mod tests;
