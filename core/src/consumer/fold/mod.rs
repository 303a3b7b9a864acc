//! The consumer's pure fold: events in any arrival order, duplicates included, in; the same
//! projection the emitting sink holds, out.
//!
//! Each node's events are applied in the order that node wrote them, exactly as its sink applied
//! them: per chain (one per epoch of its data directory, and one for events without an epoch,
//! see [`super::cursor`]), an event whose predecessor has not been applied yet waits in a
//! buffer, an event already applied (same node and chain, sequence not above the last applied)
//! is a duplicate and dropped. Inside a chain the predecessor of `seq` is `seq - 1`, or the
//! chain and sequence the event names (`prev_epoch`, `prev_seq`): the first event of an epoch,
//! and the first after sequences the node's log burned, come after the event they name.
//! Events the sink failed to store (`seq == 0`) are applied once, by event id. A stub (in place
//! of an event too large for the bus) takes that event's place in its chain and holds its item
//! until the full event comes ([`held`]); a loss marker takes the place of an unreadable one
//! and is counted.

use std::collections::{BTreeMap, BTreeSet, HashSet};

pub use super::cursor::{Chain, NodeCursor};
pub use held::{HeldItem, HeldItems};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::event::{Event, EventKind};
use crate::domain::projection::MemoryProjection;

/// What became of one offered event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Applied, together with this many buffered successors it unblocked.
    Applied {
        /// Buffered events applied after it.
        unblocked: usize,
    },
    /// Already applied: dropped.
    Duplicate,
    /// Waiting for an earlier event of its node.
    Buffered,
}

/// Most events of one node a durable consumer keeps waiting behind a gap before it stops and
/// asks for the gap to be repaired or accepted: the buffer is held in memory and saved whole.
pub const MAX_WAITING_PER_NODE: usize = 100_000;

/// A gap an operator accepted: the node's sequences `from..=to` of one chain will never be
/// applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedGap {
    /// The node whose events were missing.
    pub node: String,
    /// The epoch of the chain given up in (`None`: events without an epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// First sequence given up.
    pub from: u64,
    /// Last sequence given up.
    pub to: u64,
    /// Waiting events applied once the gap was accepted.
    pub released: u64,
    /// When it was accepted.
    pub at: DateTime<Utc>,
}

/// Counters of a fold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldStats {
    /// Events applied to the projection.
    pub applied: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Loss markers applied: events their node stored but could not read to publish.
    #[serde(default)]
    pub lost: u64,
}

/// A projection built from an event stream.
#[derive(Debug, Clone, Default)]
pub struct Fold {
    /// The current items.
    pub projection: MemoryProjection,
    /// Progress per node id.
    pub nodes: BTreeMap<String, NodeCursor>,
    /// Ids of applied events that the sink never stored (`seq == 0`).
    pub volatile_seen: HashSet<String>,
    /// Items held back on their node (a stub took the place of an event too large for the
    /// bus), with their later events; see `held`.
    pub held: HeldItems,
    /// Counters.
    pub stats: FoldStats,
    /// What changed since `Fold::take_touched` was last called (for incremental persistence).
    pub touched: Touched,
    /// Do not record [`Fold::touched`] (nothing persists this fold).
    untracked: bool,
}

/// Items and nodes changed by a run of offers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Touched {
    /// `(job_id, item_id)` of items created, changed or removed.
    pub items: BTreeSet<(String, String)>,
    /// Nodes whose cursor or waiting events changed.
    pub nodes: BTreeSet<String>,
    /// The epochs, by node, whose chain changed (a subset of those nodes' chains).
    pub epochs: BTreeMap<String, BTreeSet<String>>,
    /// Volatile event ids newly seen.
    pub volatile: Vec<String>,
    /// `(job_id, item_id)` of items held, or released, or whose held events changed.
    pub held: BTreeSet<(String, String)>,
}

impl Touched {
    /// Records a change to `node`'s chain of `epoch` (`None`: the chain without an epoch).
    /// Looks up before inserting: no copy of the ids when they are recorded already.
    fn touch(&mut self, node: &str, epoch: Option<&str>) {
        if !self.nodes.contains(node) {
            self.nodes.insert(node.to_owned());
        }
        if let Some(epoch) = epoch {
            match self.epochs.get_mut(node) {
                Some(epochs) if epochs.contains(epoch) => {}
                Some(epochs) => {
                    epochs.insert(epoch.to_owned());
                }
                None => {
                    self.epochs
                        .insert(node.to_owned(), BTreeSet::from([epoch.to_owned()]));
                }
            }
        }
    }
}

impl Fold {
    /// A fold that does not record what changed: for a rebuild kept only in memory, where
    /// nobody calls `Fold::take_touched`.
    pub fn untracked() -> Self {
        Fold {
            untracked: true,
            ..Fold::default()
        }
    }

    /// Offers one event, in whatever order it arrived.
    pub fn offer(&mut self, event: Event) -> Offer {
        // The full event a stub stood in for: its chain position is applied already.
        if let Some(ready) = held::release(&mut self.held, &event) {
            self.stats.applied += 1;
            if let (false, Some(item_id)) = (self.untracked, event.kind.item_id()) {
                let key = (event.job_id.clone(), item_id.to_owned());
                self.touched.held.insert(key);
            }
            if let held::Released::Ready(ready) = ready {
                for event in ready {
                    self.project(event);
                }
            }
            return Offer::Applied { unblocked: 0 };
        }
        if event.seq == 0 {
            if !self.volatile_seen.insert(event.event_id.clone()) {
                self.stats.duplicates += 1;
                return Offer::Duplicate;
            }
            if !self.untracked {
                self.touched.volatile.push(event.event_id.clone());
            }
            self.apply(event);
            return Offer::Applied { unblocked: 0 };
        }
        // Look up before inserting: no copy of the node id per event.
        let cursor = match self.nodes.get_mut(&event.node_id) {
            Some(cursor) => cursor,
            None => self.nodes.entry(event.node_id.clone()).or_default(),
        };
        if cursor.replace_waiting_stub(&event) {
            if !self.untracked {
                self.touched.touch(&event.node_id, event.epoch.as_deref());
            }
            return Offer::Buffered;
        }
        if cursor.is_duplicate(&event) {
            self.stats.duplicates += 1;
            return Offer::Duplicate;
        }
        if !cursor.ready(&event) {
            if !self.untracked {
                self.touched.touch(&event.node_id, event.epoch.as_deref());
            }
            cursor.buffer(event);
            return Offer::Buffered;
        }
        if cursor.waiting() == 0 {
            self.apply(event);
            return Offer::Applied { unblocked: 0 };
        }
        let node = event.node_id.clone();
        self.apply(event);
        let unblocked = self.release(&node);
        Offer::Applied { unblocked }
    }

    /// Returns what changed since the last call, and starts a new record.
    pub(crate) fn take_touched(&mut self) -> Touched {
        std::mem::take(&mut self.touched)
    }

    /// Events waiting for a predecessor, over all nodes.
    pub fn waiting(&self) -> usize {
        self.nodes.values().map(NodeCursor::waiting).sum()
    }

    /// The timestamp of the oldest event waiting for a predecessor (`None` when nothing
    /// waits): how long the oldest gap has blocked its node.
    pub fn oldest_waiting(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.nodes
            .values()
            .filter_map(NodeCursor::oldest_waiting)
            .min()
    }

    /// The node with the most events waiting, if it has more than [`MAX_WAITING_PER_NODE`].
    pub(crate) fn overflowing(&self) -> Option<(&str, usize)> {
        self.nodes
            .iter()
            .map(|(node, cursor)| (node.as_str(), cursor.waiting()))
            .filter(|(_, waiting)| *waiting > MAX_WAITING_PER_NODE)
            .max_by_key(|(_, waiting)| *waiting)
    }

    /// Gives up the events missing before `node`'s oldest blocked event (the oldest by
    /// timestamp among the first waiting events of its chains) and applies what waited behind
    /// them. `None` when nothing of that node waits behind a gap.
    pub fn accept_gap(&mut self, node: &str) -> Option<AcceptedGap> {
        let given = self.nodes.get_mut(node)?.give_up_oldest_gap()?;
        if !self.untracked {
            self.touched.touch(node, given.epoch.as_deref());
        }
        let released = self.release(node) as u64;
        Some(AcceptedGap {
            node: node.to_owned(),
            epoch: given.epoch,
            from: given.from,
            to: given.to,
            released,
            at: Utc::now(),
        })
    }

    /// Applies `node`'s waiting events that are ready, until none is; returns how many.
    fn release(&mut self, node: &str) -> usize {
        let mut released = 0;
        while let Some(next) = self.nodes.get_mut(node).and_then(NodeCursor::take_ready) {
            self.apply(next);
            released += 1;
        }
        released
    }

    fn apply(&mut self, event: Event) {
        self.stats.applied += 1;
        if event.seq > 0 {
            match self.nodes.get_mut(&event.node_id) {
                Some(cursor) => cursor.mark_applied(&event),
                None => {
                    let mut cursor = NodeCursor::default();
                    cursor.mark_applied(&event);
                    self.nodes.insert(event.node_id.clone(), cursor);
                }
            }
            if !self.untracked {
                self.touched.touch(&event.node_id, event.epoch.as_deref());
            }
        }
        if matches!(event.kind, EventKind::Lost { .. }) {
            self.stats.lost += 1;
        }
        self.project(event);
    }

    /// Applies an event to the projection, unless its item is held (or the event holds it).
    fn project(&mut self, event: Event) {
        let key = match (self.untracked, event.kind.item_id()) {
            (false, Some(item_id)) => Some((event.job_id.clone(), item_id.to_owned())),
            _ => None,
        };
        if let Some(key) = &key {
            self.touched.items.insert(key.clone());
        }
        match held::route(&mut self.held, event) {
            Some(event) => self.projection.apply_owned(event),
            None => self.touched.held.extend(key),
        }
    }
}

mod held;

#[cfg(test)]
mod epoch_tests;
#[cfg(test)]
mod held_tests;
#[cfg(test)]
mod jump_tests;
#[cfg(test)]
mod tests;
