//! The fold on a node whose log burned sequences (groups it refused): the first event after
//! each burned run names the last durable event before it, so nothing waits for a sequence
//! that will never come, in any arrival order.

use proptest::prelude::*;

use super::*;
use crate::domain::event::{EventKind, RemovalReason};
use crate::testing::{in_order, item};

const A: &str = "00000000000000aa";
const B: &str = "00000000000000bb";

fn event(epoch: &str, seq: u64, prev: Option<(&str, u64)>, kind: EventKind) -> Event {
    Event {
        event_id: Event::stored_id("n", epoch, seq),
        node_id: "n".into(),
        seq,
        epoch: Some(epoch.to_owned()),
        prev_epoch: prev.map(|(epoch, _)| epoch.to_owned()),
        prev_seq: prev.map(|(_, seq)| seq),
        timestamp: Utc::now(),
        job_id: "job".into(),
        topic: "t".into(),
        kind,
    }
}

fn added(epoch: &str, seq: u64, prev: Option<(&str, u64)>, id: &str) -> Event {
    let item = item("job", id);
    event(
        epoch,
        seq,
        prev,
        EventKind::DeadLettered { item: item.into() },
    )
}

fn removed(epoch: &str, seq: u64, prev: Option<(&str, u64)>, id: &str) -> Event {
    let kind = EventKind::ItemRemoved {
        item_id: id.into(),
        reason: RemovalReason::Resolved,
        removed_by: None,
        generation: None,
    };
    event(epoch, seq, prev, kind)
}

/// Epoch A on an empty directory: 1..=3, 4..=5 burned, 6 (names A:3), 7, 8 burned, 9 (names
/// A:7); epoch B, a restart, names A:9, its first group (1 of B's sequences, 10) burned, so its
/// first durable event 11 still names A:9. Removals make order matter.
fn history() -> Vec<Event> {
    let mut first = added(A, 1, None, "a1");
    first.prev_seq = Some(0);
    vec![
        first,
        added(A, 2, None, "a2"),
        added(A, 3, None, "a3"),
        removed(A, 6, Some((A, 3)), "a1"),
        added(A, 7, None, "a7"),
        removed(A, 9, Some((A, 7)), "a2"),
        removed(B, 11, Some((A, 9)), "a7"),
        added(B, 12, None, "b12"),
    ]
}

proptest! {
    /// Every event delivered in any order, duplicates anywhere, and a volatile event anywhere:
    /// nothing waits and the projection is the written one.
    #[test]
    fn burned_sequences_are_nobodys_predecessor_in_any_order(
        shuffled in Just((0..9).collect::<Vec<usize>>()).prop_shuffle(),
        dups in prop::collection::vec((0..9usize, 0..10usize), 0..6),
    ) {
        let mut events = history();
        let mut volatile = added(A, 0, None, "v");
        volatile.epoch = None;
        volatile.event_id = Event::volatile_id("n", 1, 0);
        events.push(volatile);
        let mut order = shuffled;
        for &(event, at) in &dups {
            order.insert(at.min(order.len()), event);
        }
        let mut fold = Fold::default();
        for &i in &order {
            fold.offer(events[i].clone());
        }
        prop_assert_eq!(fold.waiting(), 0);
        prop_assert_eq!(&fold.projection, &in_order(&events));
        prop_assert_eq!(fold.stats.applied, events.len() as u64);
        let mut ids: Vec<&str> = fold.projection.items.keys().map(|(_, i)| i.as_str()).collect();
        ids.sort_unstable();
        prop_assert_eq!(ids, vec!["a3", "b12", "v"]);
    }
}

/// Today's rule without the named predecessor: the event after a burned run waits for good.
#[test]
fn without_the_named_predecessor_the_event_after_a_burned_run_waits() {
    let mut events = history();
    events[3].prev_epoch = None;
    events[3].prev_seq = None;
    let mut fold = Fold::default();
    for event in events.iter().take(5) {
        fold.offer(event.clone());
    }
    assert_eq!(fold.waiting(), 2, "6 waits for 5, 7 behind it");
}
