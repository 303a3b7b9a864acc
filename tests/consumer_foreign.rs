//! Messages on the DLQ subject that are not dlq events — garbage bytes, JSON of a later
//! schema (an unknown kind), a payload larger than any event — published between real events
//! on a real nats-server: consumers (durable and from the start) apply every real event, count
//! each foreign message by reason in `dlq_consumer_foreign_messages_total`, and go on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use async_nats::jetstream;
use dlq::consumer::{
    read_from_start, run_durable, ConsumerStore, DurableConfig, FOREIGN, MAX_MESSAGE_BYTES,
};
use dlq::BusConfig;
use dlq_testkit::items::{dead_lettered_event, template_item};
use dlq_testkit::stream::{metric_value, metrics};
use dlq_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

const SUBJECT: &str = "sys.job.dlq";

/// Event `seq` of node `n1`, a new item each, as JSON.
fn event(seq: u64) -> Vec<u8> {
    let mut item = template_item();
    item.item_id = format!("item-{seq}");
    dead_lettered_event("n1", seq, "mapreduce", item)
        .to_json()
        .unwrap()
}

fn foreign(reason: &str) -> f64 {
    metric_value(FOREIGN, &[("reason", reason)])
}

async fn publish(js: &jetstream::Context, payloads: Vec<Vec<u8>>) {
    for payload in payloads {
        js.publish(SUBJECT, payload.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_messages_are_counted_and_skipped_between_real_events() {
    metrics();
    // A server that carries payloads larger than any event a dlq sink stores.
    let server = NatsServer::start_with_config("max_payload: 4MB\n");
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    js.create_stream(jetstream::stream::Config {
        name: "DLQ".into(),
        subjects: vec![SUBJECT.into()],
        ..Default::default()
    })
    .await
    .unwrap();

    // A real event of a size no sink stores, padded so that it would decode as an event.
    let mut oversized = event(99);
    oversized.splice(1..1, vec![b' '; MAX_MESSAGE_BYTES]);
    let future_schema = br#"{"schema":2,"event_id":"n1:50","node_id":"n1","seq":50,"timestamp":"2030-01-01T00:00:00Z","job_id":"job-0","topic":"mapreduce","kind":"item_archived","item_id":"item-1"}"#;
    publish(
        &js,
        vec![
            event(1),
            b"\x00\xff not json at all \xfe".to_vec(),
            event(2),
            future_schema.to_vec(),
            event(3),
            oversized,
            event(4),
        ],
    )
    .await;

    let bus = BusConfig {
        url: server.url(),
        ..BusConfig::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let store = ConsumerStore::open(dir.path()).unwrap();
    let config = DurableConfig {
        bus: bus.clone(),
        stream: "DLQ".into(),
        name: "foreign-reader".into(),
        from_start: false,
        follow: false,
        accept_gaps: Vec::new(),
    };
    let run = run_durable(&config, &store, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(run.messages, 7);
    assert_eq!(
        run.checkpoint, 7,
        "the checkpoint passes the foreign messages"
    );
    assert_eq!(run.fold.stats.applied, 4);
    assert_eq!(run.fold.projection.items.len(), 4);
    assert_eq!(run.fold.waiting(), 0);
    assert_eq!(foreign("not_json"), 1.0);
    assert_eq!(foreign("unknown_schema"), 1.0);
    assert_eq!(foreign("oversized"), 1.0);

    // It goes on: more garbage, then an event, read by the next run from its checkpoint.
    publish(&js, vec![b"{\"kind\":".to_vec(), event(5)]).await;
    let again = run_durable(&config, &store, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(again.messages, 2);
    assert_eq!(again.fold.stats.applied, 5);
    assert_eq!(foreign("not_json"), 2.0);

    // The same from the start, in memory.
    let read = read_from_start(&bus, "DLQ", None).await.unwrap();
    assert_eq!(read.messages, 9);
    assert_eq!(read.malformed, 4);
    assert_eq!(read.fold.stats.applied, 5);
    assert_eq!(read.fold.projection.items.len(), 5);
    assert_eq!(foreign("not_json"), 4.0);
    assert_eq!(foreign("unknown_schema"), 2.0);
    assert_eq!(foreign("oversized"), 2.0);
}
