//! Decoding an [`Event`] in one pass.
//!
//! The derived decoder of a struct with a `#[serde(flatten)]` internally tagged enum first
//! buffers the whole object into serde's generic `Content` tree (every key and string copied),
//! then decodes it again: two thirds of a consumer's CPU per event went there. [`WireEvent`]
//! has every field any kind can carry, so serde reads the JSON straight into it; the kind tag
//! then says which fields must be present. The JSON is unchanged (encoding stays derived).

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{Event, EventKind, RedriveTarget, RemovalReason, RemovedBy};
use crate::domain::model::{DeadLetteredItem, FailureDetail, WorktreeArtifacts};

/// The `kind` tag.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Tag {
    DeadLettered,
    FailureAppended,
    ItemRemoved,
    FlagsUpdated,
    Redriven,
    RedriveFailed,
    ItemEdited,
    EmitFailed,
    Held,
    Lost,
}

impl Tag {
    /// The tag as written ([`EventKind::name`]).
    pub(super) fn name(&self) -> &'static str {
        match self {
            Tag::DeadLettered => "dead_lettered",
            Tag::FailureAppended => "failure_appended",
            Tag::ItemRemoved => "item_removed",
            Tag::FlagsUpdated => "flags_updated",
            Tag::Redriven => "redriven",
            Tag::RedriveFailed => "redrive_failed",
            Tag::ItemEdited => "item_edited",
            Tag::EmitFailed => "emit_failed",
            Tag::Held => "held",
            Tag::Lost => "lost",
        }
    }
}

/// Every field of every kind; which are required depends on `kind`.
#[derive(Deserialize)]
pub(super) struct WireEvent {
    event_id: String,
    node_id: String,
    seq: u64,
    #[serde(default)]
    epoch: Option<String>,
    #[serde(default)]
    prev_epoch: Option<String>,
    #[serde(default)]
    prev_seq: Option<u64>,
    #[serde(deserialize_with = "crate::domain::timefmt::utc")]
    timestamp: DateTime<Utc>,
    job_id: String,
    topic: String,
    kind: Tag,
    item: Option<DeadLetteredItem>,
    item_id: Option<String>,
    failures: Option<Vec<FailureDetail>>,
    attempts: Option<u32>,
    #[serde(default, deserialize_with = "crate::domain::timefmt::utc_option")]
    last_attempt: Option<DateTime<Utc>>,
    error_signature: Option<String>,
    error_pattern: Option<String>,
    reprocess_eligible: Option<bool>,
    manual_review_required: Option<bool>,
    worktree_artifacts: Option<WorktreeArtifacts>,
    reason: Option<RemovalReason>,
    #[serde(default)]
    removed_by: Option<RemovedBy>,
    generation: Option<u32>,
    target: Option<RedriveTarget>,
    #[serde(default)]
    by: Option<RemovedBy>,
    #[serde(default, deserialize_with = "present")]
    patch: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "present")]
    previous: Option<serde_json::Value>,
    failed_event_id: Option<String>,
    error: Option<String>,
    held_event_id: Option<String>,
    held_kind: Option<String>,
    held_reason: Option<String>,
    size_bytes: Option<u64>,
    lost_reason: Option<String>,
}

/// A JSON value that is there, `null` included (a plain `Option` reads `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(deserializer).map(Some)
}

/// A field the event's kind requires is missing.
#[derive(Debug, thiserror::Error)]
#[error("missing field `{0}` for this event kind")]
pub(super) struct MissingField(&'static str);

fn need<T>(value: Option<T>, name: &'static str) -> Result<T, MissingField> {
    value.ok_or(MissingField(name))
}

impl TryFrom<WireEvent> for Event {
    type Error = MissingField;

    fn try_from(w: WireEvent) -> Result<Self, MissingField> {
        let kind = match w.kind {
            Tag::DeadLettered => EventKind::DeadLettered {
                item: need(w.item, "item")?.into(),
            },
            Tag::FailureAppended => EventKind::FailureAppended {
                item_id: need(w.item_id, "item_id")?,
                failures: need(w.failures, "failures")?,
                attempts: need(w.attempts, "attempts")?,
                last_attempt: need(w.last_attempt, "last_attempt")?,
                error_signature: need(w.error_signature, "error_signature")?,
                error_pattern: need(w.error_pattern, "error_pattern")?,
                reprocess_eligible: need(w.reprocess_eligible, "reprocess_eligible")?,
                manual_review_required: need(w.manual_review_required, "manual_review_required")?,
                worktree_artifacts: w.worktree_artifacts,
            },
            Tag::ItemRemoved => EventKind::ItemRemoved {
                item_id: need(w.item_id, "item_id")?,
                reason: need(w.reason, "reason")?,
                removed_by: w.removed_by,
                generation: w.generation,
            },
            Tag::Redriven => EventKind::Redriven {
                item_id: need(w.item_id, "item_id")?,
                generation: need(w.generation, "generation")?,
                target: need(w.target, "target")?,
                by: w.by,
            },
            Tag::RedriveFailed => EventKind::RedriveFailed {
                item_id: need(w.item_id, "item_id")?,
                generation: need(w.generation, "generation")?,
                error: need(w.error, "error")?,
            },
            Tag::ItemEdited => EventKind::ItemEdited {
                item_id: need(w.item_id, "item_id")?,
                patch: need(w.patch, "patch")?,
                previous: need(w.previous, "previous")?,
                by: w.by,
            },
            Tag::FlagsUpdated => EventKind::FlagsUpdated {
                item_id: need(w.item_id, "item_id")?,
                reprocess_eligible: w.reprocess_eligible,
                manual_review_required: w.manual_review_required,
            },
            Tag::EmitFailed => EventKind::EmitFailed {
                failed_event_id: need(w.failed_event_id, "failed_event_id")?,
                attempts: need(w.attempts, "attempts")?,
                error: need(w.error, "error")?,
            },
            Tag::Held => EventKind::Held {
                held_event_id: need(w.held_event_id, "held_event_id")?,
                held_kind: need(w.held_kind, "held_kind")?,
                item_id: w.item_id,
                held_reason: need(w.held_reason, "held_reason")?,
                size_bytes: need(w.size_bytes, "size_bytes")?,
            },
            Tag::Lost => EventKind::Lost {
                lost_reason: need(w.lost_reason, "lost_reason")?,
            },
        };
        Ok(Event {
            event_id: w.event_id,
            node_id: w.node_id,
            seq: w.seq,
            epoch: w.epoch,
            prev_epoch: w.prev_epoch,
            prev_seq: w.prev_seq,
            timestamp: w.timestamp,
            job_id: w.job_id,
            topic: w.topic,
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::domain::model::ErrorType;

    fn envelope(kind: EventKind) -> Event {
        Event {
            event_id: "n:9".into(),
            node_id: "n".into(),
            seq: 9,
            epoch: Some("00000000000000e2".into()),
            prev_epoch: Some("00000000000000e1".into()),
            prev_seq: Some(4),
            timestamp: Utc::now(),
            job_id: "job".into(),
            topic: "t".into(),
            kind,
        }
    }

    fn failure() -> FailureDetail {
        FailureDetail {
            attempt_number: 2,
            timestamp: Utc::now(),
            error_type: ErrorType::CommandFailed { exit_code: 3 },
            error_message: "boom \"quoted\" \u{e9}".into(),
            stack_trace: Some("at x".into()),
            agent_id: "a".into(),
            step_failed: "shell: make".into(),
            duration_ms: 5,
            json_log_location: None,
        }
    }

    fn every_kind() -> Vec<EventKind> {
        let item = DeadLetteredItem::new(
            "job",
            "i1",
            serde_json::json!({"nested": {"list": [1, 2.5, null, "s"]}}),
            vec![failure()],
        )
        .unwrap();
        vec![
            EventKind::DeadLettered { item: item.into() },
            EventKind::FailureAppended {
                item_id: "i1".into(),
                failures: vec![failure()],
                attempts: 1,
                last_attempt: Utc::now(),
                error_signature: "sig".into(),
                error_pattern: "pattern".into(),
                reprocess_eligible: false,
                manual_review_required: true,
                worktree_artifacts: Some(WorktreeArtifacts {
                    worktree_path: "/w".into(),
                    branch_name: "b".into(),
                    uncommitted_changes: None,
                    error_logs: Some("log".into()),
                }),
            },
            EventKind::ItemRemoved {
                item_id: "i1".into(),
                reason: RemovalReason::Evicted,
                removed_by: None,
                generation: None,
            },
            EventKind::FlagsUpdated {
                item_id: "i1".into(),
                reprocess_eligible: None,
                manual_review_required: Some(false),
            },
            EventKind::Redriven {
                item_id: "i1".into(),
                generation: 2,
                target: RedriveTarget::Handler,
                by: Some(RemovedBy {
                    name: "ops".into(),
                    reason: None,
                }),
            },
            EventKind::RedriveFailed {
                item_id: "i1".into(),
                generation: 2,
                error: "still down".into(),
            },
            EventKind::ItemEdited {
                item_id: "i1".into(),
                patch: serde_json::json!({"url": "https://b", "old": null}),
                previous: serde_json::json!({"url": "https://a", "old": 1}),
                by: None,
            },
            EventKind::ItemEdited {
                item_id: "i1".into(),
                patch: serde_json::json!(["whole"]),
                previous: serde_json::Value::Null,
                by: None,
            },
            EventKind::ItemRemoved {
                item_id: "i1".into(),
                reason: RemovalReason::Resolved,
                removed_by: None,
                generation: Some(2),
            },
            EventKind::EmitFailed {
                failed_event_id: "n:8".into(),
                attempts: 3,
                error: "timeout".into(),
            },
            EventKind::Held {
                held_event_id: "n:7".into(),
                held_kind: "dead_lettered".into(),
                item_id: Some("i1".into()),
                held_reason: "message too large".into(),
                size_bytes: 1200,
            },
            EventKind::Lost {
                lost_reason: "corrupt log entry".into(),
            },
        ]
    }

    #[test]
    fn every_kind_round_trips_through_the_one_pass_decoder() {
        for kind in every_kind() {
            let event = envelope(kind);
            let json = event.to_json().unwrap();
            assert_eq!(Event::from_json(&json).unwrap(), event);
            // What the reconciler reads from the log: the header fields, the bytes untouched.
            let stored = crate::domain::event::EncodedEvent::stored(json).unwrap();
            assert_eq!(
                stored,
                crate::domain::event::EncodedEvent::encode(&event).unwrap()
            );
            assert_eq!(stored.kind, event.kind.name());
        }
    }

    #[test]
    fn an_operator_delete_is_written_and_read_as_reason_deleted() {
        let event = envelope(EventKind::ItemRemoved {
            item_id: "i1".into(),
            reason: RemovalReason::Deleted,
            removed_by: None,
            generation: None,
        });
        let json = event.to_json().unwrap();
        assert!(
            String::from_utf8_lossy(&json).contains(r#""reason":"deleted""#),
            "{}",
            String::from_utf8_lossy(&json)
        );
        assert!(
            !String::from_utf8_lossy(&json).contains("removed_by"),
            "absent, as older readers expect"
        );
        assert_eq!(Event::from_json(&json).unwrap(), event);
    }

    #[test]
    fn who_removed_an_item_and_why_is_written_and_read() {
        let by = RemovedBy {
            name: "ops".into(),
            reason: Some("bad batch".into()),
        };
        let event = envelope(EventKind::ItemRemoved {
            item_id: "i1".into(),
            reason: RemovalReason::Cleared,
            removed_by: Some(by.clone()),
            generation: None,
        });
        let json: serde_json::Value = serde_json::from_slice(&event.to_json().unwrap()).unwrap();
        assert_eq!(
            json["removed_by"],
            serde_json::json!({"name": "ops", "reason": "bad batch"})
        );
        assert_eq!(
            Event::from_json(json.to_string().as_bytes()).unwrap(),
            event
        );
    }

    #[test]
    fn a_missing_field_of_the_kind_is_an_error_that_names_it() {
        let event = envelope(every_kind().remove(2));
        let mut json: serde_json::Value =
            serde_json::from_slice(&event.to_json().unwrap()).unwrap();
        json.as_object_mut().unwrap().remove("reason");
        let err = Event::from_json(json.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("`reason`"), "{err}");
    }

    #[test]
    fn an_unknown_kind_and_a_repeated_field_are_errors() {
        let event = envelope(every_kind().remove(9));
        let json = String::from_utf8(event.to_json().unwrap()).unwrap();
        let unknown = json.replace("\"emit_failed\"", "\"exploded\"");
        assert!(Event::from_json(unknown.as_bytes()).is_err());
        let repeated = json.replacen('{', "{\"seq\":1,", 1);
        assert!(Event::from_json(repeated.as_bytes()).is_err());
    }

    #[test]
    fn fields_of_other_kinds_and_unknown_fields_are_ignored() {
        let event = envelope(every_kind().remove(2));
        let json = String::from_utf8(event.to_json().unwrap()).unwrap();
        let extra = json.replacen('{', "{\"error\":\"x\",\"future_field\":[1],", 1);
        assert_eq!(Event::from_json(extra.as_bytes()).unwrap(), event);
    }
}
