//! sled writes its snapshot only while opening, so the first open after a process that wrote
//! replays all it wrote. `refresh_snapshot` (and `dlq generate`, which calls it at its end)
//! leaves a current snapshot: the next open has nothing to replay and keeps the snapshot as it
//! found it. Real sled on disk, the real `dlq` binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command as Process;

use dlq::domain::command::Command;
use dlq::sink::{refresh_snapshot, Sink, SinkConfig, SledSink};
use dlq_testkit::items::template_item;

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// The names of sled's snapshot files (`snap.<stable log offset>`), sorted.
fn snapshots(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("snap."))
        .collect();
    names.sort();
    names
}

fn config(dir: &Path) -> SinkConfig {
    let mut config = SinkConfig::new(dir);
    config.node_id = Some("n1".into());
    config
}

/// What the next command does first: open the sink (sled writes its snapshot here), close it.
async fn next_open(config: SinkConfig) {
    SledSink::open(config).unwrap().close().await.unwrap();
}

async fn write_items(dir: &Path, n: usize) {
    let sink = SledSink::open(config(dir)).unwrap();
    for i in 0..n {
        let mut item = template_item();
        (item.job_id, item.item_id) = ("J".to_owned(), format!("item-{i}"));
        let command = Command::DeadLetter {
            topic: "t".into(),
            item: Box::new(item),
        };
        sink.append(command).await.unwrap();
    }
    sink.close().await.unwrap();
}

#[tokio::test]
async fn after_a_refresh_the_next_open_has_nothing_to_replay() {
    let dir = tempfile::tempdir().unwrap();
    write_items(dir.path(), 300).await;
    refresh_snapshot(&config(dir.path())).unwrap();
    let refreshed = snapshots(dir.path());
    next_open(config(dir.path())).await;
    assert_eq!(
        snapshots(dir.path()),
        refreshed,
        "the open after the refresh advanced sled's snapshot: it had to replay the writes"
    );
}

#[tokio::test]
async fn without_a_refresh_the_next_open_replays_the_writes() {
    // The check above can fail: an open after writing advances the snapshot.
    let dir = tempfile::tempdir().unwrap();
    write_items(dir.path(), 300).await;
    let before = snapshots(dir.path());
    next_open(config(dir.path())).await;
    assert_ne!(snapshots(dir.path()), before);
}

#[test]
fn a_directory_without_a_database_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");
    refresh_snapshot(&config(&missing)).unwrap();
    assert!(!missing.exists(), "the refresh created a data directory");
}

#[tokio::test]
async fn dlq_generate_leaves_a_current_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = Process::new(DLQ)
        .args(["--data-dir"])
        .arg(&data)
        .args([
            "--nats-url",
            "nats://127.0.0.1:1",
            "generate",
            "--items",
            "2000",
            "--jobs",
            "4",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "dlq generate failed: {out:?}");
    let generated = snapshots(&data);
    next_open(SinkConfig::new(&data)).await;
    assert_eq!(
        snapshots(&data),
        generated,
        "the first open after `dlq generate` had to replay what it wrote"
    );
}
