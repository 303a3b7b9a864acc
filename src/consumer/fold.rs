//! The consumer's pure fold: events in any arrival order, duplicates included, in; the same
//! projection the emitting sink holds, out.
//!
//! Each node's events are applied in that node's sequence order, exactly as its sink applied
//! them: an event whose predecessor has not been applied yet waits in a per-node buffer, an event
//! already applied (same node, sequence not above the last applied) is a duplicate and dropped.
//! The predecessor of `seq` is `seq - 1`, or `prev_seq` when the node announced a jump. Events the
//! sink failed to store (`seq == 0`) are applied once, by event id.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::event::Event;
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

/// A gap an operator accepted: the node's sequences `from..=to` will never be applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceptedGap {
    /// The node whose events were missing.
    pub node: String,
    /// First sequence given up.
    pub from: u64,
    /// Last sequence given up.
    pub to: u64,
    /// Waiting events applied once the gap was accepted.
    pub released: u64,
    /// When it was accepted.
    pub at: DateTime<Utc>,
}

/// Per-node progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeCursor {
    /// The highest sequence applied (0: none yet).
    pub applied: u64,
    /// Events waiting for a predecessor, by sequence.
    pub waiting: BTreeMap<u64, Event>,
}

/// Counters of a fold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldStats {
    /// Events applied to the projection.
    pub applied: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
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
    /// Counters.
    pub stats: FoldStats,
    /// What changed since [`Fold::take_touched`] was last called (for incremental persistence).
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
    /// Volatile event ids newly seen.
    pub volatile: Vec<String>,
}

impl Fold {
    /// A fold that does not record what changed: for a rebuild kept only in memory, where
    /// nobody calls [`Fold::take_touched`].
    pub fn untracked() -> Self {
        Fold {
            untracked: true,
            ..Fold::default()
        }
    }

    /// Offers one event, in whatever order it arrived.
    pub fn offer(&mut self, event: Event) -> Offer {
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
        if event.seq <= cursor.applied || cursor.waiting.contains_key(&event.seq) {
            self.stats.duplicates += 1;
            return Offer::Duplicate;
        }
        if predecessor(&event) > cursor.applied {
            if !self.untracked {
                self.touched.nodes.insert(event.node_id.clone());
            }
            cursor.waiting.insert(event.seq, event);
            return Offer::Buffered;
        }
        if cursor.waiting.is_empty() {
            self.apply(event);
            return Offer::Applied { unblocked: 0 };
        }
        let node = event.node_id.clone();
        self.apply(event);
        let mut unblocked = 0;
        while let Some(next) = self.next_ready(&node) {
            self.apply(next);
            unblocked += 1;
        }
        Offer::Applied { unblocked }
    }

    /// Returns what changed since the last call, and starts a new record.
    pub fn take_touched(&mut self) -> Touched {
        std::mem::take(&mut self.touched)
    }

    /// Events waiting for a predecessor, over all nodes.
    pub fn waiting(&self) -> usize {
        self.nodes.values().map(|c| c.waiting.len()).sum()
    }

    /// The timestamp of the oldest event waiting for a predecessor (`None` when nothing
    /// waits): how long the oldest gap has blocked its node.
    pub fn oldest_waiting(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.nodes
            .values()
            .filter_map(|cursor| cursor.waiting.values().map(|e| e.timestamp).min())
            .min()
    }

    /// The node with the most events waiting, if it has more than [`MAX_WAITING_PER_NODE`].
    pub fn overflowing(&self) -> Option<(&str, usize)> {
        self.nodes
            .iter()
            .map(|(node, cursor)| (node.as_str(), cursor.waiting.len()))
            .filter(|(_, waiting)| *waiting > MAX_WAITING_PER_NODE)
            .max_by_key(|(_, waiting)| *waiting)
    }

    /// Gives up the events missing before `node`'s oldest waiting event and applies what waited
    /// behind them. `None` when nothing of that node waits behind a gap.
    pub fn accept_gap(&mut self, node: &str) -> Option<AcceptedGap> {
        let cursor = self.nodes.get_mut(node)?;
        let to = cursor.waiting.values().next().map(predecessor)?;
        if to <= cursor.applied {
            return None;
        }
        let from = cursor.applied + 1;
        cursor.applied = to;
        if !self.untracked {
            self.touched.nodes.insert(node.to_owned());
        }
        let mut released = 0;
        while let Some(next) = self.next_ready(node) {
            self.apply(next);
            released += 1;
        }
        Some(AcceptedGap {
            node: node.to_owned(),
            from,
            to,
            released,
            at: Utc::now(),
        })
    }

    fn next_ready(&mut self, node: &str) -> Option<Event> {
        let cursor = self.nodes.get_mut(node)?;
        let (&seq, event) = cursor.waiting.first_key_value()?;
        if predecessor(event) > cursor.applied {
            return None;
        }
        cursor.waiting.remove(&seq)
    }

    fn apply(&mut self, event: Event) {
        self.stats.applied += 1;
        if !self.untracked {
            if let Some(item_id) = event.kind.item_id() {
                let key = (event.job_id.clone(), item_id.to_owned());
                self.touched.items.insert(key);
            }
        }
        if event.seq > 0 {
            if let Some(cursor) = self.nodes.get_mut(&event.node_id) {
                cursor.applied = cursor.applied.max(event.seq);
            } else {
                let cursor = NodeCursor {
                    applied: event.seq,
                    ..NodeCursor::default()
                };
                self.nodes.insert(event.node_id.clone(), cursor);
            }
            if !self.untracked && !self.touched.nodes.contains(&event.node_id) {
                self.touched.nodes.insert(event.node_id.clone());
            }
        }
        self.projection.apply(&event);
    }
}

/// The sequence that must be applied before `event`.
fn predecessor(event: &Event) -> u64 {
    event.prev_seq.unwrap_or(event.seq.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::domain::command::Command;
    use crate::sink::Sink;
    use crate::testing::{item, MemorySink};

    /// A realistic log: dead-letters, repeats, evictions (capacity 100 is not reached here, so
    /// removals instead), from the in-memory sink.
    async fn log() -> Vec<Event> {
        let sink = MemorySink::default();
        for n in 0..12 {
            let id = format!("i{}", n % 5);
            sink.append(Command::DeadLetter {
                topic: "t".into(),
                item: Box::new(item("job", &id)),
            })
            .await
            .unwrap();
            if n % 4 == 3 {
                let remove = Command::Remove {
                    job_id: "job".into(),
                    item_id: id,
                    reason: crate::domain::event::RemovalReason::Resolved,
                };
                sink.append(remove).await.unwrap();
            }
        }
        sink.log()
    }

    fn in_order(events: &[Event]) -> MemoryProjection {
        let mut projection = MemoryProjection::default();
        events.iter().for_each(|e| projection.apply(e));
        projection
    }

    proptest! {
        /// Every event delivered once in any order, plus duplicates anywhere, gives exactly
        /// the in-order projection: early arrivals wait, duplicates are dropped.
        #[test]
        fn any_arrival_order_gives_the_sink_projection(
            shuffled in Just((0..15).collect::<Vec<usize>>()).prop_shuffle(),
            dups in prop::collection::vec((0..15usize, 0..16usize), 0..6),
        ) {
            let mut order = shuffled;
            for &(event, at) in &dups {
                order.insert(at.min(order.len()), event);
            }
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let events = runtime.block_on(log());
            prop_assert_eq!(events.len(), 15);
            let mut fold = Fold::default();
            for &i in &order {
                fold.offer(events[i].clone());
            }
            prop_assert_eq!(fold.waiting(), 0);
            prop_assert_eq!(&fold.projection, &in_order(&events));
            prop_assert_eq!(fold.stats.applied, events.len() as u64);
            prop_assert_eq!(fold.stats.duplicates, dups.len() as u64);
        }
    }

    /// An untracked fold (in-memory rebuilds) gives the same projection and counters and
    /// records nothing for persistence; a tracked one records every item and the node.
    #[test]
    fn an_untracked_fold_folds_alike_and_records_nothing() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let events = runtime.block_on(log());
        let (mut tracked, mut untracked) = (Fold::default(), Fold::untracked());
        for event in events.iter().rev().chain(&events) {
            tracked.offer(event.clone());
            untracked.offer(event.clone());
        }
        assert_eq!(untracked.projection, tracked.projection);
        assert_eq!(untracked.projection, in_order(&events));
        assert_eq!(untracked.stats, tracked.stats);
        assert_eq!(untracked.nodes, tracked.nodes);
        assert_eq!(untracked.take_touched(), Touched::default());
        let touched = tracked.take_touched();
        assert_eq!(touched.items.len(), 5);
        assert!(touched.nodes.contains("mem"));
    }

    #[test]
    fn an_accepted_gap_releases_what_waited_behind_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let events = runtime.block_on(log());
        let mut fold = Fold::default();
        fold.offer(events[0].clone());
        for event in &events[3..] {
            fold.offer(event.clone());
        }
        assert_eq!(fold.waiting(), events.len() - 3);
        assert_eq!(fold.accept_gap("other"), None);
        let gap = fold.accept_gap("mem").unwrap();
        assert_eq!((gap.from, gap.to), (events[1].seq, events[2].seq));
        assert_eq!(gap.released, (events.len() - 3) as u64);
        assert_eq!(fold.waiting(), 0);
        assert_eq!(fold.accept_gap("mem"), None, "nothing waits any more");
        assert!(fold.take_touched().nodes.contains("mem"));
    }

    #[test]
    fn a_node_with_too_many_events_behind_a_gap_overflows() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let template = runtime.block_on(log()).remove(0);
        let mut fold = Fold::untracked();
        for seq in 2..=(MAX_WAITING_PER_NODE as u64 + 1) {
            let mut event = template.clone();
            event.seq = seq;
            fold.offer(event);
        }
        assert_eq!(fold.overflowing(), None, "exactly the limit is allowed");
        let mut event = template.clone();
        event.seq = MAX_WAITING_PER_NODE as u64 + 2;
        fold.offer(event);
        assert_eq!(fold.overflowing(), Some(("mem", MAX_WAITING_PER_NODE + 1)));
    }

    #[test]
    fn an_announced_jump_does_not_block() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut events = runtime.block_on(log());
        let last = events.len() - 1;
        events[last].seq = 500_000;
        events[last].prev_seq = Some(events[last - 1].seq);
        let mut fold = Fold::default();
        assert_eq!(fold.offer(events[last].clone()), Offer::Buffered);
        for event in &events[..last] {
            fold.offer(event.clone());
        }
        assert_eq!(fold.waiting(), 0);
        assert_eq!(fold.nodes["mem"].applied, 500_000);
    }

    #[test]
    fn an_unannounced_gap_waits_and_volatile_events_apply_once() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let events = runtime.block_on(log());
        let mut fold = Fold::default();
        assert_eq!(fold.offer(events[2].clone()), Offer::Buffered);
        assert_eq!(
            fold.offer(events[0].clone()),
            Offer::Applied { unblocked: 0 }
        );
        assert_eq!(
            fold.offer(events[1].clone()),
            Offer::Applied { unblocked: 1 }
        );
        assert_eq!(fold.offer(events[1].clone()), Offer::Duplicate);
        let mut volatile = events[3].clone();
        volatile.seq = 0;
        volatile.event_id = "mem:v1-0".into();
        assert!(matches!(
            fold.offer(volatile.clone()),
            Offer::Applied { .. }
        ));
        assert_eq!(fold.offer(volatile), Offer::Duplicate);
        assert_eq!(fold.stats.duplicates, 2);
    }
}
