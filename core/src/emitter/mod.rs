//! The emitter: sink first, then the bus, with per-topic retries and an audit trail.
//!
//! Stored and published are two promises, and a scheduler picks which one it waits for:
//!
//! - [`Emitter::dead_letter`] (and [`Emitter::submit`]) returns once the event is durable
//!   **and** the topic's publish attempts ended; whether the bus acknowledged it is in the
//!   [`Receipt`]. It never waits longer than [`Emitter::budget`]: the store timeout plus the
//!   topic's publish attempts and delays.
//! - [`Emitter::store`] (and [`Emitter::submit_stored`]) returns once the event is durable;
//!   the same attempts and delays run in a background task, and the [`StoredReceipt`] can
//!   await their [`PublishOutcome`]. A bus outage costs the caller nothing: with the bus known
//!   down, or [`EmitterBuilder::background_limit`] publishes already pending, no attempt is
//!   queued and the event is left to the reconciler (`dlq_emit_deferred_total{topic,reason}`).
//!
//! When publishing finally fails, either way, the emitter counts
//! `dlq_emit_failures_total{topic}`, appends an `EmitFailed` audit event and wakes the
//! reconciler, which publishes everything left behind once the bus is back.
//!
//! When the sink fails, a dead-letter is still published without a durable copy (a volatile
//! id, outside every chain), but only when the sink provably never stored it: a store timeout
//! on a request the writer had already taken is [`EmitError::Unconfirmed`] and publishes
//! nothing then, because the writer stores it late and the reconciler publishes that copy (see
//! `sink::writer`, `Claim`); if the late write fails, the volatile copy is published then.

pub mod anti_entropy;
mod background;
mod drain;
mod late;
mod publish;
pub mod reconciler;
pub mod redrive;
mod retention;
mod stand_in;
mod topic_policy;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use foldhash::HashSet;
use thiserror::Error;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

pub use anti_entropy::{AntiEntropyConfig, AntiEntropyStats};
pub use background::StoredReceipt;
pub use drain::Published;
pub use publish::PublishOutcome;
pub use reconciler::ReconcilerConfig;
pub use redrive::{
    Canary, CanarySize, FailedAgain, RedriveError, RedriveFuture, RedriveHandler, RedriveItem,
    RedrivePlan, RedriveReport, SignatureRate,
};
pub use retention::RetentionConfig;
pub use topic_policy::{RetryBackoff, TopicPolicies, TopicPolicy};

use crate::bus::Bus;
use crate::domain::command::Command;
use crate::domain::event::{Event, EventKind};
use crate::domain::model::DeadLetteredItem;
use crate::metrics as m;
use crate::sink::{Appended, Sink, SinkError};
use anti_entropy::{AntiEntropy, Tracker};
use background::Background;
use publish::Waiter;
use reconciler::Reconciler;
use retention::retention_task;

/// The emitter of a dlq process: the durable sink (its segment log, sled as the projection)
/// and NATS.
pub type NodeEmitter = Emitter<crate::sink::LocalSink, crate::bus::NatsBus>;

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
    /// never stored it; consumers apply it outside every chain and `dlq verify` lists it as
    /// published, not stored on this node.
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
    /// It is stored late, and the reconciler publishes what was stored; or the late write
    /// fails, and the emitter counts `dlq_late_store_failures_total{topic}` and publishes a
    /// volatile copy of a dead-letter (stored, or reported).
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
    /// Volatile copies of late-failed writes waiting for the bus (`late`).
    unstored_waiting: AtomicU64,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Acknowledged events anti-entropy checks (`None` when it is off).
    tracker: Option<Arc<Tracker>>,
    /// The publishes of [`Emitter::store`] still running.
    background: Background,
    /// Where [`Emitter::redrive`] hands items back to, if the scheduler registered one.
    redrive: Option<Arc<dyn RedriveHandler>>,
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
    background_limit: usize,
    redrive: Option<Arc<dyn RedriveHandler>>,
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
            background_limit: background::DEFAULT_LIMIT,
            redrive: None,
        }
    }

    /// The handler [`Emitter::redrive`] hands items back to when an operator redrives them
    /// (`dlq redrive`, `POST /v1/redrive`, the page): the scheduler takes the item (its data
    /// after any edit) back in-process and answers `Ok` (resolved) or `Err(message)` (failed
    /// again). Without one, a redrive is refused with [`RedriveError::NoHandler`].
    pub fn redrive_handler(mut self, handler: impl RedriveHandler) -> Self {
        self.redrive = Some(Arc::new(handler));
        self
    }

    /// Most background publishes of [`Emitter::store`] running at once (1024 by default);
    /// beyond it an event is left to the reconciler, so an outage never queues unbounded work.
    pub fn background_limit(mut self, limit: usize) -> Self {
        self.background_limit = limit;
        self
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
        let sink = Arc::new(self.sink);
        let tracker = anti_entropy.map(|config| {
            let sink = sink.clone();
            Arc::new(Tracker::new(&config, move |floor| {
                sink.hold_log_from(floor)
            }))
        });
        let inner = Arc::new(Inner {
            sink,
            bus: Arc::new(self.bus),
            policies: self.policies,
            publish_timeout: self.publish_timeout,
            store_timeout: self.store_timeout,
            in_flight: InFlight::default(),
            wake_reconciler: Arc::new(Notify::new()),
            shutdown: CancellationToken::new(),
            volatile_counter: AtomicU64::new(0),
            unstored_waiting: AtomicU64::new(0),
            tasks: Mutex::new(Vec::new()),
            tracker: tracker.clone(),
            background: Background::new(self.background_limit),
            redrive: self.redrive,
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

impl<S: Sink, B: Bus> Emitter<S, B> {
    /// The sink.
    pub fn sink(&self) -> &S {
        &self.inner.sink
    }

    /// The bus.
    pub fn bus(&self) -> &B {
        &self.inner.bus
    }

    /// The registered redrive handler, if any.
    pub(crate) fn redrive_handler(&self) -> Option<Arc<dyn RedriveHandler>> {
        self.inner.redrive.clone()
    }

    /// Whether a redrive handler is registered ([`EmitterBuilder::redrive_handler`]).
    pub fn can_redrive(&self) -> bool {
        self.inner.redrive.is_some()
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
            item: item.into(),
        };
        self.submit(topic, command).await
    }

    /// Stores any command's events, then publishes them as [`Emitter::dead_letter`] does.
    pub async fn submit(&self, topic: &str, command: Command) -> Result<Receipt, EmitError> {
        let started = Instant::now();
        let result = match self.append(topic, command).await {
            Ok(events) => {
                let outcome = self.publish_all(topic, &events, true, Waiter::Caller).await;
                Ok(Receipt {
                    event_ids: events.into_iter().map(Appended::into_event_id).collect(),
                    published: outcome == PublishOutcome::Published,
                })
            }
            Err(err) => Err(err),
        };
        metrics::histogram!(m::EMIT_DURATION).record(started.elapsed().as_secs_f64());
        result
    }

    /// Appends the command's events to the sink. On a sink failure it does what the module
    /// doc says (a volatile copy of a dead-letter the sink provably never stored is published
    /// before returning [`EmitError::NotStored`]), for both promises alike.
    async fn append(&self, topic: &str, command: Command) -> Result<Vec<Appended>, EmitError> {
        // The item is shared now (the command moves into the sink); the copy's id and time are
        // made only if the sink fails.
        let volatile = volatile_item(&command);
        match self.inner.sink.append_encoded(command).await {
            (Ok(events), _) => Ok(events),
            (Err(SinkError::NotFound { job_id, item_id }), _) => {
                Err(EmitError::NotFound { job_id, item_id })
            }
            (Err(SinkError::Rejected(reason)), _) => Err(EmitError::Rejected(reason)),
            (Err(err @ SinkError::Unconfirmed(_)), late) => {
                // The writer has it: a volatile copy now would be a second one later.
                metrics::counter!(m::SINK_FAILURES).increment(1);
                warn!(error = %err, topic, "sink slow; the reconciler publishes the event once stored");
                self.inner.wake_reconciler.notify_one();
                if let Some(late) = late {
                    let volatile = volatile.map(|item| self.volatile_event(topic, item));
                    self.watch_late_answer(topic, late, volatile);
                }
                Err(EmitError::Unconfirmed { source: err })
            }
            // Boxed: the failure path's publish would otherwise swell every emit's future.
            (Err(err), _) => {
                let volatile = volatile.map(|item| self.volatile_event(topic, item));
                Err(Box::pin(self.publish_unstored(topic, err, volatile)).await)
            }
        }
    }

    /// The sink failed and did not store the command: publish a volatile copy of a
    /// dead-letter so the failure is not lost twice. Only reached for errors where the writer
    /// provably never stored the command (`Timeout` means it was withdrawn unread,
    /// `Io`/`Closed` that nothing was written, `NotDurable` that the log refused the group).
    /// Never under the ids of a refused group: its sequences are burned, and a copy under a
    /// stored id would be taken by consumers for an event this node holds.
    async fn publish_unstored(
        &self,
        topic: &str,
        err: SinkError,
        volatile: Option<Event>,
    ) -> EmitError {
        metrics::counter!(m::SINK_FAILURES).increment(1);
        warn!(error = %err, topic, "sink failed; publishing without durable copy");
        let events: Vec<Appended> = volatile.into_iter().map(Appended::unencoded).collect();
        let published = !events.is_empty()
            && self
                .publish_all(topic, &events, false, Waiter::Caller)
                .await
                == PublishOutcome::Published;
        EmitError::NotStored {
            source: err,
            event_ids: events.into_iter().map(Appended::into_event_id).collect(),
            published,
        }
    }

    /// The volatile copy of a dead-letter of `item` that the sink did not store.
    fn volatile_event(&self, topic: &str, item: Arc<DeadLetteredItem>) -> Event {
        let node_id = self.inner.sink.node_id();
        let now = Utc::now();
        let counter = self.inner.volatile_counter.fetch_add(1, Ordering::Relaxed);
        let nanos = now.timestamp_nanos_opt().unwrap_or(0);
        Event {
            event_id: Event::volatile_id(node_id, nanos, counter),
            node_id: node_id.to_owned(),
            seq: 0,
            epoch: None,
            prev_epoch: None,
            prev_seq: None,
            timestamp: now,
            job_id: item.job_id.clone(),
            topic: topic.to_owned(),
            kind: EventKind::DeadLettered { item },
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

    /// Stops the background tasks, waits for them (a background publish ends its current
    /// attempt, then gives up: what it did not publish stays for the reconciler of the next
    /// run), then flushes and closes the sink.
    pub async fn shutdown(&self) -> Result<(), SinkError> {
        self.inner.shutdown.cancel();
        self.inner.background.drain().await;
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

/// What a volatile copy needs if the sink fails: the item of a dead-letter (only dead-letters
/// can be published without the sink's state).
fn volatile_item(command: &Command) -> Option<Arc<DeadLetteredItem>> {
    match command {
        Command::DeadLetter { item, .. } => Some(Arc::clone(item)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
