//! The fold across epochs: a node whose data directory was restarted, restored from an older
//! copy and replaced, delivered in any order with duplicates.

use proptest::prelude::*;

use super::*;
use crate::domain::event::{EventKind, RemovalReason};
use crate::testing::{in_order, item};

const A: &str = "00000000000000aa";
const B: &str = "00000000000000bb";
const C: &str = "00000000000000cc";
const D: &str = "00000000000000dd";

/// An event of node `n` in `epoch` (`None`: written before epochs).
fn event(epoch: Option<&str>, seq: u64, kind: EventKind) -> Event {
    Event {
        event_id: match epoch {
            Some(epoch) => Event::stored_id("n", epoch, seq),
            None => Event::legacy_id("n", seq),
        },
        node_id: "n".into(),
        seq,
        epoch: epoch.map(str::to_owned),
        prev_epoch: None,
        prev_seq: None,
        timestamp: Utc::now(),
        job_id: "job".into(),
        topic: "t".into(),
        kind,
    }
}

fn added(epoch: Option<&str>, seq: u64, id: &str) -> Event {
    event(
        epoch,
        seq,
        EventKind::DeadLettered {
            item: item("job", id).into(),
        },
    )
}

fn removed(epoch: Option<&str>, seq: u64, id: &str) -> Event {
    let reason = RemovalReason::Resolved;
    event(
        epoch,
        seq,
        EventKind::ItemRemoved {
            item_id: id.into(),
            reason,
            removed_by: None,
            generation: None,
        },
    )
}

/// The first event of an epoch opened on a directory whose last event was `prev`.
fn first(mut event: Event, prev: (Option<&str>, u64)) -> Event {
    event.prev_epoch = prev.0.map(str::to_owned);
    event.prev_seq = Some(prev.1);
    event
}

/// One node's history, in an order its sink could have written it:
/// - sequences 1..=3 written before epochs;
/// - epoch A opened on that directory (4..=6), removing an item of the old chain;
/// - epoch B: a copy of the directory taken after A:5 restored and opened (the sequence floor
///   of the copy makes it jump to 100_001); it removes an item A:5 added;
/// - epoch C: the directory replaced by an empty one (sequences start again at 1);
/// - epoch D: C's directory opened again (a restart), removing an item C added.
///
/// Removals make order matter: applied before its item is added, a removal is lost and the
/// item stays.
fn history() -> Vec<Event> {
    vec![
        added(None, 1, "l1"),
        added(None, 2, "l2"),
        added(None, 3, "l3"),
        first(removed(Some(A), 4, "l2"), (None, 3)),
        added(Some(A), 5, "a5"),
        added(Some(A), 6, "a6"),
        first(removed(Some(B), 100_001, "a5"), (Some(A), 5)),
        added(Some(B), 100_002, "b2"),
        first(added(Some(C), 1, "c1"), (None, 0)),
        added(Some(C), 2, "c2"),
        first(removed(Some(D), 3, "c1"), (Some(C), 2)),
        added(Some(D), 4, "d4"),
    ]
}

proptest! {
    /// Every event of every epoch delivered once in any order, plus duplicates anywhere, gives
    /// exactly the projection of the order the node wrote them: nothing waits, nothing is
    /// dropped (same sequences in different epochs are different events), removals never
    /// overtake what they remove.
    #[test]
    fn any_arrival_order_across_epochs_gives_the_written_projection(
        shuffled in Just((0..12).collect::<Vec<usize>>()).prop_shuffle(),
        dups in prop::collection::vec((0..12usize, 0..13usize), 0..6),
    ) {
        let events = history();
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
        prop_assert_eq!(fold.stats.duplicates, dups.len() as u64);
    }
}

#[test]
fn the_written_order_keeps_every_item_a_later_epoch_did_not_remove() {
    let projection = in_order(&history());
    let mut ids: Vec<&str> = projection.items.keys().map(|(_, i)| i.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["a6", "b2", "c2", "d4", "l1", "l3"]);
}

#[test]
fn a_replaced_directory_reusing_sequences_is_not_a_duplicate() {
    let mut fold = Fold::default();
    for seq in 1..=3 {
        fold.offer(added(Some(A), seq, &format!("a{seq}")));
    }
    let fresh = first(added(Some(C), 1, "c1"), (None, 0));
    assert_eq!(fold.offer(fresh.clone()), Offer::Applied { unblocked: 0 });
    assert_eq!(
        fold.offer(added(Some(C), 2, "c2")),
        Offer::Applied { unblocked: 0 }
    );
    assert_eq!(fold.offer(fresh), Offer::Duplicate);
    assert_eq!(fold.projection.items.len(), 5);
    assert_eq!(fold.nodes["n"].applied_in(Some(C)), 2);
    assert_eq!(fold.nodes["n"].highest_applied(), 3);
}

#[test]
fn a_restart_waits_for_the_event_it_names_then_releases_its_chain() {
    let events = history();
    let mut fold = Fold::default();
    // C:1, then D's two events, then C:2 that D:3 names.
    assert_eq!(
        fold.offer(events[8].clone()),
        Offer::Applied { unblocked: 0 }
    );
    assert_eq!(fold.offer(events[11].clone()), Offer::Buffered);
    assert_eq!(fold.offer(events[10].clone()), Offer::Buffered);
    assert_eq!(fold.waiting(), 2);
    assert_eq!(
        fold.offer(events[9].clone()),
        Offer::Applied { unblocked: 2 }
    );
    assert_eq!(fold.waiting(), 0);
    assert!(!fold
        .projection
        .items
        .contains_key(&("job".into(), "c1".into())));
}

#[test]
fn a_restored_copy_applies_beside_the_chain_it_forked_from() {
    let events = history();
    let mut fold = Fold::default();
    for event in &events[..6] {
        fold.offer(event.clone());
    }
    // B names A:5; A is applied through 6 already.
    assert_eq!(
        fold.offer(events[6].clone()),
        Offer::Applied { unblocked: 0 }
    );
    assert_eq!(
        fold.offer(events[7].clone()),
        Offer::Applied { unblocked: 0 }
    );
    assert_eq!(fold.nodes["n"].applied_in(Some(A)), 6);
    assert_eq!(fold.nodes["n"].applied_in(Some(B)), 100_002);
}

#[test]
fn an_epoch_naming_a_chain_never_seen_waits_until_the_gap_is_accepted() {
    let events = history();
    let mut fold = Fold::default();
    assert_eq!(fold.offer(events[11].clone()), Offer::Buffered);
    assert_eq!(fold.offer(events[10].clone()), Offer::Buffered);
    let gap = fold.accept_gap("n").unwrap();
    assert_eq!(gap.epoch.as_deref(), Some(C));
    assert_eq!((gap.from, gap.to, gap.released), (1, 2, 2));
    assert_eq!(fold.waiting(), 0);
    assert_eq!(fold.offer(events[9].clone()), Offer::Duplicate, "given up");
    assert_eq!(fold.accept_gap("n"), None);
}
