//! `dlq republish`: a stream that lost acknowledged events is repaired from the sink, with a
//! real nats-server and the real binary. The loss is made by deleting messages from the stream
//! (what a server that loses an acknowledged message leaves behind: a gap, and the message id
//! still inside the duplicate window).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Output;

use async_nats::jetstream;
use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::domain::event::Event;
use dlq_testkit::NatsServer;
use serde_json::Value;

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// Runs the binary with a config beside the data directory that keeps failures short.
fn dlq(data_dir: &Path, url: &str, args: &[&str]) -> Output {
    let config = data_dir.with_extension("yml");
    if !config.exists() {
        std::fs::write(
            &config,
            "topics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 500ms\n",
        )
        .unwrap();
    }
    dlq_testkit::cli::dlq_output(DLQ, data_dir, url, args)
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

async fn stream_messages(url: &str) -> u64 {
    let client = async_nats::connect(url).await.unwrap();
    let mut stream = jetstream::new(client).get_stream("DLQ").await.unwrap();
    stream.info().await.unwrap().state.messages
}

/// Deletes the messages at `seqs` and returns their events.
async fn delete_from_stream(url: &str, seqs: &[u64]) -> Vec<Event> {
    let client = async_nats::connect(url).await.unwrap();
    let stream = jetstream::new(client).get_stream("DLQ").await.unwrap();
    let mut events = Vec::new();
    for &seq in seqs {
        let message = stream.get_raw_message(seq).await.unwrap();
        events.push(Event::from_json(&message.payload).unwrap());
        assert!(stream.delete_message(seq).await.unwrap());
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_events_are_found_and_republished_once_and_verify_agrees_afterwards() {
    let server = NatsServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let demo = dlq(&data, &url, &["demo", "--count", "12", "--job-id", "job-r"]);
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let before = stream_messages(&url).await;
    assert_eq!(before, 12);

    // Nothing missing yet.
    let clean = dlq(&data, &url, &["republish", "--dry-run"]);
    assert_eq!(clean.status.code(), Some(0));
    assert_eq!(json(&clean)["missing"], 0);

    let lost = delete_from_stream(&url, &[3, 7]).await;
    let verify = dlq(&data, &url, &["verify"]);
    assert_eq!(verify.status.code(), Some(5), "verify must see the loss");

    // The original id is still inside the duplicate window: publishing the event as it was
    // is acknowledged as a duplicate and stores nothing. This is why the repair uses new ids.
    let bus = NatsBus::connect(BusConfig {
        url: url.clone(),
        ..BusConfig::default()
    })
    .await
    .unwrap();
    let again = bus.publish(&lost[0]).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(stream_messages(&url).await, before - 2);

    // --dry-run lists them and changes nothing.
    let dry = dlq(&data, &url, &["republish", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(5));
    let report = json(&dry);
    assert_eq!(report["missing"], 2);
    assert_eq!(report["republished"], 0);
    let ids: Vec<&str> = lost.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(report["events"], serde_json::json!(ids));
    assert_eq!(stream_messages(&url).await, before - 2);

    let repair = dlq(&data, &url, &["republish"]);
    assert_eq!(
        repair.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&repair.stderr)
    );
    assert_eq!(json(&repair)["republished"], 2);
    assert_eq!(stream_messages(&url).await, before);

    let verify = dlq(&data, &url, &["verify"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    // A second repair finds nothing: the repaired events count as held.
    let second = dlq(&data, &url, &["republish"]);
    assert_eq!(json(&second)["missing"], 0);
    assert_eq!(json(&second)["republished"], 0);
    assert_eq!(stream_messages(&url).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repaired_event_already_held_by_a_consumer_is_not_counted_twice() {
    let server = NatsServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    assert!(
        dlq(&data, &url, &["demo", "--count", "5", "--job-id", "job-d"])
            .status
            .success()
    );
    // A durable consumer applies everything first, then the stream loses an event.
    let store = dir.path().join("consumer");
    let store_arg = store.to_str().unwrap();
    let consume = || {
        let out = dlq(
            &data,
            &url,
            &["consume", "--durable", "c1", "--store", store_arg],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    consume();
    delete_from_stream(&url, &[2]).await;
    assert_eq!(json(&dlq(&data, &url, &["republish"]))["republished"], 1);
    // The consumer receives the repaired copy and drops it as a duplicate.
    consume();
    let verify = dlq(&data, &url, &["verify", "--consumer-store", store_arg]);
    assert_eq!(verify.status.code(), Some(0));
    let report = json(&verify);
    assert_eq!(report["events_applied"], 5);
    assert_eq!(report["duplicates_dropped"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_bus_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // An existing (empty) data directory: a missing one is refused before the bus is tried.
    std::fs::create_dir(&data).unwrap();
    let port = dlq_testkit::free_port(0);
    let url = format!("nats://127.0.0.1:{port}");
    let out = dlq(&data, &url, &["republish", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot connect"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_reader_offers_each_stored_message_once_and_counts_deleted_ones() {
    let server = NatsServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    assert!(
        dlq(&data, &url, &["demo", "--count", "10", "--job-id", "job-s"])
            .status
            .success()
    );
    // Deleted in the middle and at the end: the end one leaves last_seq pointing at nothing.
    delete_from_stream(&url, &[4, 10]).await;
    let mut seqs = Vec::new();
    let span = dlq::consumer::for_each_message(&BusConfig::at(&url), "DLQ", |message| {
        Event::from_json(message.payload).unwrap();
        assert!(message.msg_id.is_some_and(|id| !id.is_empty()));
        seqs.push(message.stream_seq);
    })
    .await
    .unwrap();
    assert_eq!(seqs, vec![1, 2, 3, 5, 6, 7, 8, 9]);
    assert_eq!((span.first_seq, span.last_seq), (1, 10));
    assert_eq!((span.absent, span.repeats), (2, 0));
    assert!(span.first_time.is_some());
}

/// A stream of more than two fetch batches (5,000 messages each) is read whole by the
/// consumer, in order: the batch asked for ahead of time is read, never dropped (a dropped one
/// would leave its messages to the slow read by sequence).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_reader_reads_every_batch_it_asks_for_ahead() {
    const MESSAGES: u64 = 12_001;
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    js.create_stream(jetstream::stream::Config {
        name: "DLQ".into(),
        subjects: vec!["reader.test".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    // In chunks: the client holds back a publish while too many acknowledgements are pending.
    let mut acks = Vec::new();
    for n in 0..MESSAGES {
        let ack = js.publish("reader.test", n.to_string().into()).await;
        acks.push(ack.unwrap());
        if acks.len() == 500 || n + 1 == MESSAGES {
            for ack in acks.drain(..) {
                ack.await.unwrap();
            }
        }
    }
    let mut seqs = Vec::new();
    let span = dlq::consumer::for_each_message(&BusConfig::at(server.url()), "DLQ", |message| {
        assert_eq!(
            message.payload,
            (message.stream_seq - 1).to_string().as_bytes()
        );
        seqs.push(message.stream_seq);
    })
    .await
    .unwrap();
    assert_eq!(seqs, (1..=MESSAGES).collect::<Vec<_>>());
    assert_eq!(
        (span.read_by_sequence, span.repeats, span.absent),
        (0, 0, 0),
        "every message came from the consumer's batches"
    );
}

/// A node `gone` emitted 6 items; the stream lost its second event; a durable consumer `gap`
/// ran once and is blocked behind the gap (4 events waiting, 1 item applied). Returns the
/// server, the work directory, the data directory and the consumer store.
async fn consumer_behind_a_gap() -> (NatsServer, tempfile::TempDir, PathBuf, String) {
    let server = NatsServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = dir.path().join("consumer").to_str().unwrap().to_owned();
    let demo = dlq(
        &data,
        &url,
        &[
            "--node-id",
            "gone",
            "demo",
            "--count",
            "6",
            "--job-id",
            "job-g",
        ],
    );
    assert!(demo.status.success());
    delete_from_stream(&url, &[2]).await;
    let consume = ["consume", "--durable", "gap", "--store", store.as_str()];
    let blocked = json(&dlq(&data, &url, &consume));
    assert_eq!(blocked["waiting_for_predecessor"], 4, "{blocked}");
    assert!(blocked["oldest_waiting"].is_string(), "{blocked}");
    assert_eq!(blocked["items"], 1, "{blocked}");
    (server, dir, data, store)
}

/// A durable consumer behind a lost message is blocked, and says so: the events after the gap
/// wait (reported, with the age of the oldest), the consumer does not pretend to be caught up
/// on them; once `dlq republish` repairs the stream, the next run applies them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_consumer_reports_what_waits_behind_a_gap_until_it_is_repaired() {
    let (server, _dir, data, store) = consumer_behind_a_gap().await;
    let url = server.url();
    let consume = ["consume", "--durable", "gap", "--store", store.as_str()];

    let repair = dlq(&data, &url, &["republish"]);
    assert_eq!(json(&repair)["republished"], 1);
    let repaired = json(&dlq(&data, &url, &consume));
    assert_eq!(repaired["waiting_for_predecessor"], 0, "{repaired}");
    assert!(repaired["oldest_waiting"].is_null(), "{repaired}");
    assert_eq!(repaired["items"], 6, "{repaired}");
}

/// When the lost event is gone for good (its node's data directory is lost too), an operator
/// accepts the gap: the waiting events apply, the gap is reported and kept in the store's audit
/// trail, and naming a node with nothing waiting is an error that changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_gap_releases_the_waiting_events_and_is_audited() {
    let (server, _dir, data, store) = consumer_behind_a_gap().await;
    let url = server.url();
    let consume = ["consume", "--durable", "gap", "--store", store.as_str()];

    let mut wrong = consume.to_vec();
    wrong.extend(["--accept-gap", "no-such-node"]);
    let refused = dlq(&data, &url, &wrong);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("nothing to accept"));

    let mut accept = consume.to_vec();
    accept.extend(["--accept-gap", "gone"]);
    let accepted = json(&dlq(&data, &url, &accept));
    assert_eq!(accepted["waiting_for_predecessor"], 0, "{accepted}");
    assert_eq!(accepted["items"], 5, "{accepted}");
    let gap = &accepted["gaps_accepted"][0];
    assert_eq!(
        (
            gap["node"].as_str(),
            gap["from"].as_u64(),
            gap["to"].as_u64()
        ),
        (Some("gone"), Some(2), Some(2))
    );
    assert_eq!(gap["released"], 4);

    let store = dlq::consumer::ConsumerStore::open(Path::new(&store)).unwrap();
    let audit = store.accepted_gaps().unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!((audit[0].from, audit[0].to), (2, 2));
}
