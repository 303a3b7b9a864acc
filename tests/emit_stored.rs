//! The durable-only promise (`Emitter::store`) against a real nats-server and a real sled sink:
//! it returns once the event is durable whatever the bus does, the background publish or the
//! reconciler puts it on the stream exactly once, shutdown waits for the background work and
//! loses nothing, and a job run with the bus down finishes without waiting for it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use dlq::bus::NatsBus;
use dlq::domain::event::EventKind;
use dlq::domain::model::DeadLetteredItem;
use dlq::emitter::{Emitter, PublishOutcome, TopicPolicy};
use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_ops::runner::{self, ProgressMode, RunOptions};
use dlq_testkit::items::failed_once;
use dlq_testkit::node::{
    self, assert_stream_matches_log, connected, drained, kill_bus, logged_ids,
};
use dlq_testkit::stream::{metric_value, stream_ids};
use dlq_testkit::NatsServer;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PUBLISH_TIMEOUT: Duration = Duration::from_millis(500);
/// Far longer than any test may run: only an emit that waited for its publish retries hits
/// [`BLOCKING`].
const LONG_DELAY: Duration = Duration::from_secs(600);
/// What a durable-only call may take here at most; a blocking one would take 5 × 10 min.
const BLOCKING: Duration = Duration::from_secs(60);

type TestEmitter = Emitter<LocalSink, NatsBus>;

/// Metric values are process-wide: the tests of this file run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn item(job: &str, id: &str) -> DeadLetteredItem {
    let message = format!("exit status 1 in /tmp/{id}");
    failed_once((job, id), "shell: false", 1, message, json!({ "id": id }))
}

/// Five retries ten minutes apart: waiting for them would take 50 minutes.
fn patient() -> TopicPolicy {
    TopicPolicy {
        retry_attempts: 5,
        retry_delay: LONG_DELAY,
        ..TopicPolicy::default()
    }
}

async fn emitter(dir: &Path, url: &str, policy: TopicPolicy) -> TestEmitter {
    node::emitter(SinkConfig::new(dir), url, policy, PUBLISH_TIMEOUT).await
}

/// The event ids the sink still has to publish.
fn unpublished_ids(sink: &LocalSink) -> HashSet<String> {
    sink.unpublished(0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.event_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_up_store_returns_and_the_background_publish_lands_once() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), patient()).await;
    connected(&emitter).await;

    let receipt = emitter
        .store("stored-up", item("job-1", "a"))
        .await
        .unwrap();
    assert!(
        emitter.sink().item("job-1", "a").unwrap().is_some(),
        "durable on return"
    );
    let ids = receipt.event_ids.clone();
    assert_eq!(ids.len(), 1);
    assert!(
        receipt.published().await,
        "the background publish was acknowledged"
    );
    assert_eq!(emitter.sink().backlog().unwrap().count, 0);
    assert_eq!(
        stream_ids(&server.url(), "DLQ").await,
        ids,
        "in the stream once"
    );
    emitter.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bus_down_store_returns_at_once_and_the_reconciler_publishes_once() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), patient()).await;
    connected(&emitter).await;
    kill_bus(&mut server, &emitter).await;

    let deferred = [("topic", "stored-down"), ("reason", "bus_down")];
    let (deferred_before, failed_before) = (
        metric_value("dlq_emit_deferred_total", &deferred),
        metric_value("dlq_emit_failures_total", &[("topic", "stored-down")]),
    );
    let mut receipts = Vec::new();
    for n in 0..3 {
        let store = emitter.store("stored-down", item("job-2", &format!("d{n}")));
        let receipt = tokio::time::timeout(BLOCKING, store)
            .await
            .expect("store waited for the bus")
            .unwrap();
        assert!(emitter
            .sink()
            .item("job-2", &format!("d{n}"))
            .unwrap()
            .is_some());
        receipts.push(receipt);
    }
    let mut stored = HashSet::new();
    for receipt in receipts {
        stored.extend(receipt.event_ids.clone());
        assert_eq!(receipt.outcome().await, PublishOutcome::LeftToReconciler);
    }
    assert_eq!(
        unpublished_ids(emitter.sink()),
        stored,
        "all durable, none published"
    );
    // Counted once each, as deferred, never as failed publishes; no audit events either.
    assert_eq!(
        metric_value("dlq_emit_deferred_total", &deferred) - deferred_before,
        3.0
    );
    assert_eq!(
        metric_value("dlq_emit_failures_total", &[("topic", "stored-down")]) - failed_before,
        0.0
    );
    assert_eq!(logged_ids(emitter.sink()).len(), 3, "no EmitFailed events");

    server.restart();
    drained(&emitter).await;
    assert_stream_matches_log(emitter.sink(), &server).await;
    emitter.shutdown().await.unwrap();
}

/// Background publishes waiting out a ten-minute retry delay (the server frozen, so the client
/// still thinks it is connected) do not hold shutdown up, and nothing they did not publish is
/// lost: a new process's reconciler publishes every event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_background_publishes_pending_loses_nothing() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), patient()).await;
    connected(&emitter).await;
    server.stop();

    let mut stored = HashSet::new();
    let mut receipts = Vec::new();
    for n in 0..4 {
        let store = emitter.store("stored-shutdown", item("job-3", &format!("s{n}")));
        let receipt = tokio::time::timeout(BLOCKING, store)
            .await
            .unwrap()
            .unwrap();
        stored.extend(receipt.event_ids.clone());
        receipts.push(receipt);
    }
    // Let the first attempts time out, so the tasks sit in their retry delays.
    tokio::time::sleep(PUBLISH_TIMEOUT * 2).await;
    tokio::time::timeout(BLOCKING, emitter.shutdown())
        .await
        .expect("shutdown waited for the retry delays")
        .unwrap();
    for receipt in receipts {
        assert_ne!(receipt.outcome().await, PublishOutcome::Published);
    }
    drop(emitter);

    // The sink is closed and free: nothing still holds it.
    let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
    // Each task's final failure was audited before the sink closed, naming its event.
    let audited: HashSet<String> = sink
        .events_from(1)
        .filter_map(|e| match e.unwrap().kind {
            EventKind::EmitFailed {
                failed_event_id, ..
            } => Some(failed_event_id),
            _ => None,
        })
        .collect();
    assert_eq!(audited, stored, "one EmitFailed per unacknowledged event");
    let unpublished = unpublished_ids(&sink);
    assert!(
        stored.is_subset(&unpublished),
        "every unacknowledged dead-letter is in the backlog: {stored:?} vs {unpublished:?}"
    );
    drop(sink);

    server.restart();
    let emitter = self::emitter(dir.path(), &server.url(), patient()).await;
    drained(&emitter).await;
    assert_stream_matches_log(emitter.sink(), &server).await;
    emitter.shutdown().await.unwrap();
}

/// A job whose agents all fail, run while the bus is down under a policy that would hold each
/// dead-letter 50 minutes: the job finishes at once, its items are in the sink and unpublished,
/// and they reach the stream (once each) when the bus is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_run_with_the_bus_down_finishes_and_publishes_later() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let mut server = NatsServer::start();
    let work = tempfile::tempdir().unwrap();
    let items: Vec<_> = (0..6).map(|i| json!({ "id": format!("r{i}") })).collect();
    std::fs::write(work.path().join("items.json"), json!(items).to_string()).unwrap();
    let workflow = work.path().join("flow.yml");
    std::fs::write(
        &workflow,
        "name: busdown\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template:\n    - shell: \"echo boom >&2; exit 1\"\n",
    )
    .unwrap();
    let data = work.path().join("data");
    let emitter = emitter(&data, &server.url(), patient()).await;
    connected(&emitter).await;
    kill_bus(&mut server, &emitter).await;

    let run = runner::start(
        emitter.clone(),
        &workflow,
        Some("busdown-job".into()),
        RunOptions::new(&data),
        CancellationToken::new(),
        ProgressMode::Quiet,
    );
    let report = tokio::time::timeout(BLOCKING, run)
        .await
        .expect("the job waited for the bus")
        .unwrap();
    assert!(report.complete());
    assert_eq!((report.summary.failed, report.summary.pending), (6, 0));
    let dead_letters: HashSet<String> = emitter
        .sink()
        .events_from(1)
        .map(|e| e.unwrap())
        .filter(|e| matches!(e.kind, EventKind::DeadLettered { .. }))
        .map(|e| e.event_id)
        .collect();
    assert_eq!(dead_letters.len(), 6);
    for i in 0..6 {
        let id = format!("r{i}");
        assert!(emitter.sink().item("busdown-job", &id).unwrap().is_some());
    }
    assert!(
        dead_letters.is_subset(&unpublished_ids(emitter.sink())),
        "nothing was published while the bus was down"
    );

    server.restart();
    drained(&emitter).await;
    assert_stream_matches_log(emitter.sink(), &server).await;
    emitter.shutdown().await.unwrap();
}
