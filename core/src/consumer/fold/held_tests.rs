//! The fold with stand-ins: a stub in place of an event too large for the bus holds its item
//! (and that item's later events) until the full event comes; a loss marker in place of an
//! unreadable entry lets the chain go on and is counted. Any arrival order, duplicates too.

use proptest::prelude::*;

use super::*;
use crate::domain::event::{EventKind, RemovalReason};
use crate::testing::{in_order, item};

const A: &str = "00000000000000aa";

fn event(seq: u64, kind: EventKind) -> Event {
    Event {
        event_id: Event::stored_id("n", A, seq),
        node_id: "n".into(),
        seq,
        epoch: Some(A.into()),
        prev_epoch: None,
        prev_seq: (seq == 1).then_some(0),
        timestamp: Utc::now(),
        job_id: "job".into(),
        topic: "t".into(),
        kind,
    }
}

fn added(seq: u64, id: &str) -> Event {
    let item = item("job", id);
    event(seq, EventKind::DeadLettered { item: item.into() })
}

fn removed(seq: u64, id: &str) -> Event {
    let reason = RemovalReason::Resolved;
    let item_id = id.into();
    event(
        seq,
        EventKind::ItemRemoved {
            item_id,
            reason,
            removed_by: None,
            generation: None,
        },
    )
}

fn flagged(seq: u64, id: &str) -> Event {
    let kind = EventKind::FlagsUpdated {
        item_id: id.into(),
        reprocess_eligible: Some(false),
        manual_review_required: Some(true),
    };
    event(seq, kind)
}

fn lost(seq: u64) -> Event {
    let mut marker = event(
        seq,
        EventKind::Lost {
            lost_reason: "corrupt log entry".into(),
        },
    );
    marker.event_id.push_str("~lost");
    marker.job_id = String::new();
    marker
}

/// What the node wrote: 2 (`big`) and 7 (`big` again, after its removal at 5) are too large
/// for the bus; 6 is unreadable (lost).
fn written() -> Vec<Event> {
    vec![
        added(1, "a1"),
        added(2, "big"),
        removed(3, "a1"),
        flagged(4, "big"),
        removed(5, "big"),
        added(6, "gone"),
        added(7, "big"),
        added(8, "a8"),
    ]
}

/// What the stream carries: stubs for 2 and 7 and a marker for 6 in their places, then the
/// full events of 2 and 7 (indices 8 and 9).
fn delivered(written: &[Event]) -> Vec<Event> {
    let mut stream = written.to_vec();
    stream[1] = written[1].stub("message too large", 1200);
    stream[5] = lost(6);
    stream[6] = written[6].stub("message too large", 1300);
    stream.push(written[1].clone());
    stream.push(written[6].clone());
    stream
}

/// The projection the node's sink holds, without what was lost.
fn expected(written: &[Event]) -> MemoryProjection {
    let mut kept = written.to_vec();
    kept.remove(5);
    in_order(&kept)
}

proptest! {
    /// Any order of the stream, duplicates anywhere: nothing waits, nothing stays held, the
    /// marker is counted once, and the projection is the sink's.
    #[test]
    fn stubs_hold_their_item_until_the_full_event_in_any_order(
        shuffled in Just((0..10).collect::<Vec<usize>>()).prop_shuffle(),
        dups in prop::collection::vec((0..10usize, 0..11usize), 0..6),
    ) {
        let written = written();
        let stream = delivered(&written);
        let mut order = shuffled;
        for &(event, at) in &dups {
            order.insert(at.min(order.len()), event);
        }
        let mut fold = Fold::default();
        for &i in &order {
            fold.offer(stream[i].clone());
        }
        prop_assert_eq!(fold.waiting(), 0);
        prop_assert!(fold.held.is_empty(), "{:?}", fold.held);
        prop_assert_eq!(&fold.projection, &expected(&written));
        prop_assert_eq!(fold.stats.lost, 1);
    }

    /// Without the full events (the bus still refuses them): nothing waits, the other items
    /// are the sink's, and the big item is held on its node.
    #[test]
    fn without_the_full_events_only_the_held_item_waits(
        shuffled in Just((0..8).collect::<Vec<usize>>()).prop_shuffle(),
    ) {
        let written = written();
        let stream = delivered(&written);
        let mut fold = Fold::default();
        for &i in &shuffled {
            fold.offer(stream[i].clone());
        }
        prop_assert_eq!(fold.waiting(), 0);
        let key = ("job".to_owned(), "big".to_owned());
        prop_assert_eq!(fold.held.keys().collect::<Vec<_>>(), vec![&key]);
        prop_assert_eq!(&fold.held[&key].node, "n");
        prop_assert_eq!(fold.held[&key].size_bytes, 1200);
        let mut others = expected(&written);
        others.items.remove(&key);
        prop_assert_eq!(&fold.projection, &others);
    }
}
