//! The sink's journal on a real disk: replay of whole records, a torn tail, and the fallback to
//! flushing sled when the journal cannot be written. (Power cuts with a real SIGKILLed process
//! are in `crash_kill9.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use dlq::domain::command::Command;
use dlq::sink::test_support::JOURNAL_DIR as DIR;
use dlq::sink::{Sink, SinkConfig, SledSink};
use dlq_testkit::items::template_item;
use tempfile::TempDir;

fn open(dir: &Path) -> SledSink {
    let mut config = SinkConfig::new(dir);
    config.node_id = Some("n1".into());
    config.checkpoint_every = Duration::from_secs(3600);
    SledSink::open(config).unwrap()
}

fn dl(job: &str, id: &str) -> Command {
    let mut item = template_item();
    (item.job_id, item.item_id) = (job.to_owned(), id.to_owned());
    let (topic, item) = ("mapreduce".to_owned(), Box::new(item));
    Command::DeadLetter { topic, item }
}

fn files(dir: &Path, ends_with: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join(DIR))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().contains(ends_with))
        .collect();
    found.sort();
    found
}

/// Bytes of the journal's segments beyond their 8-byte headers.
fn record_bytes(dir: &Path) -> u64 {
    let segments = files(dir, ".wal");
    let wal = segments.iter().filter(|p| p.extension().unwrap() == "wal");
    wal.map(|p| std::fs::metadata(p).unwrap().len() - 8).sum()
}

fn log_ids(sink: &SledSink) -> Vec<String> {
    sink.events_from(1).map(|e| e.unwrap().event_id).collect()
}

/// Two databases of the same node: a journal record written by one is replayed by the other.
/// A second copy of the record, cut short, is the torn tail a crash mid-commit leaves: it is
/// discarded, the segment is kept aside as `*.damaged-*`, and the sink continues after it.
#[tokio::test]
async fn a_whole_record_is_replayed_and_a_torn_tail_is_discarded_and_kept_aside() {
    let (writer_dir, reader_dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let reader = open(reader_dir.path());
    reader.close().await.unwrap();
    drop(reader);

    let writer = open(writer_dir.path());
    let events = writer.append(dl("A", "x")).await.unwrap();
    let segment = files(writer_dir.path(), ".wal").pop().unwrap();
    let bytes = std::fs::read(&segment).unwrap();
    assert!(bytes.len() > 8, "the acknowledged group is in the journal");
    writer.close().await.unwrap();
    drop(writer);

    let record = &bytes[8..];
    let mut torn = bytes.clone();
    torn.extend_from_slice(&record[..record.len() / 2]);
    std::fs::write(
        reader_dir.path().join(DIR).join("0000000000000900.wal"),
        &torn,
    )
    .unwrap();

    let reader = open(reader_dir.path());
    assert_eq!(log_ids(&reader), [events[0].event_id.clone()]);
    assert!(reader.item("A", "x").unwrap().is_some());
    assert_eq!(reader.backlog().unwrap().count, 1);
    let live = reader.projection_snapshot().unwrap();
    reader.rebuild_projection().await.unwrap();
    assert_eq!(live, reader.projection_snapshot().unwrap());
    assert_eq!(files(reader_dir.path(), ".damaged-").len(), 1);
    assert_eq!(
        record_bytes(reader_dir.path()),
        0,
        "replayed, then checkpointed"
    );
    let next = reader.append(dl("A", "y")).await.unwrap();
    assert_eq!(
        next[0].seq, 2,
        "the sequence continues after the replayed event"
    );
    reader.close().await.unwrap();
}

/// While the journal cannot be written, every group is made durable by flushing sled instead:
/// appends still succeed and survive a reopen; once the journal works again, groups go there.
#[tokio::test]
async fn a_failing_journal_falls_back_to_flushing_sled() {
    let dir = TempDir::new().unwrap();
    let sink = open(dir.path());
    sink.faults().set_fail_journal(true);
    for id in ["a", "b", "c"] {
        sink.append(dl("J", id)).await.unwrap();
    }
    assert_eq!(record_bytes(dir.path()), 0, "nothing went to the journal");
    sink.faults().set_fail_journal(false);
    sink.append(dl("J", "d")).await.unwrap();
    assert!(
        record_bytes(dir.path()) > 0,
        "the journal takes groups again"
    );
    sink.close().await.unwrap();
    drop(sink);

    let sink = open(dir.path());
    let seqs: Vec<u64> = sink.events_from(1).map(|e| e.unwrap().seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(sink.job_len("J").unwrap(), 4);
    sink.close().await.unwrap();
}
