//! The fold on events without epochs: arrival order, duplicates, gaps, jumps.

use proptest::prelude::*;

use super::*;
use crate::domain::command::Command;
use crate::sink::Sink;
use crate::testing::{in_order, item, MemorySink};

/// A realistic log: dead-letters, repeats, evictions (capacity 100 is not reached here, so
/// removals instead), from the in-memory sink.
async fn log() -> Vec<Event> {
    let sink = MemorySink::default();
    for n in 0..12 {
        let id = format!("i{}", n % 5);
        sink.append(Command::DeadLetter {
            topic: "t".into(),
            item: item("job", &id).into(),
        })
        .await
        .unwrap();
        if n % 4 == 3 {
            let remove = Command::Remove {
                job_id: "job".into(),
                item_id: id,
                reason: crate::domain::event::RemovalReason::Resolved,
                by: None,
            };
            sink.append(remove).await.unwrap();
        }
    }
    sink.log()
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
    assert_eq!(fold.nodes["mem"].applied_in(None), 500_000);
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
