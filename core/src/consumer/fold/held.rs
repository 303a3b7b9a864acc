//! Items held back on their node: a stub ([`EventKind::Held`]) took the place of an event too
//! large for the bus, so the node's chain went on; the item itself waits for the full event.
//!
//! The item's later events (already in chain order) wait behind the stub, so when the full
//! event comes, it and they apply in the order the node wrote them and the item ends exactly
//! as in the node's sink. Every other item of the node goes on meanwhile. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::domain::event::{Event, EventKind};

/// One held item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldItem {
    /// The node holding the full event.
    pub node: String,
    /// The id of the held event, whose arrival releases the item.
    pub event_id: String,
    /// Why the bus refused it.
    pub reason: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// The item's later events, in the order they were applied to the chain.
    #[serde(default)]
    pub behind: Vec<Event>,
}

/// The held items of a fold, by `(job_id, item_id)`.
pub type HeldItems = BTreeMap<(String, String), HeldItem>;

/// Routes `event`, whose chain position was applied: a stub holds its item (or waits behind
/// an earlier stub of it), an event of a held item waits behind it (both `None`: kept);
/// everything else is returned, to apply to the projection.
pub(super) fn route(held: &mut HeldItems, event: Event) -> Option<Event> {
    let Some(item_id) = event.kind.item_id() else {
        return Some(event);
    };
    let key = (event.job_id.clone(), item_id.to_owned());
    if let Some(item) = held.get_mut(&key) {
        item.behind.push(event);
        return None;
    }
    match &event.kind {
        EventKind::Held {
            held_event_id,
            held_reason,
            size_bytes,
            ..
        } => {
            let item = HeldItem {
                node: event.node_id.clone(),
                event_id: held_event_id.clone(),
                reason: held_reason.clone(),
                size_bytes: *size_bytes,
                behind: Vec::new(),
            };
            held.insert(key, item);
            None
        }
        _ => Some(event),
    }
}

/// What a full event did to a held item.
pub(super) enum Released {
    /// The item waited for it: apply these, in order (the full event, then what waited
    /// behind it; a later stub of the item among them holds it again).
    Ready(Vec<Event>),
    /// A later stub of the item, still behind the first one, stood in for it: the full event
    /// took the stub's place there.
    Replaced,
}

/// When `event` is the full event of a stub of a held item: takes it in ([`Released`]).
pub(super) fn release(held: &mut HeldItems, event: &Event) -> Option<Released> {
    if matches!(event.kind, EventKind::Held { .. }) {
        return None;
    }
    let item_id = event.kind.item_id()?;
    let key = (event.job_id.clone(), item_id.to_owned());
    let waiting = held.get_mut(&key)?;
    if waiting.node != event.node_id {
        return None;
    }
    if waiting.event_id != event.event_id {
        let stub = waiting.behind.iter_mut().find(|behind| {
            matches!(&behind.kind, EventKind::Held { held_event_id, .. } if *held_event_id == event.event_id)
        })?;
        *stub = event.clone();
        return Some(Released::Replaced);
    }
    let item = held.remove(&key)?;
    let mut ready = vec![event.clone()];
    ready.extend(item.behind);
    Some(Released::Ready(ready))
}
