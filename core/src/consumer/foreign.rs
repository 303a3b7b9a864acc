//! Messages on the DLQ subject that are not dlq events: counted, skipped, never fatal.
//!
//! Anyone allowed to publish on the subject can put anything there: garbage bytes, JSON of
//! another program, an event of a later dlq version with a kind this one does not know, or a
//! payload far larger than any event a sink stores. A consumer decodes every message through
//! [`decode`]; what is not one of ours is counted in [`FOREIGN`] by [`Foreign::label`] and
//! skipped, and consuming goes on with the next message.

use serde_json::error::Category;

use crate::domain::event::Event;

/// Consumer-side metric: messages that are not dlq events, skipped, by `reason`
/// (`oversized`, `not_json`, `unknown_schema`).
pub const FOREIGN: &str = "dlq_consumer_foreign_messages_total";

/// Largest message a consumer decodes: the largest value a sink stores (no emitter publishes
/// a larger event). Larger messages are skipped undecoded.
pub const MAX_MESSAGE_BYTES: usize = crate::sink::MAX_VALUE_BYTES;

/// Why a message is not a dlq event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// Larger than [`MAX_MESSAGE_BYTES`]: not decoded at all.
    Oversized,
    /// Not JSON (garbage bytes, truncated JSON, not UTF-8).
    NotJson,
    /// JSON, but not an event of this version: another schema, an unknown `kind`, a missing or
    /// mistyped field.
    UnknownSchema,
}

impl Foreign {
    /// The `reason` label of [`FOREIGN`].
    pub fn label(self) -> &'static str {
        match self {
            Foreign::Oversized => "oversized",
            Foreign::NotJson => "not_json",
            Foreign::UnknownSchema => "unknown_schema",
        }
    }
}

/// Decodes a message body into an event, or says why it is not one (pure: nothing counted).
pub fn classify(payload: &[u8]) -> Result<Event, Foreign> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(Foreign::Oversized);
    }
    Event::from_json(payload).map_err(|err| match err.classify() {
        Category::Data => Foreign::UnknownSchema,
        Category::Io | Category::Syntax | Category::Eof => Foreign::NotJson,
    })
}

/// Decodes a message body into an event; a foreign message is counted in [`FOREIGN`], logged
/// at debug level (its stream sequence, never its body) and returned as `None`.
pub(crate) fn decode(payload: &[u8], stream_seq: u64) -> Option<Event> {
    match classify(payload) {
        Ok(event) => Some(event),
        Err(foreign) => {
            metrics::counter!(FOREIGN, "reason" => foreign.label()).increment(1);
            tracing::debug!(
                stream_seq,
                bytes = payload.len(),
                reason = foreign.label(),
                "skipped a message that is not a dlq event"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_messages_are_classified_by_reason() {
        assert_eq!(classify(b"\x00\xffgarbage").err(), Some(Foreign::NotJson));
        assert_eq!(classify(b"{\"event_id\":").err(), Some(Foreign::NotJson));
        assert_eq!(classify(b"").err(), Some(Foreign::NotJson));
        assert_eq!(
            classify(br#"{"schema":2,"kind":"item_archived"}"#).err(),
            Some(Foreign::UnknownSchema)
        );
        assert_eq!(classify(b"[1,2,3]").err(), Some(Foreign::UnknownSchema));
        let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert_eq!(classify(&big).err(), Some(Foreign::Oversized));
    }
}
