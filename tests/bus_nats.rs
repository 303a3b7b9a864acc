//! The NATS bus against a real server: the stream is created when missing and an existing one
//! kept as it is, and the core mode publishes with the same headers but without a stream.
//! Existing streams with operator limits, unfit streams and `dlq stream` are in
//! `stream_existing.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use chrono::Utc;
use dlq::bus::{Bus, BusConfig, BusMode, NatsBus};
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use dlq::emitter::{Emitter, EmitterBuilder};
use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_testkit::{wait_for, NatsServer};
use futures::StreamExt;

fn item(id: &str) -> DeadLetteredItem {
    let failure = FailureDetail {
        attempt_number: 1,
        timestamp: Utc::now(),
        error_type: ErrorType::Timeout,
        error_message: "agent timed out after 30s".into(),
        stack_trace: None,
        agent_id: "agent-1".into(),
        step_failed: "claude: /process".into(),
        duration_ms: 30_000,
        json_log_location: Some("/tmp/log.json".into()),
    };
    DeadLetteredItem::new("job-b", id, serde_json::json!({}), vec![failure]).unwrap()
}

async fn emitter(dir: &std::path::Path, config: BusConfig) -> Emitter<LocalSink, NatsBus> {
    let sink = LocalSink::open(SinkConfig::new(dir)).unwrap();
    let bus = NatsBus::connect(config).await.unwrap();
    EmitterBuilder::new(sink, bus).build()
}

async fn stream_config(url: &str) -> Option<async_nats::jetstream::stream::Config> {
    let js = async_nats::jetstream::new(async_nats::connect(url).await.unwrap());
    let mut stream = js.get_stream("DLQ").await.ok()?;
    Some(stream.info().await.ok()?.config.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_is_created_when_missing_and_an_existing_window_is_kept() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = BusConfig {
        url: server.url(),
        duplicate_window: Duration::from_secs(90),
        ..BusConfig::default()
    };
    // No emit at all: connecting creates the missing stream from the configuration.
    let first = emitter(dir.path(), config.clone()).await;
    let created = stream_config(&server.url()).await.unwrap();
    assert_eq!(created.subjects, vec!["sys.job.dlq", "sys.job.dlq.>"]);
    assert_eq!(
        created.storage,
        async_nats::jetstream::stream::StorageType::File
    );
    assert_eq!(created.duplicate_window, Duration::from_secs(90));
    first.shutdown().await.unwrap();

    // A node configured with another window connects and publishes: the stream keeps its own.
    let dir = tempfile::tempdir().unwrap();
    let other = BusConfig {
        duplicate_window: Duration::from_secs(300),
        ..config
    };
    let second = emitter(dir.path(), other).await;
    assert!(
        second
            .dead_letter("kept", item("k1"))
            .await
            .unwrap()
            .published
    );
    assert_eq!(stream_config(&server.url()).await.unwrap(), created);
    second.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_mode_publishes_with_headers_and_no_stream() {
    let server = NatsServer::start();
    let subscriber = async_nats::connect(server.url()).await.unwrap();
    let mut messages = subscriber.subscribe("sys.job.dlq").await.unwrap();
    subscriber.flush().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let config = BusConfig {
        url: server.url(),
        mode: BusMode::Core,
        ..BusConfig::default()
    };
    let emitter = emitter(dir.path(), config).await;
    wait_for("bus connected", Duration::from_secs(20), || async {
        emitter.bus().is_healthy()
    })
    .await;
    let receipt = emitter.dead_letter("core", item("c1")).await.unwrap();
    assert!(receipt.published);
    assert_eq!(emitter.sink().backlog().unwrap().count, 0);

    let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
        .await
        .unwrap()
        .unwrap();
    let headers = message.headers.unwrap();
    assert_eq!(
        headers.get("Nats-Msg-Id").unwrap().as_str(),
        receipt.event_ids[0]
    );
    assert_eq!(
        headers.get("Dlq-Event-Kind").unwrap().as_str(),
        "dead_lettered"
    );
    assert_eq!(headers.get("Dlq-Job-Id").unwrap().as_str(), "job-b");
    assert_eq!(
        headers.get("Dlq-Node-Id").unwrap().as_str(),
        emitter.sink().node_id()
    );
    let body: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
    assert_eq!(body["item"]["failure_history"][0]["error_type"], "Timeout");
    assert!(
        stream_config(&server.url()).await.is_none(),
        "core mode creates no stream"
    );
    emitter.shutdown().await.unwrap();
}
