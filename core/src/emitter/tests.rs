//! Unit tests of the emitter's retry, audit and cancellation logic with a scripted bus.
//! Time is paused, so delays are exact and nothing sleeps for real.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::testing::{item, FakeBus, MemorySink};

fn build(bus: FakeBus, policy: TopicPolicy) -> Emitter<MemorySink, FakeBus> {
    EmitterBuilder::new(MemorySink::default(), bus)
        .policies(TopicPolicies {
            default: policy,
            ..TopicPolicies::default()
        })
        .reconciler(None)
        .build()
}

fn policy(retry_attempts: u32, retry_delay: Duration, backoff: RetryBackoff) -> TopicPolicy {
    TopicPolicy {
        retry_attempts,
        retry_delay,
        backoff,
    }
}

/// An emitter whose topics make one attempt, with a reconciler run as `config` says.
fn without_retries(bus: FakeBus, config: ReconcilerConfig) -> Emitter<MemorySink, FakeBus> {
    EmitterBuilder::new(MemorySink::default(), bus)
        .policies(TopicPolicies {
            default: policy(0, Duration::ZERO, RetryBackoff::Fixed),
            ..TopicPolicies::default()
        })
        .reconciler(Some(config))
        .build()
}

fn audits(emitter: &Emitter<MemorySink, FakeBus>) -> Vec<(String, u32)> {
    emitter
        .sink()
        .log()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::EmitFailed {
                failed_event_id,
                attempts,
                ..
            } => Some((failed_event_id, attempts)),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn attempts_and_delays_follow_the_topic_policy() {
    let bus = FakeBus {
        fail_first: 100.into(),
        ..FakeBus::default()
    };
    let emitter = build(
        bus,
        policy(3, Duration::from_millis(100), RetryBackoff::Fixed),
    );
    let started = Instant::now();
    let receipt = emitter.dead_letter("t", item("j", "a")).await.unwrap();
    assert!(!receipt.published);
    assert_eq!(started.elapsed(), Duration::from_millis(300));
    assert_eq!(emitter.bus().attempts.lock().unwrap().len(), 4);
    assert_eq!(audits(&emitter), vec![("mem:1".to_owned(), 4)]);
}

#[tokio::test(start_paused = true)]
async fn exponential_backoff_doubles_the_delay() {
    let bus = FakeBus {
        fail_first: 100.into(),
        ..FakeBus::default()
    };
    let emitter = build(
        bus,
        policy(3, Duration::from_millis(100), RetryBackoff::Exponential),
    );
    let started = Instant::now();
    emitter.dead_letter("t", item("j", "a")).await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(100 + 200 + 400));
}

#[tokio::test(start_paused = true)]
async fn success_on_the_second_attempt_is_published_without_audit() {
    let bus = FakeBus {
        fail_first: 1.into(),
        ..FakeBus::default()
    };
    let emitter = build(bus, TopicPolicy::default());
    let receipt = emitter.dead_letter("t", item("j", "a")).await.unwrap();
    assert!(receipt.published);
    assert_eq!(emitter.bus().attempts.lock().unwrap().len(), 2);
    assert!(audits(&emitter).is_empty());
    assert_eq!(emitter.sink().backlog().unwrap().count, 0);
}

#[tokio::test(start_paused = true)]
async fn a_rejected_event_is_not_retried() {
    let bus = FakeBus {
        fail_first: 100.into(),
        reject: true.into(),
        ..FakeBus::default()
    };
    let emitter = build(bus, policy(5, Duration::from_secs(1), RetryBackoff::Fixed));
    emitter.dead_letter("t", item("j", "a")).await.unwrap();
    assert_eq!(emitter.bus().attempts.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_a_retry_wait() {
    let bus = FakeBus {
        fail_first: 100.into(),
        ..FakeBus::default()
    };
    let emitter = build(
        bus,
        policy(1, Duration::from_secs(3600), RetryBackoff::Fixed),
    );
    let started = Instant::now();
    let task = {
        let emitter = emitter.clone();
        tokio::spawn(async move { emitter.dead_letter("t", item("j", "a")).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    emitter.shutdown().await.unwrap();
    let receipt = task.await.unwrap().unwrap();
    assert!(!receipt.published);
    assert!(started.elapsed() < Duration::from_secs(3600));
    assert_eq!(
        emitter.sink().backlog().unwrap().count,
        2,
        "item and audit stay unpublished"
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_final_failure_later_events_are_left_to_the_reconciler() {
    let bus = FakeBus::default();
    let emitter = build(bus, policy(0, Duration::ZERO, RetryBackoff::Fixed));
    // Fill job capacity (100 in MemorySink), then one more: eviction + new item in one emit.
    for n in 0..100 {
        emitter
            .dead_letter("t", item("j", &format!("i{n}")))
            .await
            .unwrap();
    }
    emitter.bus().fail_first.store(100, Ordering::SeqCst);
    let receipt = emitter.dead_letter("t", item("j", "last")).await.unwrap();
    assert_eq!(receipt.event_ids.len(), 2, "eviction then the new item");
    let attempts = emitter.bus().attempts.lock().unwrap().clone();
    assert_eq!(attempts.last(), Some(&receipt.event_ids[0]));
    assert!(!attempts.contains(&receipt.event_ids[1]));
}

#[tokio::test(start_paused = true)]
async fn unknown_items_and_bad_ids_are_refused_without_publishing() {
    let emitter = build(FakeBus::default(), TopicPolicy::default());
    let err = emitter
        .submit(
            "t",
            Command::Remove {
                job_id: "j".into(),
                item_id: "nope".into(),
                reason: crate::domain::event::RemovalReason::Resolved,
                by: None,
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, EmitError::NotFound { .. }), "{err}");
    let err = emitter.dead_letter("t", item("", "a")).await.unwrap_err();
    assert!(matches!(err, EmitError::Rejected(_)), "{err}");
    assert!(emitter.bus().attempts.lock().unwrap().is_empty());
    assert!(emitter.sink().log().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_disabled_reconciler_leaves_failed_publishes_unpublished() {
    let bus = FakeBus {
        fail_first: 1.into(),
        ..FakeBus::default()
    };
    let config = ReconcilerConfig {
        enabled: false,
        interval: Duration::from_millis(10),
        ..ReconcilerConfig::default()
    };
    let emitter = without_retries(bus, config);
    emitter.dead_letter("t", item("j", "a")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        emitter.sink().backlog().unwrap().count,
        2,
        "nobody republished"
    );
    assert_eq!(emitter.bus().attempts.lock().unwrap().len(), 1);
}

/// A command with several events (a clear of two items) spends the topic's attempts once, not
/// once per event: with 3 retries, the first event takes all 4 attempts, and the second is left
/// to the reconciler instead of starting a fresh retry budget.
#[tokio::test(start_paused = true)]
async fn a_command_with_several_events_spends_the_retry_budget_once() {
    let emitter = build(
        FakeBus::default(),
        policy(3, Duration::from_millis(100), RetryBackoff::Fixed),
    );
    emitter.dead_letter("t", item("j", "a")).await.unwrap();
    emitter.dead_letter("t", item("j", "b")).await.unwrap();
    let before = emitter.bus().attempts.lock().unwrap().len();
    emitter.bus().fail_first.store(3, Ordering::SeqCst);
    let started = Instant::now();
    let clear = Command::Clear {
        job_id: "j".into(),
        limit: 10,
        by: None,
    };
    let receipt = emitter.submit("t", clear).await.unwrap();
    assert_eq!(receipt.event_ids.len(), 2);
    assert!(
        !receipt.published,
        "the second removal waits for the reconciler"
    );
    let attempts = emitter.bus().attempts.lock().unwrap().len() - before;
    assert_eq!(attempts, 4, "1 attempt + 3 retries for the whole command");
    assert_eq!(started.elapsed(), Duration::from_millis(300));
    assert_eq!(emitter.sink().backlog().unwrap().count, 1);
}

/// While the bus is down every failed emit wakes the reconciler; it reads the backlog for its
/// gauges once per interval, not once per wake.
#[tokio::test(start_paused = true)]
async fn a_reconciler_woken_by_every_failure_reads_the_backlog_once_per_interval() {
    let bus = FakeBus {
        fail_first: usize::MAX.into(),
        unhealthy: true.into(),
        ..FakeBus::default()
    };
    let config = ReconcilerConfig {
        interval: Duration::from_secs(1),
        ..ReconcilerConfig::default()
    };
    let emitter = without_retries(bus, config);
    for n in 0..50 {
        emitter
            .dead_letter("t", item("j", &format!("i{n}")))
            .await
            .unwrap();
        // Let the woken reconciler run.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // 50 failures over 0.5 s: the first report, and at most one more.
    let reads = emitter.sink().backlog_reads.load(Ordering::SeqCst);
    assert!((1..=2).contains(&reads), "{reads} backlog reads");
    assert_eq!(emitter.bus().attempts.lock().unwrap().len(), 50);
}
