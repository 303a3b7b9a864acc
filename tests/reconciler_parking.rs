//! The reconciler against a real nats-server and a real sled sink: an event the server refuses
//! for good (over its `max_payload`) or a log entry that cannot be read is parked, listed by
//! `dlq status`, and every later event still reaches the stream; a stub or a loss marker stands in
//! its place so that consumers of its chain go on.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use dlq::bus::{Bus, NatsBus};
use dlq::domain::model::DeadLetteredItem;
use dlq::emitter::{Emitter, TopicPolicy};
use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_testkit::cli::Env;
use dlq_testkit::items::failed_once;
use dlq_testkit::stream::stream_ids;
use dlq_testkit::{wait_for, NatsServer};

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");
/// The server's `max_payload`: a normal event (about 1 KB) fits, a 32 KB one does not.
const MAX_PAYLOAD: usize = 16 * 1024;

type TestEmitter = Emitter<LocalSink, NatsBus>;

fn item(job: &str, id: &str, data_bytes: usize) -> DeadLetteredItem {
    let data = serde_json::json!({ "id": id, "blob": "x".repeat(data_bytes) });
    failed_once(
        (job, id),
        "shell: make",
        1,
        format!("step failed for {id}"),
        data,
    )
}

/// nats-server with a small `max_payload`, from a config file.
fn small_payload_server(dir: &Path) -> NatsServer {
    let conf = dir.join("small-payload.conf");
    std::fs::write(&conf, format!("max_payload: {MAX_PAYLOAD}\n")).unwrap();
    NatsServer::start_with_args(&["-c", conf.to_str().unwrap()])
}

async fn emitter(data: &Path, url: &str) -> TestEmitter {
    let policy = TopicPolicy {
        retry_attempts: 0,
        ..TopicPolicy::default()
    };
    dlq_testkit::node::emitter(
        SinkConfig::new(data),
        url,
        policy,
        Duration::from_millis(500),
    )
    .await
}

/// Waits until nothing is unpublished and `parked` events are parked.
async fn settled(emitter: &TestEmitter, parked: usize) {
    wait_for(
        "backlog drained around the parked events",
        Duration::from_secs(30),
        || async {
            emitter.sink().backlog().unwrap().count == 0
                && emitter.sink().parked().unwrap().len() == parked
        },
    )
    .await;
}

fn logged_ids(emitter: &TestEmitter) -> Vec<String> {
    emitter
        .sink()
        .events_from(1)
        .map(|e| e.unwrap().event_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_event_is_parked_and_later_events_reach_the_stream() {
    let env = Env::new(DLQ, "nats://127.0.0.1:1");
    let mut server = small_payload_server(env.work.path());
    let emitter = emitter(&env.data, &server.url()).await;
    wait_for("bus connected", Duration::from_secs(20), || async {
        emitter.bus().is_healthy()
    })
    .await;
    // Bus down: everything waits for the reconciler, the oversized event first.
    server.kill();
    wait_for("client notices", Duration::from_secs(20), || async {
        !emitter.bus().is_healthy()
    })
    .await;
    let big = emitter
        .dead_letter("park", item("job-1", "big", 2 * MAX_PAYLOAD))
        .await
        .unwrap();
    for n in 0..3 {
        let receipt = emitter
            .dead_letter("park", item("job-1", &format!("ok{n}"), 100))
            .await
            .unwrap();
        assert!(!receipt.published);
    }
    server.restart();
    settled(&emitter, 1).await;

    let parked = emitter.sink().parked().unwrap();
    assert_eq!(parked[0].event_id.as_ref(), Some(&big.event_ids[0]));
    assert!(
        parked[0].reason.contains("max payload"),
        "{}",
        parked[0].reason
    );
    // Everything else in the log (the normal items and the audit events) is in the stream once,
    // and the parked event's stub stands in its place.
    let streamed = stream_ids(&server.url(), "DLQ").await;
    let unique: HashSet<&String> = streamed.iter().collect();
    assert_eq!(unique.len(), streamed.len(), "duplicates: {streamed:?}");
    let expected: HashSet<String> = logged_ids(&emitter)
        .into_iter()
        .map(|id| {
            if id == big.event_ids[0] {
                format!("{id}~held")
            } else {
                id
            }
        })
        .collect();
    assert_eq!(unique, expected.iter().collect::<HashSet<_>>());
    emitter.shutdown().await.unwrap();
    drop(emitter);

    // `dlq status` lists it; `dlq reconcile --retry-parked` tries it again, and it is parked
    // again (the server still refuses it): exit 4.
    let env = Env {
        url: server.url(),
        ..env
    };
    let status = env.json(&["status"]);
    assert_eq!(status["unpublished"], 0);
    assert_eq!(status["parked"][0]["event_id"], big.event_ids[0].as_str());
    let out = env.run(&["reconcile", "--retry-parked", "--timeout", "20s"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["unparked"].as_u64(), report["parked"].as_u64()),
        (Some(1), Some(1))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_log_entry_is_parked_and_later_events_reach_the_stream() {
    let server = NatsServer::start();
    let env = Env::new(DLQ, &server.url());
    let sink = LocalSink::open(SinkConfig::new(&env.data)).unwrap();
    for n in 0..3 {
        let command = dlq::domain::command::Command::DeadLetter {
            topic: "park".into(),
            item: item("job-2", &format!("i{n}"), 10).into(),
        };
        sink.append(command).await.unwrap();
    }
    sink.close().await.unwrap();
    drop(sink);
    rewrite_log_entry(&env.data, 1, b"\xffnot json");
    let emitter = emitter(&env.data, &server.url()).await;
    settled(&emitter, 1).await;
    let parked = emitter.sink().parked().unwrap();
    assert_eq!((parked[0].seq, parked[0].event_id.clone()), (1, None));
    // A consumer counts the loss and applies what followed it.
    let consumed = env.json(&["consume"]);
    assert_eq!(consumed["waiting_for_predecessor"], 0, "{consumed}");
    assert_eq!(consumed["lost"], 1, "{consumed}");
    assert_eq!(consumed["items"], 2, "{consumed}");
    let stored = |seq| emitter.sink().event(seq).unwrap().unwrap().event_id;
    let mut streamed = stream_ids(&server.url(), "DLQ").await;
    streamed.sort();
    // A loss marker stands at position 1, so consumers of the chain go on.
    let marker = format!(
        "{}~lost",
        stored(2).trim_end_matches(":2").to_owned() + ":1"
    );
    assert_eq!(streamed, vec![marker, stored(2), stored(3)]);
    emitter.shutdown().await.unwrap();
}

/// Replaces the payload of the logged event `seq` with `payload`, in an intact frame (as a bug
/// or another program might have written it): the log opens, the event cannot be decoded.
fn rewrite_log_entry(data_dir: &std::path::Path, seq: u64, payload: &[u8]) {
    use dlq::sink::test_support::log::{frame, segment};
    let dir = data_dir.join(dlq::sink::test_support::LOG_DIR);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(segment::Kind::Segment(first)) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(segment::classify)
        else {
            continue;
        };
        let bytes = std::fs::read(&path).unwrap();
        let scan = segment::scan(&bytes, first).unwrap();
        if !scan.frames.iter().any(|(s, _)| *s == seq) {
            continue;
        }
        let mut out = segment::MAGIC.to_vec();
        for (s, range) in scan.frames {
            let body = if s == seq { payload } else { &bytes[range] };
            frame::encode(s, body, &mut out);
        }
        std::fs::write(&path, out).unwrap();
        return;
    }
    panic!("no log segment holds event {seq}");
}
