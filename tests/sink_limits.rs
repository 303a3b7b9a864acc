//! Size limits that keep every stored byte inside the fsync'd log: sled 0.34 writes values over
//! a quarter segment to blob files it never fsyncs, so the sink uses 8 MiB segments and refuses
//! values over 1 MiB.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use chrono::Utc;
use dlq::domain::command::Command;
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use dlq::sink::{LocalSink, Sink, SinkConfig, SinkError};

fn big_item(id: &str, trace_bytes: usize) -> DeadLetteredItem {
    let failure = FailureDetail {
        attempt_number: 1,
        timestamp: Utc::now(),
        error_type: ErrorType::Unknown,
        error_message: "boom".into(),
        stack_trace: Some("x".repeat(trace_bytes)),
        agent_id: "a".into(),
        step_failed: "shell: false".into(),
        duration_ms: 1,
        json_log_location: None,
    };
    DeadLetteredItem::new("job", id, serde_json::Value::Null, vec![failure]).unwrap()
}

fn dead_letter(item: DeadLetteredItem) -> Command {
    Command::DeadLetter {
        topic: "t".into(),
        item: item.into(),
    }
}

#[tokio::test]
async fn large_events_stay_in_the_log_and_growing_history_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
    // 450 KiB: above sled's default blob threshold (128 KiB), below ours (2 MiB).
    sink.append(dead_letter(big_item("a", 450 * 1024)))
        .await
        .unwrap();
    sink.append(dead_letter(big_item("a", 450 * 1024)))
        .await
        .unwrap();
    let blobs = std::fs::read_dir(dir.path().join("blobs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(blobs, 0, "a value was written as an un-fsynced blob");
    let conf =
        String::from_utf8_lossy(&std::fs::read(dir.path().join("conf")).unwrap()).into_owned();
    assert!(conf.contains("segment_size: 8388608"), "{conf}");

    // A third 450 KiB failure would make the item ~1.35 MiB: refused, state unchanged.
    let err = sink
        .append(dead_letter(big_item("a", 450 * 1024)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, SinkError::Rejected(ref m) if m.contains("resolve, clear or purge")),
        "{err}"
    );
    assert_eq!(
        sink.item("job", "a").unwrap().unwrap().item.failure_count,
        2
    );
    assert_eq!(sink.events_from(1).count(), 2);
    sink.close().await.unwrap();
}

#[test]
fn max_event_bytes_above_the_value_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = SinkConfig {
        max_event_bytes: 4 << 20,
        ..SinkConfig::new(dir.path())
    };
    assert!(matches!(
        LocalSink::open(config),
        Err(SinkError::Rejected(_))
    ));
}

/// sled's database lost entirely (same node id), the segment log kept: opening rebuilds the
/// projection from the log and the sequence continues above it, so no id is handed out twice.
#[tokio::test]
async fn a_lost_database_is_rebuilt_from_the_log_and_never_reuses_event_ids() {
    let dir = tempfile::tempdir().unwrap();
    let config = || SinkConfig {
        node_id: Some("n1".into()),
        ..SinkConfig::new(dir.path())
    };
    let sink = LocalSink::open(config()).unwrap();
    for n in 0..10 {
        sink.append(dead_letter(big_item(&format!("i{n}"), 10)))
            .await
            .unwrap();
    }
    let before = sink.projection_snapshot().unwrap();
    let last_epoch = sink.event(10).unwrap().unwrap().epoch;
    sink.close().await.unwrap();
    drop(sink);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != dlq::sink::test_support::LOG_DIR {
            if path.is_dir() {
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                std::fs::remove_file(&path).unwrap();
            }
        }
    }
    let sink = LocalSink::open(config()).unwrap();
    assert_eq!(
        sink.projection_snapshot().unwrap(),
        before,
        "rebuilt from the log"
    );
    assert_eq!(
        sink.backlog().unwrap().count,
        10,
        "published again: duplicates, never loss"
    );
    let events = sink.append(dead_letter(big_item("new", 10))).await.unwrap();
    assert_eq!(
        events[0].seq, 11,
        "the log's sequence continues: no gap, no reuse"
    );
    let epoch = events[0].epoch.clone().unwrap();
    assert_eq!(events[0].event_id, format!("n1:{epoch}:11"));
    assert_eq!(
        (events[0].prev_epoch.clone(), events[0].prev_seq),
        (last_epoch, Some(10)),
        "the new epoch names what the log held"
    );
    sink.close().await.unwrap();
}

/// The log removed beside a database that has applied it: opening refuses, says what to do,
/// and changes nothing (the projection is not dropped to match an empty log).
#[tokio::test]
async fn a_removed_log_is_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let config = || SinkConfig {
        node_id: Some("n1".into()),
        ..SinkConfig::new(dir.path())
    };
    let sink = LocalSink::open(config()).unwrap();
    sink.append(dead_letter(big_item("a", 10))).await.unwrap();
    sink.close().await.unwrap();
    drop(sink);
    let log = dir.path().join(dlq::sink::test_support::LOG_DIR);
    std::fs::rename(&log, dir.path().join("log.aside")).unwrap();
    let err = LocalSink::open(config()).err().expect("refused");
    assert!(
        err.to_string().contains("Put back the log/ directory"),
        "{err}"
    );
    assert!(!log.exists(), "opening created log/");
    std::fs::rename(dir.path().join("log.aside"), &log).unwrap();
    let sink = LocalSink::open(config()).unwrap();
    assert_eq!(sink.job_len("job").unwrap(), 1, "the projection was kept");
    sink.close().await.unwrap();
}

#[tokio::test]
async fn an_edit_that_would_grow_the_item_past_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
    // Two 450 KiB failures (each event below max_event_bytes): a ~900 KiB item.
    for _ in 0..2 {
        sink.append(dead_letter(big_item("a", 450 * 1024)))
            .await
            .unwrap();
    }
    let edit = |bytes: usize| Command::Edit {
        job_id: "job".into(),
        item_id: "a".into(),
        patch: serde_json::json!({ "blob": "y".repeat(bytes) }),
        by: None,
    };
    // ~300 KiB more data would make the item ~1.1 MiB: refused, nothing written.
    let err = sink.append(edit(300 * 1024)).await.unwrap_err();
    assert!(
        matches!(err, SinkError::Rejected(ref m) if m.contains("item_edited")),
        "{err}"
    );
    assert_eq!(
        sink.item("job", "a").unwrap().unwrap().item.item_data,
        serde_json::Value::Null
    );
    assert_eq!(sink.events_from(1).count(), 2);
    // A small edit goes through.
    assert_eq!(sink.append(edit(10)).await.unwrap().len(), 1);
    sink.close().await.unwrap();
}
