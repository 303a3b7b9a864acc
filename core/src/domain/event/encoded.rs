//! An event as the bus carries it: its JSON bytes and the fields its headers need.
//!
//! The sink stores each event as the exact JSON that is published ([`super::Event::to_json`]).
//! So the reconciler need not decode a stored event and encode it again: [`EncodedEvent::stored`]
//! reads only the header fields and keeps the bytes as they are.

use std::borrow::Cow;

use bytes::Bytes;
use serde::Deserialize;

use super::wire::Tag;
use super::Event;

/// An event ready to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedEvent {
    /// The event id, sent as `Nats-Msg-Id`.
    pub event_id: String,
    /// The node that wrote the event.
    pub node_id: String,
    /// Its log sequence.
    pub seq: u64,
    /// The job it concerns.
    pub job_id: String,
    /// The kind's snake-case name.
    pub kind: &'static str,
    /// The event's JSON, the message payload.
    pub json: Bytes,
}

/// The fields of an event's JSON that the headers need; the rest is skipped unparsed.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    event_id: Cow<'a, str>,
    #[serde(borrow)]
    node_id: Cow<'a, str>,
    seq: u64,
    #[serde(borrow)]
    job_id: Cow<'a, str>,
    kind: Tag,
}

impl EncodedEvent {
    /// Encodes `event`.
    pub fn encode(event: &Event) -> Result<Self, serde_json::Error> {
        Ok(EncodedEvent {
            event_id: event.event_id.clone(),
            node_id: event.node_id.clone(),
            seq: event.seq,
            job_id: event.job_id.clone(),
            kind: event.kind.name(),
            json: event.to_json()?.into(),
        })
    }

    /// `event` with `json`, its JSON as [`Event::to_json`] made it (the sink's writer has it).
    pub(crate) fn with_json(event: &Event, json: Bytes) -> Self {
        EncodedEvent {
            event_id: event.event_id.clone(),
            node_id: event.node_id.clone(),
            seq: event.seq,
            job_id: event.job_id.clone(),
            kind: event.kind.name(),
            json,
        }
    }

    /// An event from the JSON the sink stored, read only as far as its header fields.
    pub fn stored(json: Vec<u8>) -> Result<Self, serde_json::Error> {
        let head: Head<'_> = serde_json::from_slice(&json)?;
        let (event_id, node_id, job_id) = (
            head.event_id.into_owned(),
            head.node_id.into_owned(),
            head.job_id.into_owned(),
        );
        Ok(EncodedEvent {
            event_id,
            node_id,
            seq: head.seq,
            job_id,
            kind: head.kind.name(),
            json: json.into(),
        })
    }

    /// Decodes the whole event.
    pub fn decode(&self) -> Result<Event, serde_json::Error> {
        Event::from_json(&self.json)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use chrono::Utc;

    use super::*;
    use crate::domain::event::{EventKind, RemovalReason};

    #[test]
    fn a_stored_event_reads_back_as_its_encoding() {
        let event = Event {
            event_id: "n\"1:7".into(),
            node_id: "n\"1".into(),
            seq: 7,
            epoch: None,
            prev_epoch: None,
            prev_seq: Some(3),
            timestamp: Utc::now(),
            job_id: "job \\ one".into(),
            topic: "t".into(),
            kind: EventKind::ItemRemoved {
                item_id: "i".into(),
                reason: RemovalReason::Purged,
                removed_by: None,
                generation: None,
            },
        };
        let encoded = EncodedEvent::encode(&event).unwrap();
        assert_eq!(encoded.kind, "item_removed");
        let stored = EncodedEvent::stored(encoded.json.to_vec()).unwrap();
        assert_eq!(stored, encoded);
        assert_eq!(stored.decode().unwrap(), event);
    }

    #[test]
    fn stored_bytes_without_the_header_fields_are_refused() {
        assert!(EncodedEvent::stored(br#"{"event_id":"n:1","seq":1}"#.to_vec()).is_err());
        assert!(EncodedEvent::stored(b"not json".to_vec()).is_err());
    }
}
