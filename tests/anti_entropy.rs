//! Anti-entropy against a real nats-server and a real sled sink: messages the stream
//! acknowledged and then lost (deleted through the JetStream API) come back, with their event
//! ids, exactly once each, counted by the metrics; a stream that lost nothing gets nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;
use dlq::bus::{Bus, BusConfig, NatsBus, HEADER_MSG_ID};
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::{AntiEntropyConfig, AntiEntropyStats, Emitter, EmitterBuilder};
use dlq::sink::{LocalSink, LogRetention, Sink, SinkConfig};
use dlq_testkit::items::template_item;
use dlq_testkit::stream::{metric_value, metrics, stream_len, stream_messages};
use dlq_testkit::{wait_for, NatsServer};

type TestEmitter = Emitter<LocalSink, NatsBus>;

/// Metrics are process-wide: the tests of this file run one at a time so that each sees only
/// its own emitter's counts.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const WAIT: Duration = Duration::from_secs(30);

async fn emitter(dir: &Path, url: &str, anti_entropy: Option<AntiEntropyConfig>) -> TestEmitter {
    emitter_on(SinkConfig::new(dir), url, anti_entropy).await
}

async fn emitter_on(
    config: SinkConfig,
    url: &str,
    anti_entropy: Option<AntiEntropyConfig>,
) -> TestEmitter {
    metrics();
    let sink = LocalSink::open(SinkConfig {
        node_id: Some("ae-node".into()),
        ..config
    })
    .unwrap();
    let bus = NatsBus::connect(BusConfig::at(url)).await.unwrap();
    EmitterBuilder::new(sink, bus)
        .reconciler(Some(ReconcilerConfig {
            interval: Duration::from_millis(200),
            ..ReconcilerConfig::default()
        }))
        .anti_entropy(anti_entropy)
        .build()
}

/// Passes every 100 ms; an event is checked until it has been seen held for `horizon`.
fn fast(horizon: Duration) -> Option<AntiEntropyConfig> {
    Some(AntiEntropyConfig {
        interval: Duration::from_millis(100),
        horizon,
        ..AntiEntropyConfig::default()
    })
}

/// Emits `n` dead-letters, each acknowledged by the stream on the emit path; their event ids.
async fn emit(emitter: &TestEmitter, n: usize) -> Vec<String> {
    wait_for("bus connected", WAIT, || async {
        emitter.bus().is_healthy()
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..n {
        let mut item = template_item();
        item.item_id = format!("item-{i}");
        let receipt = emitter.dead_letter("mapreduce", item).await.unwrap();
        assert!(receipt.published, "acknowledged on the emit path");
        ids.extend(receipt.event_ids);
    }
    ids
}

async fn stream(url: &str) -> jetstream::stream::Stream {
    let client = async_nats::connect(url).await.unwrap();
    jetstream::new(client).get_stream("DLQ").await.unwrap()
}

/// How often each event id occurs in the stream's payloads, and the message ids of those
/// carried under another `Nats-Msg-Id`.
async fn census(url: &str) -> (HashMap<String, usize>, Vec<String>) {
    let mut counts = HashMap::new();
    let mut repaired = Vec::new();
    for (msg_id, body) in stream_messages(url, "DLQ").await {
        let event_id = body["event_id"].as_str().unwrap().to_owned();
        if msg_id != event_id {
            repaired.push(msg_id);
        }
        *counts.entry(event_id).or_default() += 1;
    }
    (counts, repaired)
}

fn stats(emitter: &TestEmitter) -> AntiEntropyStats {
    emitter.anti_entropy_stats().expect("anti-entropy runs")
}

/// Waits until every acknowledged event has been checked past the horizon (nothing tracked).
async fn settled(emitter: &TestEmitter) {
    wait_for("every event checked past the horizon", WAIT, || async {
        stats(emitter).tracked == 0
    })
    .await;
}

#[tokio::test]
async fn deleted_messages_come_back_once_with_their_event_ids() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let before = metric_value("dlq_anti_entropy_republished_total", &[]);
    let emitter = emitter(dir.path(), &server.url(), fast(Duration::from_secs(2))).await;
    let ids = emit(&emitter, 10).await;
    assert_eq!(stream_len(&server.url(), "DLQ").await, 10);

    // The stream loses three acknowledged messages (each delete answered true). The stream's
    // length is not asserted here: the 100 ms passes may already be repairing them.
    let handle = stream(&server.url()).await;
    for seq in [2, 5, 9] {
        assert!(handle.delete_message(seq).await.unwrap());
    }

    wait_for("the three lost events re-published", WAIT, || async {
        stats(&emitter).republished == 3
    })
    .await;
    settled(&emitter).await;

    let (counts, repaired) = census(&server.url()).await;
    for id in &ids {
        assert_eq!(
            counts.get(id),
            Some(&1),
            "{id} once in the stream: {counts:?}"
        );
    }
    assert_eq!(counts.len(), 10, "nothing else: {counts:?}");
    let lost: Vec<&str> = [1, 4, 8].iter().map(|i| ids[*i].as_str()).collect();
    let mut came_back: Vec<&str> = repaired
        .iter()
        .map(|msg_id| msg_id.split('~').next().unwrap())
        .collect();
    came_back.sort();
    let mut expected = lost.clone();
    expected.sort();
    assert_eq!(
        came_back, expected,
        "exactly the lost ones, under repair ids"
    );
    let s = stats(&emitter);
    assert_eq!((s.missing, s.republished, s.duplicates), (3, 3, 0), "{s:?}");
    assert!(s.checked >= 10, "{s:?}");
    assert_eq!(
        metric_value("dlq_anti_entropy_republished_total", &[]) - before,
        3.0
    );
    emitter.shutdown().await.unwrap();
}

/// Log retention that deletes every done segment (one group per segment) must still keep the
/// events anti-entropy checks: an event the stream loses after its segment would have gone is
/// read back from the log and re-published.
#[tokio::test]
async fn the_log_keeps_what_anti_entropy_still_checks() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = SinkConfig {
        log_retention: LogRetention {
            max_age: Duration::ZERO,
            max_bytes: 0,
        },
        segment_bytes: 1,
        ..SinkConfig::new(dir.path())
    };
    let emitter = emitter_on(config, &server.url(), fast(Duration::from_secs(60))).await;
    let ids = emit(&emitter, 5).await;
    // Two passes after the last acknowledgement: the sink has been told what to keep.
    let passes = stats(&emitter).passes;
    wait_for("two more passes", WAIT, || async {
        stats(&emitter).passes >= passes + 2
    })
    .await;
    assert_eq!(emitter.sink().backlog().unwrap().count, 0, "all published");
    // The acknowledgements are still inside their horizon: the gauge shows how old the oldest
    // of them is (not zero, which would say nothing waits to be checked).
    let age = metric_value("dlq_anti_entropy_oldest_unchecked_age_seconds", &[]);
    assert!(age > 0.0 && age < 60.0, "oldest unchecked age {age}");
    emitter.sink().checkpoint().await.unwrap(); // retention runs here
    emitter.sink().checkpoint().await.unwrap();
    assert!(
        emitter.sink().event(1).unwrap().is_some(),
        "retention deleted the segment of an event anti-entropy still checks"
    );

    assert!(stream(&server.url()).await.delete_message(1).await.unwrap());
    wait_for("the lost event re-published", WAIT, || async {
        stats(&emitter).republished == 1
    })
    .await;
    let (counts, _) = census(&server.url()).await;
    assert_eq!(counts.get(&ids[0]), Some(&1), "{counts:?}");
    emitter.shutdown().await.unwrap();
}

/// The log keeps an acknowledged event from the moment it is acknowledged, not only once a
/// pass has run: here no pass runs (an hour apart) and retention deletes every done segment.
#[tokio::test]
async fn the_log_keeps_an_acknowledged_event_before_any_pass() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = SinkConfig {
        log_retention: LogRetention {
            max_age: Duration::ZERO,
            max_bytes: 0,
        },
        segment_bytes: 1,
        ..SinkConfig::new(dir.path())
    };
    let hourly = Some(AntiEntropyConfig {
        interval: Duration::from_secs(3600),
        ..AntiEntropyConfig::default()
    });
    let emitter = emitter_on(config, &server.url(), hourly).await;
    emit(&emitter, 5).await;
    assert_eq!(emitter.sink().backlog().unwrap().count, 0, "all published");
    emitter.sink().checkpoint().await.unwrap(); // retention runs here
    emitter.sink().checkpoint().await.unwrap();
    assert_eq!(stats(&emitter).passes, 0);
    for seq in 1..=5 {
        assert!(
            emitter.sink().event(seq).unwrap().is_some(),
            "retention deleted event {seq}, acknowledged and not yet checked"
        );
    }
    emitter.shutdown().await.unwrap();
}

/// An emitter that may not create consumers (like the least-privilege emitter of
/// deploy/nats-permissions.conf) reads the span one message per request: a lost event still
/// comes back.
#[tokio::test]
async fn without_consumer_permissions_a_pass_reads_message_by_message() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start_with_config(
        r#"
no_auth_user: admin
authorization {
  users: [
    { user: admin, password: "admin-pw" }
    { user: emitter, password: "emitter-pw", permissions: {
        publish: { allow: ["sys.job.dlq", "$JS.API.STREAM.INFO.DLQ", "$JS.API.STREAM.CREATE.DLQ",
                           "$JS.API.STREAM.MSG.GET.DLQ"] }
        subscribe: { allow: ["_INBOX.>"] } } }
  ]
}
"#,
    );
    let admin = server.url(); // no_auth_user: admin
    let emitting = format!("nats://emitter:emitter-pw@127.0.0.1:{}", server.port());
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &emitting, fast(Duration::from_secs(60))).await;
    let ids = emit(&emitter, 5).await;
    assert!(stream(&admin).await.delete_message(2).await.unwrap());
    wait_for("the lost event re-published", WAIT, || async {
        stats(&emitter).republished == 1
    })
    .await;
    let (counts, _) = census(&admin).await;
    assert_eq!(counts.get(&ids[1]), Some(&1), "{counts:?}");
    assert_eq!(counts.len(), 5, "{counts:?}");
    emitter.shutdown().await.unwrap();
}

#[tokio::test]
async fn inside_the_duplicate_window_a_plain_republish_is_dropped_and_the_repair_is_not() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Checked for a minute: the test deletes first, then lets anti-entropy see it.
    let emitter = emitter(dir.path(), &server.url(), fast(Duration::from_secs(60))).await;
    let ids = emit(&emitter, 3).await;
    let handle = stream(&server.url()).await;
    let lost = handle.get_raw_message(2).await.unwrap();
    assert_eq!(lost.headers.get(HEADER_MSG_ID).unwrap().as_str(), ids[1]);
    assert!(handle.delete_message(2).await.unwrap());

    // What the server does (nats-server 2.9): inside the window (2 min by default) the id of
    // the deleted message is remembered, and the same message under it is answered as a
    // duplicate and not stored.
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(HEADER_MSG_ID, ids[1].as_str());
    let ack = js
        .publish_with_headers("sys.job.dlq", headers, lost.payload.clone())
        .await
        .unwrap()
        .await
        .unwrap();
    // Not stored: the census below finds the event once, under the repair id. (The stream's
    // length is not asserted here: a 100 ms pass may already have repaired it.)
    assert!(ack.duplicate, "the window drops the original id");

    wait_for("the lost event re-published", WAIT, || async {
        stats(&emitter).republished == 1
    })
    .await;
    let (counts, repaired) = census(&server.url()).await;
    assert_eq!(counts.get(&ids[1]), Some(&1), "{counts:?}");
    assert_eq!(repaired.len(), 1);
    assert!(
        repaired[0].starts_with(&format!("{}~anti-entropy-", ids[1])),
        "{repaired:?}"
    );
    let s = stats(&emitter);
    assert_eq!((s.missing, s.republished, s.duplicates), (1, 1, 0), "{s:?}");
    emitter.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stream_that_lost_nothing_gets_nothing_again() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (checked, republished) = (
        metric_value("dlq_anti_entropy_checked_total", &[]),
        metric_value("dlq_anti_entropy_republished_total", &[]),
    );
    let emitter = emitter(dir.path(), &server.url(), fast(Duration::from_millis(500))).await;
    emit(&emitter, 8).await;
    settled(&emitter).await;
    let s = stats(&emitter);
    assert_eq!((s.missing, s.republished), (0, 0), "{s:?}");
    assert!(s.checked >= 8 && s.passes > 0, "{s:?}");
    assert_eq!(stream_len(&server.url(), "DLQ").await, 8);
    assert_eq!(
        metric_value("dlq_anti_entropy_checked_total", &[]) - checked,
        s.checked as f64
    );
    assert_eq!(
        metric_value("dlq_anti_entropy_republished_total", &[]) - republished,
        0.0
    );
    assert!(metric_value("dlq_anti_entropy_last_pass_timestamp_seconds", &[]) > 0.0);
    emitter.shutdown().await.unwrap();
}

#[tokio::test]
async fn events_published_by_the_reconciler_are_checked_too() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), fast(Duration::from_secs(60))).await;
    wait_for("bus connected", WAIT, || async {
        emitter.bus().is_healthy()
    })
    .await;
    // The bus is frozen while the item is stored: the emit path gives up, the reconciler
    // publishes it once the server is back.
    server.stop();
    let mut item = template_item();
    item.item_id = "late".into();
    let receipt = emitter.dead_letter("mapreduce", item).await.unwrap();
    assert!(!receipt.published);
    server.cont();
    // The item and the audit event of the failed publish (`emit_failed`).
    wait_for("the reconciler published both", WAIT, || async {
        emitter.sink().backlog().unwrap().count == 0 && stats(&emitter).tracked == 2
    })
    .await;
    let seq = stream_messages(&server.url(), "DLQ")
        .await
        .iter()
        .position(|(msg_id, _)| *msg_id == receipt.event_ids[0])
        .expect("the item is in the stream") as u64
        + 1;
    assert!(stream(&server.url())
        .await
        .delete_message(seq)
        .await
        .unwrap());
    wait_for("the lost event re-published", WAIT, || async {
        stats(&emitter).republished == 1
    })
    .await;
    let (counts, _) = census(&server.url()).await;
    assert_eq!(counts.get(&receipt.event_ids[0]), Some(&1), "{counts:?}");
    emitter.shutdown().await.unwrap();
}

/// A counter's value in a Prometheus text page (0 when absent).
fn scraped(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// The `dlq` binary's long-running emitter takes its anti-entropy settings from the config file
/// and the flags, runs it by default, and exports the counts on `/metrics`.
#[tokio::test]
async fn a_dlq_process_repairs_the_stream_and_exports_the_counts() {
    use std::io::BufRead;
    let _one = ONE_AT_A_TIME.lock().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    std::fs::write(data.with_extension("yml"), "anti_entropy:\n  horizon: 1m\n").unwrap();
    let port = dlq_testkit::free_port(server.port());
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = dlq_testkit::cli::dlq_command(
        env!("CARGO_BIN_EXE_dlq"),
        &data,
        &server.url(),
        &["--anti-entropy-interval", "200ms", "--metrics-addr", &addr],
    );
    cmd.args(["demo", "--loop", "--print-acked", "--job-id", "ae"])
        .args(["--drain-timeout", "0s"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = dlq_testkit::spawn_tied(cmd).unwrap();
    let stdout = child.stdout.take().unwrap();
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let acked = acked.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(id) = line.strip_prefix("ACK ") {
                    acked.lock().unwrap().push(id.to_owned());
                }
            }
        })
    };
    wait_for("20 events in the stream", WAIT, || async {
        stream_len(&server.url(), "DLQ").await >= 20
    })
    .await;
    let handle = stream(&server.url()).await;
    let mut lost = Vec::new();
    for seq in [3, 11] {
        let message = handle.get_raw_message(seq).await.unwrap();
        lost.push(
            message
                .headers
                .get(HEADER_MSG_ID)
                .unwrap()
                .as_str()
                .to_owned(),
        );
        assert!(handle.delete_message(seq).await.unwrap());
    }
    let metrics_page = || async move {
        dlq_testkit::http_get(port, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    wait_for("the process re-published both", WAIT, || async {
        scraped(&metrics_page().await, "dlq_anti_entropy_republished_total") >= 2.0
    })
    .await;
    let page = metrics_page().await;
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    assert_eq!(scraped(&page, "dlq_anti_entropy_republished_total"), 2.0);
    assert_eq!(scraped(&page, "dlq_anti_entropy_missing_total"), 2.0);
    assert!(
        scraped(&page, "dlq_anti_entropy_checked_total") >= 20.0,
        "{page}"
    );
    let (counts, repaired) = census(&server.url()).await;
    for id in &lost {
        assert_eq!(counts.get(id), Some(&1), "{id}");
        assert!(acked.lock().unwrap().contains(id), "{id} was acknowledged");
    }
    assert_eq!(repaired.len(), 2, "{repaired:?}");
}

/// The block files of the `DLQ` stream in a server's store, by name.
fn block_files(store: &Path) -> Vec<std::path::PathBuf> {
    let dir = store.join("jetstream/$G/streams/DLQ/msgs");
    let mut blocks: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "blk"))
        .collect();
    blocks.sort();
    blocks
}

/// What a crash before the fsync does: the server is SIGKILLed and its last block loses its
/// tail. The restarted stream hands the lost sequences to new messages, so reading a lost
/// event's sequence finds another message id: anti-entropy re-publishes exactly the lost ones.
#[tokio::test]
async fn a_server_that_lost_its_tail_gets_the_lost_events_back() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let emitter = emitter(dir.path(), &server.url(), fast(Duration::from_secs(60))).await;
    let mut ids = emit(&emitter, 10).await;

    server.kill();
    let last = block_files(server.store_dir()).pop().expect("a block file");
    let len = std::fs::metadata(&last).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    file.set_len(len * 6 / 10).unwrap();
    file.sync_all().unwrap();
    server.restart();
    let kept = stream_len(&server.url(), "DLQ").await;
    assert!(kept < 10, "the truncated block lost nothing ({kept} kept)");
    let lost = 10 - kept;

    // New events take the lost sequences.
    wait_for("bus reconnected", WAIT, || async {
        emitter.bus().is_healthy()
    })
    .await;
    for i in 10..13 {
        let mut item = template_item();
        item.item_id = format!("item-{i}");
        ids.extend(
            emitter
                .dead_letter("mapreduce", item)
                .await
                .unwrap()
                .event_ids,
        );
    }
    wait_for("the lost events re-published", WAIT, || async {
        stats(&emitter).republished == lost
    })
    .await;
    wait_for("everything in the stream", WAIT, || async {
        emitter.sink().backlog().unwrap().count == 0 && stream_len(&server.url(), "DLQ").await == 13
    })
    .await;
    let (counts, repaired) = census(&server.url()).await;
    for id in &ids {
        assert_eq!(counts.get(id), Some(&1), "{id} once: {counts:?}");
    }
    assert_eq!(repaired.len() as u64, lost, "{repaired:?}");
    let s = stats(&emitter);
    assert_eq!((s.missing, s.republished), (lost, lost), "{s:?}");
    emitter.shutdown().await.unwrap();
}
