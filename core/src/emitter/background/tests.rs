//! The durable-only promise with a scripted bus and paused time: `store` returns before any
//! publish attempt, the background publish follows the topic's policy, and what it does not
//! try is left to the reconciler, counted once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use crate::domain::event::EventKind;
use crate::emitter::{
    Emitter, EmitterBuilder, PublishOutcome, RetryBackoff, TopicPolicies, TopicPolicy,
};
use crate::sink::Sink;
use crate::testing::{item, FakeBus, MemorySink};

const LONG: Duration = Duration::from_secs(600);

fn build(
    bus: FakeBus,
    retries: u32,
    delay: Duration,
    limit: usize,
) -> Emitter<MemorySink, FakeBus> {
    EmitterBuilder::new(MemorySink::default(), bus)
        .policies(TopicPolicies {
            default: TopicPolicy {
                retry_attempts: retries,
                retry_delay: delay,
                backoff: RetryBackoff::Fixed,
            },
            ..TopicPolicies::default()
        })
        .reconciler(None)
        .background_limit(limit)
        .build()
}

fn failing(n: usize) -> FakeBus {
    FakeBus {
        fail_first: n.into(),
        ..FakeBus::default()
    }
}

fn audits(emitter: &Emitter<MemorySink, FakeBus>) -> usize {
    let log = emitter.sink().log();
    log.iter()
        .filter(|e| matches!(e.kind, EventKind::EmitFailed { .. }))
        .count()
}

#[tokio::test(start_paused = true)]
async fn store_returns_before_the_retries_and_the_receipt_awaits_them() {
    let emitter = build(failing(2), 3, Duration::from_millis(100), 8);
    let started = Instant::now();
    let receipt = emitter.store("t", item("j", "a")).await.unwrap();
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "nothing waited for the bus"
    );
    assert_eq!(emitter.sink().backlog().unwrap().count, 1);
    assert_eq!(receipt.outcome().await, PublishOutcome::Published);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(200),
        "two retry delays"
    );
    assert_eq!(emitter.bus().attempts.lock().unwrap().len(), 3);
    assert_eq!(emitter.sink().backlog().unwrap().count, 0);
}

#[tokio::test(start_paused = true)]
async fn a_final_failure_in_the_background_is_audited_once() {
    let emitter = build(failing(100), 2, Duration::from_millis(100), 8);
    let receipt = emitter.store("t", item("j", "a")).await.unwrap();
    assert_eq!(receipt.outcome().await, PublishOutcome::Failed);
    assert_eq!(emitter.bus().attempts.lock().unwrap().len(), 3);
    assert_eq!(audits(&emitter), 1);
}

#[tokio::test(start_paused = true)]
async fn a_background_retry_gives_up_when_the_bus_goes_down() {
    let emitter = build(failing(100), 5, LONG, 8);
    let started = Instant::now();
    let receipt = emitter.store("t", item("j", "a")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    emitter.bus().unhealthy.store(true, Ordering::SeqCst);
    assert_eq!(receipt.outcome().await, PublishOutcome::Failed);
    assert!(started.elapsed() < LONG, "it waited out the delay");
    assert_eq!(emitter.bus().attempts.lock().unwrap().len(), 1);
    assert_eq!(audits(&emitter), 1, "the failure is recorded once");
    assert_eq!(
        emitter.sink().backlog().unwrap().count,
        2,
        "item and audit unpublished"
    );
}

#[tokio::test(start_paused = true)]
async fn with_the_bus_known_down_nothing_is_tried() {
    let emitter = build(FakeBus::default(), 5, LONG, 8);
    emitter.bus().unhealthy.store(true, Ordering::SeqCst);
    let receipt = emitter.store("t", item("j", "a")).await.unwrap();
    assert_eq!(receipt.outcome().await, PublishOutcome::LeftToReconciler);
    assert!(emitter.bus().attempts.lock().unwrap().is_empty());
    assert_eq!(audits(&emitter), 0);
    assert_eq!(emitter.sink().backlog().unwrap().count, 1);
}

#[tokio::test(start_paused = true)]
async fn past_the_limit_an_event_is_left_to_the_reconciler() {
    let emitter = build(failing(1), 1, LONG, 1);
    let first = emitter.store("t", item("j", "a")).await.unwrap();
    let second = emitter.store("t", item("j", "b")).await.unwrap();
    assert_eq!(second.outcome().await, PublishOutcome::LeftToReconciler);
    assert_eq!(first.outcome().await, PublishOutcome::Published);
    // Only the first event was ever tried; the second waits in the backlog.
    let attempts = emitter.bus().attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 2);
    assert!(attempts.iter().all(|id| id == &attempts[0]));
    assert_eq!(emitter.sink().backlog().unwrap().count, 1);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_the_background_retries_before_closing_the_sink() {
    let emitter = build(failing(100), 5, LONG, 8);
    let started = Instant::now();
    let receipt = emitter.store("t", item("j", "a")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    emitter.shutdown().await.unwrap();
    assert!(started.elapsed() < LONG, "shutdown waited out the delay");
    assert_eq!(
        audits(&emitter),
        1,
        "the audit event was stored before the sink closed"
    );
    assert_eq!(receipt.outcome().await, PublishOutcome::Failed);
    // The memory sink still appends after close: no new background publish starts.
    let after = emitter.store("t", item("j", "b")).await.unwrap();
    assert_eq!(after.outcome().await, PublishOutcome::LeftToReconciler);
    assert_eq!(emitter.bus().attempts.lock().unwrap().len(), 1);
}
