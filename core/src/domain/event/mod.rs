//! The event envelope: every change to the dead-letter queue is one [`Event`].
//!
//! Events are appended to the sink's log, published to the bus as JSON, and folded into
//! projections by [`crate::domain::projection`]. An event's identity is
//! `event_id = "{node_id}:{epoch}:{seq}"`: `seq` is the data directory's log sequence (starting
//! at 1) and `epoch` a random id drawn each time the data directory is opened, so a replaced or
//! restored directory, whose log sequence starts again or goes back, never reuses an id. Events
//! written before epochs existed have `"{node_id}:{seq}"` and no epoch. The id is sent as
//! `Nats-Msg-Id`, so JetStream drops re-publishes inside its duplicate window, and consumers drop
//! them beyond it.
//!
//! A node's events form chains, one per epoch (plus the chain of events without one): inside a
//! chain the predecessor of `seq` is `seq - 1` unless the event names another; the first event
//! of an epoch names what the directory held when it was opened, and the first event after a
//! group the log refused names the last durable event before it (`prev_epoch`, `prev_seq`), see
//! [`Event::needs`].

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::model::{DeadLetteredItem, FailureDetail, WorktreeArtifacts};

mod encoded;
mod json;
mod wire;

/// Appends `value` to `out` as the bytes `serde_json::to_writer` writes (compact), by the
/// faster `json::write` when it can, else by serde_json.
pub(crate) fn append_json(
    value: &impl Serialize,
    out: &mut Vec<u8>,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    if json::write(value, out).is_err() {
        out.truncate(start);
        serde_json::to_writer(&mut *out, value)?;
    }
    Ok(())
}

pub use encoded::EncodedEvent;

/// One change to the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "wire::WireEvent")]
pub struct Event {
    /// `"{node_id}:{epoch}:{seq}"` for stored events (`"{node_id}:{seq}"` for those written
    /// before epochs); see `Event::volatile_id` for the others.
    pub event_id: String,
    /// The node (emitter process) that wrote the event.
    pub node_id: String,
    /// Per-node log sequence; `0` for an event the sink failed to store.
    pub seq: u64,
    /// The incarnation of the data directory that wrote the event: a random id drawn on every
    /// open. `None` for events written before epochs existed and for volatile events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// On the first event of an epoch: the epoch of the last event the data directory held
    /// when it was opened (`None` when it held none, or only events without an epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_epoch: Option<String>,
    /// With an epoch: set when the event's predecessor is not `seq - 1` of its epoch, to the
    /// sequence of the last event made durable before it (with `prev_epoch` naming that
    /// event's epoch): on the epoch's first event (what the directory held when it was
    /// opened, 0 for an empty directory), and on the first event after sequences the log
    /// burned (a group it refused; `prev_epoch` is then the event's own epoch).
    /// Without an epoch (older events): set only when the previous sequence this node used is
    /// not `seq - 1` (after a crash the sequence jumps to the reserved floor).
    /// Either way a consumer applying the node's events in order must not wait for the
    /// sequences between: a burned sequence is nobody's predecessor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_seq: Option<u64>,
    /// When the event was written.
    #[serde(serialize_with = "crate::domain::timefmt::write_utc")]
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
        /// The item as handed over by the scheduler (shared, not copied, between the caller's
        /// command, the event and the stored item).
        item: Arc<DeadLetteredItem>,
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
        #[serde(serialize_with = "crate::domain::timefmt::write_utc")]
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
        /// Who removed it and why, when an operator did (clear, purge, delete); absent in
        /// events written before it existed and in removals no operator asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        removed_by: Option<RemovedBy>,
        /// With reason `resolved` after a redrive: the generation that resolved it (absent
        /// otherwise).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        generation: Option<u32>,
    },
    /// An operator redrove the item: it is handed back to its handler (or the job runner) as
    /// generation `generation`; `item_removed` (resolved) or `redrive_failed` follows.
    Redriven {
        /// The item handed back.
        item_id: String,
        /// The item's new generation (the one it had plus one).
        generation: u32,
        /// Where it was handed back to.
        target: RedriveTarget,
        /// The operator who asked, and why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<RemovedBy>,
    },
    /// A redrive failed again: the item stays, its redrive record says why.
    RedriveFailed {
        /// The item.
        item_id: String,
        /// The generation that failed.
        generation: u32,
        /// What the handler answered.
        error: String,
    },
    /// An operator edited the item's data with a JSON merge patch (RFC 7396).
    ItemEdited {
        /// The item.
        item_id: String,
        /// The merge patch applied to `item_data`.
        patch: serde_json::Value,
        /// The old values of what changed, as a merge patch that undoes it
        /// (`crate::domain::merge_patch::reverse_patch`).
        previous: serde_json::Value,
        /// The operator who edited, and why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<RemovedBy>,
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
    /// A stub: a stored event of this node too large for the bus (parked by the reconciler),
    /// published in its place with its node, epoch, sequence and predecessor, so its chain
    /// goes on. Consumers hold the item back ("held on node N, too large for the bus") until
    /// the full event follows, which replaces the stub. Its event id is the held event's id
    /// with `~held` appended.
    Held {
        /// The id of the event held back.
        held_event_id: String,
        /// The held event's kind.
        held_kind: String,
        /// The item it concerns, if any.
        item_id: Option<String>,
        /// Why it is held (the bus's refusal).
        held_reason: String,
        /// Its size in bytes.
        size_bytes: u64,
    },
    /// A loss marker: a stored event of this node whose log entry cannot be read, published in
    /// its place so its chain goes on. Consumers count it; what it held is lost. Its event id
    /// is the lost position's id with `~lost` appended.
    Lost {
        /// Why the entry is unreadable.
        lost_reason: String,
    },
}

/// The operator behind a removal: the API token's name (`local` for a CLI command run on the
/// data directory itself) and the reason they gave, if any.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemovedBy {
    /// The API token's name, or `local`.
    pub name: String,
    /// Why, in the operator's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Where a redrive hands an item back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedriveTarget {
    /// The redrive handler the embedding scheduler registered with its emitter.
    Handler,
    /// The job runner of `dlq run` (a retry of the item's agent).
    Runner,
}

impl RedriveTarget {
    /// The snake-case name, as written in events.
    pub fn as_str(self) -> &'static str {
        match self {
            RedriveTarget::Handler => "handler",
            RedriveTarget::Runner => "runner",
        }
    }
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
    /// An operator deleted the item: by id, in a selection or in a filtered set.
    Deleted,
}

impl EventKind {
    /// The snake-case name of the kind, as sent in the `Dlq-Event-Kind` header.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::DeadLettered { .. } => "dead_lettered",
            EventKind::FailureAppended { .. } => "failure_appended",
            EventKind::ItemRemoved { .. } => "item_removed",
            EventKind::FlagsUpdated { .. } => "flags_updated",
            EventKind::Redriven { .. } => "redriven",
            EventKind::RedriveFailed { .. } => "redrive_failed",
            EventKind::ItemEdited { .. } => "item_edited",
            EventKind::EmitFailed { .. } => "emit_failed",
            EventKind::Held { .. } => "held",
            EventKind::Lost { .. } => "lost",
        }
    }

    /// The item the event concerns, if it concerns one.
    pub fn item_id(&self) -> Option<&str> {
        match self {
            EventKind::DeadLettered { item } => Some(&item.item_id),
            EventKind::FailureAppended { item_id, .. }
            | EventKind::ItemRemoved { item_id, .. }
            | EventKind::FlagsUpdated { item_id, .. }
            | EventKind::Redriven { item_id, .. }
            | EventKind::RedriveFailed { item_id, .. }
            | EventKind::ItemEdited { item_id, .. } => Some(item_id),
            EventKind::Held { item_id, .. } => item_id.as_deref(),
            EventKind::EmitFailed { .. } | EventKind::Lost { .. } => None,
        }
    }
}

impl Event {
    /// The id of a stored event of `epoch`.
    pub fn stored_id(node_id: &str, epoch: &str, seq: u64) -> String {
        format!("{node_id}:{epoch}:{seq}")
    }

    /// The id of a stored event written before epochs existed (`"{node_id}:{seq}"`).
    pub fn legacy_id(node_id: &str, seq: u64) -> String {
        format!("{node_id}:{seq}")
    }

    /// Whether `event_id` is the id of an event written by `node_id`: a stored id of either
    /// form, or a volatile one.
    pub(crate) fn id_written_by(event_id: &str, node_id: &str) -> bool {
        event_id
            .strip_prefix(node_id)
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|rest| {
                let seq = match rest.split_once(':') {
                    Some((epoch, seq)) if is_epoch(epoch) => seq,
                    Some(_) => return false,
                    None => rest,
                };
                seq.strip_prefix('v').map_or_else(
                    || !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit()),
                    |volatile| !volatile.is_empty(),
                )
            })
    }

    /// What must be applied before this stored event, in the order its node wrote them: the
    /// chain (`None`: events without an epoch) and the sequence in it (0: nothing).
    pub fn needs(&self) -> (Option<&str>, u64) {
        match (&self.epoch, self.prev_seq) {
            (None, prev) => (None, prev.unwrap_or(self.seq.saturating_sub(1))),
            (Some(_), Some(prev)) => (self.prev_epoch.as_deref(), prev),
            (Some(epoch), None) => (Some(epoch), self.seq.saturating_sub(1)),
        }
    }

    /// The id of an event the sink could not store: still unique per node (wall-clock nanos
    /// plus a process-local counter), and marked so that nobody mistakes it for a log position.
    pub(crate) fn volatile_id(node_id: &str, nanos: i64, counter: u64) -> String {
        format!("{node_id}:v{nanos}-{counter}")
    }

    /// The stub published in place of this stored event, which the bus refused for good
    /// (`reason`; its JSON is `size` bytes): same node, epoch, sequence and predecessor.
    pub fn stub(&self, reason: &str, size: u64) -> Event {
        Event {
            event_id: format!("{}~held", self.event_id),
            kind: EventKind::Held {
                held_event_id: self.event_id.clone(),
                held_kind: self.kind.name().to_owned(),
                item_id: self.kind.item_id().map(str::to_owned),
                held_reason: reason.to_owned(),
                size_bytes: size,
            },
            ..self.clone()
        }
    }

    /// Whether `event_id` has the form of `Event::volatile_id`: an event the sink of its
    /// node failed to store.
    pub fn is_volatile_id(event_id: &str) -> bool {
        event_id
            .rsplit_once(':')
            .is_some_and(|(node, rest)| !node.is_empty() && rest.starts_with('v') && rest.len() > 1)
    }

    /// Serialises the event as the JSON sent on the bus and stored in the log: the bytes
    /// `serde_json::to_writer` writes, by the faster `json::write` when it can.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        // Most events are a few KB: one allocation instead of a dozen doublings from nothing.
        let mut json = Vec::with_capacity(4096);
        append_json(self, &mut json)?;
        Ok(json)
    }

    /// Parses an event from its JSON form.
    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// Whether `text` has the form of an epoch id: [`EPOCH_HEX`] lowercase hex digits.
pub(crate) fn is_epoch(text: &str) -> bool {
    text.len() == EPOCH_HEX && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Length of an epoch id in hex digits (64 random bits).
pub(crate) const EPOCH_HEX: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_is_a_flat_tag() {
        let event = Event {
            event_id: Event::stored_id("node-a", "00000000000000e1", 7),
            node_id: "node-a".into(),
            seq: 7,
            epoch: Some("00000000000000e1".into()),
            prev_epoch: None,
            prev_seq: None,
            timestamp: Utc::now(),
            job_id: "job-1".into(),
            topic: "mapreduce".into(),
            kind: EventKind::ItemRemoved {
                item_id: "item-1".into(),
                reason: RemovalReason::Resolved,
                removed_by: None,
                generation: None,
            },
        };
        let json: serde_json::Value = serde_json::from_slice(&event.to_json().unwrap()).unwrap();
        assert_eq!(json["kind"], "item_removed");
        assert_eq!(json["reason"], "resolved");
        assert_eq!(json["event_id"], "node-a:00000000000000e1:7");
        assert_eq!(json["epoch"], "00000000000000e1");
        assert!(json.get("prev_epoch").is_none());
        assert_eq!(Event::from_json(&event.to_json().unwrap()).unwrap(), event);
    }

    #[test]
    fn ids_of_both_forms_name_their_node() {
        let epoch = "0123456789abcdef";
        assert!(Event::id_written_by(
            &Event::stored_id("n:1", epoch, 7),
            "n:1"
        ));
        assert!(Event::id_written_by(&Event::legacy_id("n:1", 7), "n:1"));
        assert!(Event::id_written_by(&Event::volatile_id("n", 5, 2), "n"));
        assert!(!Event::id_written_by(
            &Event::stored_id("n:1", epoch, 7),
            "n"
        ));
        assert!(!Event::id_written_by(&Event::legacy_id("n:1", 7), "n"));
        assert!(!Event::id_written_by("node-b:3", "node"));
        assert!(!Event::id_written_by("n:", "n"));
        assert!(Event::is_volatile_id(&Event::volatile_id("n:1", 5, 2)));
        assert!(!Event::is_volatile_id(&Event::stored_id("n", epoch, 7)));
        assert!(!Event::is_volatile_id(&Event::legacy_id("n", 7)));
    }
}
