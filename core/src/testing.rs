//! Fakes for unit tests of the code that calls [`Sink`] and [`Bus`] (integration tests use the
//! real sled and nats-server instead).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::bus::{Bus, BusError, Published};
use crate::domain::command::{decide, Command, DecideError, Limits};
use crate::domain::event::{EncodedEvent, Event};
use crate::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use crate::domain::projection::{MemoryProjection, StoredItem};
use crate::sink::{Backlog, Parked, Sink, SinkError};

/// A sink in memory: the same decide/apply logic as the local sink, no disk.
#[derive(Default)]
pub struct MemorySink {
    state: Mutex<MemoryState>,
    /// How often [`Sink::backlog`] was read.
    pub backlog_reads: AtomicUsize,
}

#[derive(Default)]
struct MemoryState {
    projection: MemoryProjection,
    log: Vec<Event>,
    unpublished: BTreeSet<u64>,
    parked: BTreeMap<u64, Parked>,
}

impl MemorySink {
    /// Every event appended so far.
    pub fn log(&self) -> Vec<Event> {
        self.state.lock().unwrap().log.clone()
    }
}

impl Sink for MemorySink {
    async fn append(&self, command: Command) -> Result<Vec<Event>, SinkError> {
        let mut state = self.state.lock().unwrap();
        let limits = Limits {
            capacity_per_job: 100,
        };
        let drafts = decide(&state.projection, command, limits).map_err(|e| match e {
            DecideError::NotFound { job_id, item_id } => SinkError::NotFound { job_id, item_id },
            other => SinkError::Rejected(other.to_string()),
        })?;
        let mut events = Vec::new();
        for draft in drafts {
            let seq = state.log.len() as u64 + 1;
            let event = Event {
                event_id: Event::legacy_id("mem", seq),
                node_id: "mem".into(),
                seq,
                epoch: None,
                prev_epoch: None,
                prev_seq: None,
                timestamp: Utc::now(),
                job_id: draft.job_id,
                topic: draft.topic,
                kind: draft.kind,
            };
            state.projection.apply(&event);
            state.log.push(event.clone());
            state.unpublished.insert(seq);
            events.push(event);
        }
        Ok(events)
    }

    fn mark_published(&self, seq: u64) -> Result<(), SinkError> {
        self.state.lock().unwrap().unpublished.remove(&seq);
        Ok(())
    }

    fn unpublished(&self, after: u64, limit: usize) -> Result<Vec<EncodedEvent>, SinkError> {
        let state = self.state.lock().unwrap();
        Ok(state
            .unpublished
            .range(after + 1..)
            .take(limit)
            .map(|seq| EncodedEvent::encode(&state.log[*seq as usize - 1]).unwrap())
            .collect())
    }

    fn stored(&self, seq: u64) -> Result<Option<EncodedEvent>, SinkError> {
        let state = self.state.lock().unwrap();
        let index = (seq as usize).checked_sub(1);
        Ok(index
            .and_then(|i| state.log.get(i))
            .map(|event| EncodedEvent::encode(event).unwrap()))
    }

    fn park(&self, seq: u64, event_id: Option<&str>, reason: &str) -> Result<bool, SinkError> {
        let mut state = self.state.lock().unwrap();
        if !state.unpublished.remove(&seq) {
            return Ok(false);
        }
        let parked = Parked {
            seq,
            event_id: event_id.map(str::to_owned),
            reason: reason.to_owned(),
            parked_at: Utc::now(),
        };
        state.parked.insert(seq, parked);
        Ok(true)
    }

    fn parked(&self) -> Result<Vec<Parked>, SinkError> {
        Ok(self
            .state
            .lock()
            .unwrap()
            .parked
            .values()
            .cloned()
            .collect())
    }

    fn unpark_all(&self) -> Result<u64, SinkError> {
        let mut state = self.state.lock().unwrap();
        let parked = std::mem::take(&mut state.parked);
        state.unpublished.extend(parked.keys());
        Ok(parked.len() as u64)
    }

    fn backlog(&self) -> Result<Backlog, SinkError> {
        self.backlog_reads.fetch_add(1, Ordering::SeqCst);
        let state = self.state.lock().unwrap();
        let oldest = state
            .unpublished
            .first()
            .map(|seq| state.log[*seq as usize - 1].timestamp);
        Ok(Backlog {
            count: state.unpublished.len() as u64,
            oldest,
        })
    }

    fn node_id(&self) -> &str {
        "mem"
    }

    async fn close(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// A bus whose answers the test scripts: it fails the first `fail_first` publishes, takes
/// `latency` per publish, and records what it was asked to publish.
#[derive(Default)]
pub struct FakeBus {
    /// Publishes to fail before succeeding.
    pub fail_first: AtomicUsize,
    /// Fail with `Rejected` instead of `Disconnected`.
    pub reject: AtomicBool,
    /// Simulated acknowledgement latency.
    pub latency: Duration,
    /// Whether `is_healthy` says yes.
    pub unhealthy: AtomicBool,
    /// Event ids in the order publishing started.
    pub attempts: Mutex<Vec<String>>,
    /// Event ids acknowledged.
    pub acked: Mutex<Vec<String>>,
    /// Publishes awaiting an answer now.
    pub in_flight: AtomicUsize,
    /// Most publishes awaiting an answer at once.
    pub max_in_flight: AtomicUsize,
}

impl Bus for FakeBus {
    async fn publish_encoded(&self, event: &EncodedEvent) -> Result<Published, BusError> {
        self.attempts.lock().unwrap().push(event.event_id.clone());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let fail = self
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fail {
            return Err(if self.reject.load(Ordering::SeqCst) {
                BusError::rejected("scripted")
            } else {
                BusError::Disconnected
            });
        }
        self.acked.lock().unwrap().push(event.event_id.clone());
        Ok(Published {
            stream_seq: None,
            duplicate: false,
        })
    }

    fn is_healthy(&self) -> bool {
        !self.unhealthy.load(Ordering::SeqCst)
    }
}

/// The projection of `events` applied in the order given.
pub fn in_order(events: &[Event]) -> MemoryProjection {
    let mut projection = MemoryProjection::default();
    events.iter().for_each(|e| projection.apply(e));
    projection
}

/// Node `n`'s event `seq` (of `epoch`, after `prev_seq`, written at `at`) resolving item `i{seq}`.
pub fn removal(epoch: Option<&str>, seq: u64, prev_seq: Option<u64>, at: DateTime<Utc>) -> Event {
    Event {
        event_id: format!("n:{seq}"),
        node_id: "n".into(),
        seq,
        epoch: epoch.map(str::to_owned),
        prev_epoch: None,
        prev_seq,
        timestamp: at,
        job_id: "job".into(),
        topic: "t".into(),
        kind: crate::domain::event::EventKind::ItemRemoved {
            item_id: format!("i{seq}"),
            reason: crate::domain::event::RemovalReason::Resolved,
            removed_by: None,
            generation: None,
        },
    }
}

/// A one-failure item of `job`.
pub fn item(job: &str, id: &str) -> DeadLetteredItem {
    let failure = FailureDetail {
        attempt_number: 1,
        timestamp: Utc::now(),
        error_type: ErrorType::Unknown,
        error_message: "boom".into(),
        stack_trace: None,
        agent_id: "a".into(),
        step_failed: "shell: false".into(),
        duration_ms: 1,
        json_log_location: None,
    };
    DeadLetteredItem::new(job, id, serde_json::Value::Null, vec![failure]).unwrap()
}

/// `item(job, id)` as the projection keeps it, last written by the event `last_event_id`.
pub fn stored_item(job: &str, id: &str, last_event_id: &str) -> StoredItem {
    StoredItem {
        item: item(job, id).into(),
        created_seq: 1,
        version: 1,
        last_event_id: last_event_id.to_owned(),
        unstored_event_ids: Vec::new(),
    }
}
