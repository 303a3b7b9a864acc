//! The event envelope: every change to the dead-letter queue is one [`Event`].
//!
//! Events are appended to the sink's log, published to the bus as JSON, and folded into
//! projections by [`crate::projection`]. An event's identity is `event_id = "{node_id}:{seq}"`,
//! where `seq` is the per-node log sequence (starting at 1). The id is sent as `Nats-Msg-Id`, so
//! JetStream drops re-publishes inside its duplicate window, and consumers drop them beyond it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::{DeadLetteredItem, FailureDetail, WorktreeArtifacts};

/// One change to the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `"{node_id}:{seq}"` for stored events; see [`Event::volatile_id`] for the others.
    pub event_id: String,
    /// The node (emitter process) that wrote the event.
    pub node_id: String,
    /// Per-node log sequence; `0` for an event the sink failed to store.
    pub seq: u64,
    /// Set only when the previous sequence this node used is not `seq - 1` (after a crash the
    /// sequence jumps to the reserved floor): the sequences between do not exist, so a consumer
    /// applying a node's events in order must not wait for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_seq: Option<u64>,
    /// When the event was written.
    pub timestamp: DateTime<Utc>,
    /// The job the event concerns.
    pub job_id: String,
    /// The scheduler topic the failure came from (selects the retry policy, labels metrics).
    pub topic: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What an [`Event`] records. Serialised with a `"kind"` tag in snake case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// A new item entered the dead-letter queue.
    DeadLettered {
        /// The item as handed over by the scheduler.
        item: DeadLetteredItem,
    },
    /// An item already in the queue failed again: its history grows.
    FailureAppended {
        /// The item that failed again.
        item_id: String,
        /// The new failures, already numbered after the existing history.
        failures: Vec<FailureDetail>,
        /// How many attempts the new failures represent (added to `failure_count`).
        attempts: u32,
        /// The most recent failure time.
        last_attempt: DateTime<Utc>,
        /// Signature of the most recent failure.
        error_signature: String,
        /// Readable pattern of the most recent failure.
        error_pattern: String,
        /// Eligibility after this failure.
        reprocess_eligible: bool,
        /// Review flag after this failure.
        manual_review_required: bool,
        /// Worktree state of the most recent failure, if any.
        worktree_artifacts: Option<WorktreeArtifacts>,
    },
    /// An item left the queue.
    ItemRemoved {
        /// The item removed.
        item_id: String,
        /// Why it was removed.
        reason: RemovalReason,
    },
    /// An operator or policy changed an item's flags.
    FlagsUpdated {
        /// The item changed.
        item_id: String,
        /// New eligibility, when changed.
        reprocess_eligible: Option<bool>,
        /// New review flag, when changed.
        manual_review_required: Option<bool>,
    },
    /// Audit: publishing an event failed after every retry. The event stays in the sink's
    /// unpublished set and the reconciler publishes it once the bus is back.
    EmitFailed {
        /// The event that could not be published.
        failed_event_id: String,
        /// Publish attempts made.
        attempts: u32,
        /// The last publish error.
        error: String,
    },
}

/// Why an item left the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemovalReason {
    /// A retry succeeded.
    Resolved,
    /// An operator cleared the job's items.
    Cleared,
    /// An operator purged old items, or retention expired them.
    Purged,
    /// The job reached its capacity and the oldest item made room (FIFO).
    Evicted,
}

impl EventKind {
    /// The snake-case name of the kind, as sent in the `Dlq-Event-Kind` header.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::DeadLettered { .. } => "dead_lettered",
            EventKind::FailureAppended { .. } => "failure_appended",
            EventKind::ItemRemoved { .. } => "item_removed",
            EventKind::FlagsUpdated { .. } => "flags_updated",
            EventKind::EmitFailed { .. } => "emit_failed",
        }
    }

    /// The item the event concerns, if it concerns one.
    pub fn item_id(&self) -> Option<&str> {
        match self {
            EventKind::DeadLettered { item } => Some(&item.item_id),
            EventKind::FailureAppended { item_id, .. }
            | EventKind::ItemRemoved { item_id, .. }
            | EventKind::FlagsUpdated { item_id, .. } => Some(item_id),
            EventKind::EmitFailed { .. } => None,
        }
    }
}

impl Event {
    /// The id of a stored event.
    pub fn stored_id(node_id: &str, seq: u64) -> String {
        format!("{node_id}:{seq}")
    }

    /// The id of an event the sink could not store: still unique per node (wall-clock nanos
    /// plus a process-local counter), and marked so that nobody mistakes it for a log position.
    pub fn volatile_id(node_id: &str, nanos: i64, counter: u64) -> String {
        format!("{node_id}:v{nanos}-{counter}")
    }

    /// Serialises the event as the JSON sent on the bus and stored in the log.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Parses an event from its JSON form.
    ///
    /// `#[serde(flatten)]` makes the derived decoder buffer the whole object into an untyped
    /// tree before decoding the kind from it (every string copied twice); consumers decode
    /// every event of the stream, so the flat form is decoded directly into [`FlatEvent`]
    /// first. Anything that does not decode that way goes through the derived decoder, so the
    /// accepted input and its meaning are the derived ones.
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        match serde_json::from_slice::<FlatEvent>(bytes)
            .ok()
            .and_then(FlatEvent::into_event)
        {
            Some(event) => Ok(event),
            None => serde_json::from_slice(bytes),
        }
    }
}

/// The tag of [`EventKind`], as serialised.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum KindTag {
    DeadLettered,
    FailureAppended,
    ItemRemoved,
    FlagsUpdated,
    EmitFailed,
}

/// An [`Event`]'s JSON object as one flat struct: the envelope and the union of every kind's
/// fields (fields shared by kinds have one type that fits all of them). Decoded in one pass,
/// in any field order.
#[derive(Deserialize)]
struct FlatEvent {
    event_id: String,
    node_id: String,
    seq: u64,
    #[serde(default)]
    prev_seq: Option<u64>,
    timestamp: DateTime<Utc>,
    job_id: String,
    topic: String,
    kind: KindTag,
    item: Option<DeadLetteredItem>,
    item_id: Option<String>,
    failures: Option<Vec<FailureDetail>>,
    attempts: Option<u32>,
    last_attempt: Option<DateTime<Utc>>,
    error_signature: Option<String>,
    error_pattern: Option<String>,
    reprocess_eligible: Option<bool>,
    manual_review_required: Option<bool>,
    worktree_artifacts: Option<WorktreeArtifacts>,
    reason: Option<RemovalReason>,
    failed_event_id: Option<String>,
    error: Option<String>,
}

impl FlatEvent {
    /// The event, or `None` when a field its kind requires is missing.
    fn into_event(self) -> Option<Event> {
        let kind = match self.kind {
            KindTag::DeadLettered => EventKind::DeadLettered { item: self.item? },
            KindTag::FailureAppended => EventKind::FailureAppended {
                item_id: self.item_id?,
                failures: self.failures?,
                attempts: self.attempts?,
                last_attempt: self.last_attempt?,
                error_signature: self.error_signature?,
                error_pattern: self.error_pattern?,
                reprocess_eligible: self.reprocess_eligible?,
                manual_review_required: self.manual_review_required?,
                worktree_artifacts: self.worktree_artifacts,
            },
            KindTag::ItemRemoved => EventKind::ItemRemoved {
                item_id: self.item_id?,
                reason: self.reason?,
            },
            KindTag::FlagsUpdated => EventKind::FlagsUpdated {
                item_id: self.item_id?,
                reprocess_eligible: self.reprocess_eligible,
                manual_review_required: self.manual_review_required,
            },
            KindTag::EmitFailed => EventKind::EmitFailed {
                failed_event_id: self.failed_event_id?,
                attempts: self.attempts?,
                error: self.error?,
            },
        };
        Some(Event {
            event_id: self.event_id,
            node_id: self.node_id,
            seq: self.seq,
            prev_seq: self.prev_seq,
            timestamp: self.timestamp,
            job_id: self.job_id,
            topic: self.topic,
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_is_a_flat_tag() {
        let event = Event {
            event_id: Event::stored_id("node-a", 7),
            node_id: "node-a".into(),
            seq: 7,
            prev_seq: None,
            timestamp: Utc::now(),
            job_id: "job-1".into(),
            topic: "mapreduce".into(),
            kind: EventKind::ItemRemoved {
                item_id: "item-1".into(),
                reason: RemovalReason::Resolved,
            },
        };
        let json: serde_json::Value = serde_json::from_slice(&event.to_json().unwrap()).unwrap();
        assert_eq!(json["kind"], "item_removed");
        assert_eq!(json["reason"], "resolved");
        assert_eq!(json["event_id"], "node-a:7");
        assert_eq!(Event::from_json(&event.to_json().unwrap()).unwrap(), event);
    }

    fn envelope(seq: u64, kind: EventKind) -> Event {
        Event {
            event_id: Event::stored_id("node-a", seq),
            node_id: "node-a".into(),
            seq,
            prev_seq: (seq == 9).then_some(4),
            timestamp: Utc::now(),
            job_id: "job-1".into(),
            topic: "mapreduce".into(),
            kind,
        }
    }

    fn one_of_each_kind() -> Vec<Event> {
        let failure: FailureDetail = serde_json::from_value(serde_json::json!({
            "attempt_number": 2, "timestamp": Utc::now(), "error_type": {"CommandFailed": {"exit_code": 3}},
            "error_message": "boom 1.5e-7", "agent_id": "a", "step_failed": "s", "duration_ms": 7 }))
        .unwrap();
        let item = crate::failure::dead_lettered_item(
            "job-1",
            "item-1",
            serde_json::json!({"x": 0.1, "nested": [1, null, "y"]}),
            vec![failure.clone()],
            None,
        )
        .unwrap();
        let artifacts = WorktreeArtifacts {
            worktree_path: "/w".into(),
            branch_name: "b".into(),
            uncommitted_changes: None,
            error_logs: Some("log".into()),
        };
        vec![
            envelope(1, EventKind::DeadLettered { item }),
            envelope(
                2,
                EventKind::FailureAppended {
                    item_id: "item-1".into(),
                    failures: vec![failure],
                    attempts: 1,
                    last_attempt: Utc::now(),
                    error_signature: "sig".into(),
                    error_pattern: "pat".into(),
                    reprocess_eligible: true,
                    manual_review_required: false,
                    worktree_artifacts: Some(artifacts),
                },
            ),
            envelope(
                3,
                EventKind::FlagsUpdated {
                    item_id: "item-1".into(),
                    reprocess_eligible: None,
                    manual_review_required: Some(true),
                },
            ),
            envelope(
                9,
                EventKind::ItemRemoved {
                    item_id: "item-1".into(),
                    reason: RemovalReason::Evicted,
                },
            ),
            envelope(
                0,
                EventKind::EmitFailed {
                    failed_event_id: "node-a:1".into(),
                    attempts: 3,
                    error: "timed out".into(),
                },
            ),
        ]
    }

    /// The one-pass decoder gives what the derived one gives, for every kind, in any field order.
    #[test]
    fn fast_decode_equals_the_derived_decode() {
        for event in one_of_each_kind() {
            let json = event.to_json().unwrap();
            let derived: Event = serde_json::from_slice(&json).unwrap();
            assert_eq!(derived, event);
            assert_eq!(Event::from_json(&json).unwrap(), event);
            assert!(serde_json::from_slice::<FlatEvent>(&json)
                .ok()
                .and_then(FlatEvent::into_event)
                .is_some());
            // Kind first, envelope last: same event.
            let serde_json::Value::Object(map) = serde_json::from_slice(&json).unwrap() else {
                panic!("an event is an object");
            };
            let mut reordered: Vec<_> = map.into_iter().collect();
            reordered.sort_by_key(|(key, _)| key != "kind");
            reordered.reverse();
            let text = format!(
                "{{{}}}",
                reordered
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", serde_json::Value::from(k.as_str())))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            assert_eq!(Event::from_json(text.as_bytes()).unwrap(), event);
        }
    }

    /// What the derived decoder rejects is rejected, and what only it accepts is accepted.
    #[test]
    fn fast_decode_falls_back_and_rejects_alike() {
        let events = one_of_each_kind();
        let mut value: serde_json::Value =
            serde_json::from_slice(&events[1].to_json().unwrap()).unwrap();
        value.as_object_mut().unwrap().remove("attempts");
        let bytes = serde_json::to_vec(&value).unwrap();
        assert!(Event::from_json(&bytes).is_err());
        assert!(serde_json::from_slice::<Event>(&bytes).is_err());
        assert!(Event::from_json(br#"{"kind":"dead_lettered"}"#).is_err());
        assert!(Event::from_json(b"not json").is_err());
        // A field of another kind with a type the union does not expect: ignored by the
        // derived decoder, so accepted through the fallback.
        let mut value: serde_json::Value =
            serde_json::from_slice(&events[3].to_json().unwrap()).unwrap();
        value["item"] = serde_json::json!("not an item");
        let bytes = serde_json::to_vec(&value).unwrap();
        assert!(serde_json::from_slice::<FlatEvent>(&bytes).is_err());
        assert_eq!(Event::from_json(&bytes).unwrap(), events[3]);
    }
}
