//! The emitter against a real nats-server and a real sled sink: healthy bus, bus killed, bus
//! frozen, a retry that succeeds, a failing sink, and a sink too slow for the store timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::{Duration, Instant};

use dlq::bus::NatsBus;
use dlq::domain::event::EventKind;
use dlq::domain::model::DeadLetteredItem;
use dlq::emitter::{EmitError, Emitter, TopicPolicy};
use dlq::sink::{LocalSink, Sink, SinkConfig, SinkError};
use dlq_testkit::items::failed_once;
use dlq_testkit::node::{
    self, assert_stream_matches_log, connected, drained, kill_bus, logged_ids,
};
use dlq_testkit::stream::{metric_value, stream_ids, stream_messages};
use dlq_testkit::{wait_for, NatsServer};
use serde_json::json;

const PUBLISH_TIMEOUT: Duration = Duration::from_millis(500);
const RETRY_DELAY: Duration = Duration::from_millis(300);

type TestEmitter = Emitter<LocalSink, NatsBus>;

/// The emitter's metrics are process-wide (one Prometheus recorder): tests that assert metric
/// values would see what concurrent tests' emitters write, so the tests of this file run one at
/// a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn item(job: &str, id: &str) -> DeadLetteredItem {
    let message = format!("cargo test failed with exit code 101 in /tmp/{id}");
    failed_once(
        (job, id),
        "shell: cargo test",
        101,
        message,
        json!({ "id": id }),
    )
}

async fn emitter(dir: &Path, url: &str, policy: TopicPolicy) -> TestEmitter {
    emitter_with(SinkConfig::new(dir), url, policy).await
}

async fn emitter_with(config: SinkConfig, url: &str, policy: TopicPolicy) -> TestEmitter {
    node::emitter(config, url, policy, PUBLISH_TIMEOUT).await
}

/// Awaits an emit that must return on its own with the bus down or frozen. How long it takes
/// is measured by `benches/durable_emit` (section 3, bus down), not asserted here; the bound
/// only stops a hung emit from hanging the test run.
async fn returns<T>(emit: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(120), emit)
        .await
        .expect("the emit never returned")
}

fn one_retry() -> TopicPolicy {
    TopicPolicy {
        retry_attempts: 1,
        retry_delay: RETRY_DELAY,
        ..TopicPolicy::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_bus_stores_then_publishes_exactly_once() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), one_retry()).await;
    connected(&emitter).await;

    let receipt = emitter
        .dead_letter("healthy", item("job-1", "a"))
        .await
        .unwrap();
    assert!(receipt.published);
    let stored = emitter.sink().event(1).unwrap().unwrap();
    assert_eq!(
        receipt.event_ids,
        vec![format!(
            "{}:{}:1",
            emitter.sink().node_id(),
            stored.epoch.unwrap()
        )]
    );
    assert!(emitter.sink().item("job-1", "a").unwrap().is_some());
    assert_eq!(emitter.sink().backlog().unwrap().count, 0);

    let messages = stream_messages(&server.url(), "DLQ").await;
    assert_eq!(messages.len(), 1);
    let (id, body) = &messages[0];
    assert_eq!(id, &receipt.event_ids[0]);
    assert_eq!(body["kind"], "dead_lettered");
    assert_eq!(body["item"]["item_id"], "a");
    assert_eq!(body["job_id"], "job-1");
    emitter.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_killed_emit_is_bounded_audited_and_reconciled() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), one_retry()).await;
    connected(&emitter).await;
    kill_bus(&mut server, &emitter).await;

    let before = metric_value("dlq_emit_failures_total", &[("topic", "killed")]);
    let mut stored = Vec::new();
    for n in 0..5 {
        let started = Instant::now();
        let receipt = returns(emitter.dead_letter("killed", item("job-2", &format!("i{n}"))))
            .await
            .unwrap();
        let took = started.elapsed();
        assert!(!receipt.published);
        assert!(
            took >= RETRY_DELAY,
            "the retry delay was not applied: {took:?}"
        );
        stored.extend(receipt.event_ids);
    }
    let after = metric_value("dlq_emit_failures_total", &[("topic", "killed")]);
    assert_eq!(after - before, 5.0, "one emit failure per item");

    // The audit trail: an EmitFailed event per failed publish, naming the event.
    let audited: Vec<String> = emitter
        .sink()
        .events_from(1)
        .filter_map(|e| match e.unwrap().kind {
            EventKind::EmitFailed {
                failed_event_id,
                attempts,
                ..
            } => {
                assert_eq!(attempts, 2);
                Some(failed_event_id)
            }
            _ => None,
        })
        .collect();
    assert_eq!(audited, stored);
    assert_eq!(emitter.sink().backlog().unwrap().count, 10);

    server.restart();
    drained(&emitter).await;
    assert_stream_matches_log(emitter.sink(), &server).await;
    assert_eq!(metric_value("dlq_unpublished_events", &[]), 0.0);
    emitter.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_frozen_emit_is_bounded_and_reconciled_without_duplicates() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), one_retry()).await;
    connected(&emitter).await;
    emitter
        .dead_letter("frozen", item("job-3", "warm"))
        .await
        .unwrap();

    server.stop();
    for n in 0..3 {
        let started = Instant::now();
        let receipt = returns(emitter.dead_letter("frozen", item("job-3", &format!("f{n}"))))
            .await
            .unwrap();
        let took = started.elapsed();
        assert!(!receipt.published, "a frozen server cannot acknowledge");
        assert!(
            took >= PUBLISH_TIMEOUT,
            "emit did not wait for an ack: {took:?}"
        );
    }
    assert!(emitter.sink().item("job-3", "f2").unwrap().is_some());

    server.cont();
    drained(&emitter).await;
    // Publishes queued while frozen reach the server after SIGCONT; their re-publishes carry
    // the same Nats-Msg-Id and are dropped, so each event is in the stream once.
    assert_stream_matches_log(emitter.sink(), &server).await;
    emitter.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_succeeds_when_the_bus_returns_within_the_delay() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let policy = TopicPolicy {
        retry_attempts: 1,
        retry_delay: Duration::from_secs(5),
        ..TopicPolicy::default()
    };
    let emitter = emitter(dir.path(), &server.url(), policy).await;
    connected(&emitter).await;
    kill_bus(&mut server, &emitter).await;

    let before = metric_value("dlq_emit_failures_total", &[("topic", "comeback")]);
    let task = {
        let emitter = emitter.clone();
        tokio::spawn(async move { emitter.dead_letter("comeback", item("job-4", "x")).await })
    };
    // The first attempt fails at once (disconnected); the server is back before the retry.
    server.restart();
    let receipt = task.await.unwrap().unwrap();
    assert!(
        receipt.published,
        "the second attempt should have been acknowledged"
    );
    let after = metric_value("dlq_emit_failures_total", &[("topic", "comeback")]);
    assert_eq!(after, before, "no emit failure on a successful retry");
    let audits = emitter
        .sink()
        .events_from(1)
        .filter(|e| matches!(e.as_ref().unwrap().kind, EventKind::EmitFailed { .. }))
        .count();
    assert_eq!(audits, 0);
    assert_eq!(stream_ids(&server.url(), "DLQ").await, receipt.event_ids);
    emitter.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_sink_still_publishes_and_counts() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), one_retry()).await;
    connected(&emitter).await;

    let before = metric_value("dlq_sink_failures_total", &[]);
    emitter.sink().faults().set_fail_writes(true);
    let err = emitter
        .dead_letter("sinkfail", item("job-5", "s"))
        .await
        .unwrap_err();
    let EmitError::NotStored {
        event_ids,
        published,
        ..
    } = &err
    else {
        panic!("expected NotStored, got {err}");
    };
    assert!(
        published,
        "the bus was up: the event must still be published"
    );
    assert_eq!(metric_value("dlq_sink_failures_total", &[]) - before, 1.0);
    assert!(emitter.sink().item("job-5", "s").unwrap().is_none());
    let messages = stream_messages(&server.url(), "DLQ").await;
    assert_eq!(messages.len(), 1);
    assert_eq!(&messages[0].0, &event_ids[0]);
    assert_eq!(messages[0].1["item"]["item_id"], "s");

    // Once the disk recovers, emits are durable again.
    emitter.sink().faults().set_fail_writes(false);
    let receipt = emitter
        .dead_letter("sinkfail", item("job-5", "t"))
        .await
        .unwrap();
    assert!(receipt.published);
    emitter.shutdown().await.unwrap();
}

const STORE_TIMEOUT: Duration = Duration::from_millis(300);

async fn slow_disk_emitter(dir: &Path, url: &str) -> TestEmitter {
    let config = SinkConfig {
        store_timeout: STORE_TIMEOUT,
        ..SinkConfig::new(dir)
    };
    emitter_with(config, url, one_retry()).await
}

/// The stream's messages about item `item_id`: (event id, body).
async fn copies_of(server: &NatsServer, item_id: &str) -> Vec<(String, serde_json::Value)> {
    stream_messages(&server.url(), "DLQ")
        .await
        .into_iter()
        .filter(|(_, body)| body["item"]["item_id"] == item_id)
        .collect()
}

/// The writer took the event, then the disk stalled past the store timeout: the emit reports
/// `Unconfirmed` and publishes nothing; the writer stores the event late and the reconciler
/// publishes that one copy under its stored id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_timeout_after_the_writer_took_the_event_publishes_one_copy() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = slow_disk_emitter(dir.path(), &server.url()).await;
    connected(&emitter).await;

    emitter.sink().faults().set_stall(STORE_TIMEOUT * 5);
    let err = emitter
        .dead_letter("slowdisk", item("job-6", "late"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            EmitError::Unconfirmed {
                source: SinkError::Unconfirmed(_)
            }
        ),
        "expected Unconfirmed, got {err:?}"
    );
    assert!(!err.is_not_stored() && err.is_unconfirmed());
    emitter.sink().faults().set_stall(Duration::ZERO);

    wait_for(
        "the late write is stored",
        Duration::from_secs(20),
        || async { emitter.sink().item("job-6", "late").unwrap().is_some() },
    )
    .await;
    drained(&emitter).await;
    let copies = copies_of(&server, "late").await;
    let ids: Vec<&String> = copies.iter().map(|(id, _)| id).collect();
    let stored = emitter.sink().event(1).unwrap().unwrap();
    assert_eq!(
        ids,
        vec![&stored.event_id],
        "exactly the stored copy is in the stream"
    );
    assert_stream_matches_log(emitter.sink(), &server).await;
    emitter.shutdown().await.unwrap();
}

/// The writer never took the event before the store timeout ran out: the emit withdrew it, so
/// the writer drops it unread and the volatile copy published on the emit path is the only one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_timeout_before_the_writer_took_the_event_publishes_one_volatile_copy() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = slow_disk_emitter(dir.path(), &server.url()).await;
    connected(&emitter).await;

    emitter.sink().faults().set_paused(true);
    let err = emitter
        .dead_letter("slowdisk", item("job-7", "withdrawn"))
        .await
        .unwrap_err();
    let EmitError::NotStored {
        source: SinkError::Timeout(_),
        event_ids,
        published,
    } = &err
    else {
        panic!("expected NotStored after a Timeout, got {err:?}");
    };
    assert!(
        published,
        "the bus was up: the volatile copy must be published"
    );
    assert!(err.is_not_stored());
    emitter.sink().faults().set_paused(false);

    // Once a later emit is stored, the writer has gone past the withdrawn request.
    let receipt = emitter
        .dead_letter("slowdisk", item("job-7", "after"))
        .await
        .unwrap();
    assert!(receipt.published);
    assert!(emitter.sink().item("job-7", "withdrawn").unwrap().is_none());
    assert_eq!(logged_ids(emitter.sink()), receipt.event_ids);
    // Every logged event is acknowledged now, and the writer went past the withdrawn request
    // (it stored "after"), so it can no longer store it: a wrongly stored copy would be in the
    // log, and the reconciler would have published it before the backlog reached zero.
    drained(&emitter).await;
    assert_eq!(logged_ids(emitter.sink()), receipt.event_ids);
    let copies = copies_of(&server, "withdrawn").await;
    let ids: Vec<&String> = copies.iter().map(|(id, _)| id).collect();
    assert_eq!(ids, vec![&event_ids[0]], "exactly the volatile copy");
    assert_eq!(copies_of(&server, "after").await.len(), 1);
    emitter.shutdown().await.unwrap();
}

/// An emit's future is moved by every caller that awaits it (and into every task spawned
/// around it): its failure paths (the volatile publish, the audit, the retry wait, the stream's
/// setup) are boxed so that it stays a few KB. It was 9.4 KB before they were (issue 37).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emit_future_stays_small() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), one_retry()).await;
    let dead_letter = emitter.dead_letter("small", item("job-1", "a"));
    let store = emitter.store("small", item("job-1", "b"));
    let sizes = (size_of_val(&dead_letter), size_of_val(&store));
    drop((dead_letter, store));
    emitter.shutdown().await.unwrap();
    assert!(
        sizes.0 <= MAX_EMIT_FUTURE && sizes.1 <= MAX_EMIT_FUTURE,
        "{sizes:?}"
    );
}

/// What an emit's future may take, in bytes (`dead_letter`: 2.6 KB in a release build).
const MAX_EMIT_FUTURE: usize = 4096;

/// The handle schedulers share between workers is `Clone + Send + Sync + 'static`.
#[test]
fn the_emitter_handle_can_be_shared_across_tasks() {
    fn shareable<T: Clone + Send + Sync + 'static>() {}
    shareable::<TestEmitter>();
}
