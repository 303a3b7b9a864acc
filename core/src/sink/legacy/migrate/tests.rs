//! A data directory of sink format 2, built key by key, opened by this version.

use std::path::Path;

use super::{LOG_DIR, MIGRATING_DIR};
use crate::domain::command::Command;
use crate::sink::legacy::journal;
use crate::sink::legacy::journal_record::encode;
use crate::sink::projection::keys;
use crate::sink::{LocalSink, Sink, SinkConfig};

fn config(dir: &Path) -> SinkConfig {
    let mut config = SinkConfig::new(dir);
    config.node_id = Some("n1".into());
    config
}

fn dead_letter(id: &str) -> Command {
    let mut item = crate::testing::item("J", id);
    (item.job_id, item.item_id) = ("J".to_owned(), id.to_owned());
    Command::DeadLetter {
        topic: "t".into(),
        item: item.into(),
    }
}

/// Events written by this version: their exact bytes and the projection they make.
async fn source(n: usize) -> (Vec<Vec<u8>>, Vec<crate::sink::KeyValue>) {
    let dir = tempfile::tempdir().unwrap();
    let sink = LocalSink::open(config(dir.path())).unwrap();
    for k in 0..n {
        sink.append(dead_letter(&format!("i{}", k % 4)))
            .await
            .unwrap();
    }
    let payloads = (1..=n as u64)
        .map(|seq| sink.stored(seq).unwrap().unwrap().json.to_vec())
        .collect();
    let projection = sink.projection_snapshot().unwrap();
    sink.close().await.unwrap();
    (payloads, projection)
}

/// Format 2: events 1..n-1 as `l/` keys, the last one only in a journal record written after
/// the last checkpoint, the projection, `u/` markers for all but the first two, a floor.
fn write_format_2(dir: &Path, payloads: &[Vec<u8>], projection: &[crate::sink::KeyValue]) {
    let db = sled::Config::new()
        .path(dir)
        .segment_size(crate::sink::projection::sled_open::SEGMENT_SIZE)
        .flush_every_ms(None)
        .open()
        .unwrap();
    db.insert(keys::NODE_ID, "n1").unwrap();
    db.insert(
        keys::PROJECTION_FORMAT,
        &keys::CURRENT_PROJECTION_FORMAT.to_be_bytes(),
    )
    .unwrap();
    for (key, value) in projection {
        db.insert(key, value.as_slice()).unwrap();
    }
    let last = payloads.len() as u64;
    for (seq, payload) in (1..last).zip(payloads) {
        db.insert(keys::log(seq), payload.as_slice()).unwrap();
    }
    for seq in 3..=last {
        db.insert(keys::unpublished(seq), &0u64.to_be_bytes())
            .unwrap();
    }
    db.flush().unwrap();
    drop(db);
    let mut record = crate::sink::legacy::journal_record::MAGIC.to_vec();
    let writes = vec![(keys::log(last), Some(payloads[payloads.len() - 1].clone()))];
    encode(&writes, &mut record).unwrap();
    std::fs::create_dir_all(dir.join(journal::DIR)).unwrap();
    std::fs::write(dir.join(journal::DIR).join("0000000000000007.wal"), record).unwrap();
    std::fs::write(dir.join("seq.floor"), "500\n").unwrap();
}

#[tokio::test]
async fn a_format_2_directory_is_migrated_byte_for_byte() {
    let (payloads, projection) = source(9).await;
    let dir = tempfile::tempdir().unwrap();
    write_format_2(dir.path(), &payloads, &projection);
    // An earlier migration cut short left a partial copy: it is started again.
    std::fs::create_dir_all(dir.path().join(MIGRATING_DIR)).unwrap();
    std::fs::write(dir.path().join(MIGRATING_DIR).join("junk.seg.tmp"), b"x").unwrap();

    let sink = LocalSink::open(config(dir.path())).unwrap();
    for (seq, payload) in (1..).zip(&payloads) {
        let stored = sink.stored(seq).unwrap().unwrap();
        assert_eq!(stored.json.to_vec(), *payload, "event {seq}");
    }
    assert_eq!(sink.events_from(1).count(), payloads.len());
    assert_eq!(
        sink.backlog().unwrap().count,
        7,
        "the u/ markers stay unpublished"
    );
    assert_eq!(sink.projection_snapshot().unwrap(), projection);
    assert_eq!(
        sink.tree().scan_prefix(keys::LOG).count(),
        0,
        "the old log is gone"
    );
    assert!(!dir.path().join(journal::DIR).exists());
    assert!(!dir.path().join(MIGRATING_DIR).exists());
    assert!(dir.path().join(LOG_DIR).is_dir());
    let next = sink.append(dead_letter("new")).await.unwrap();
    assert!(next[0].seq >= 500, "the old floor holds: {}", next[0].seq);
    let unpublished: Vec<u64> = sink
        .unpublished(0, 100)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(unpublished, [3, 4, 5, 6, 7, 8, 9, next[0].seq]);
    sink.close().await.unwrap();
    drop(sink);

    // Opening again changes nothing.
    let sink = LocalSink::open(config(dir.path())).unwrap();
    assert_eq!(sink.events_from(1).count(), payloads.len() + 1);
    assert_eq!(sink.backlog().unwrap().count, 8);
    sink.close().await.unwrap();
}
