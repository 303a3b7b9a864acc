//! The writer decides a new item without reading sled once it knows the tree's item keys
//! (`projection::known_items`). An item it did not stage itself, one stored before this open,
//! must still be found: dead-lettered again, it grows, it is not created a second time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::projection::known_items::SCAN_AFTER_EVENTS;
use super::{LocalSink, Sink, SinkConfig};
use crate::domain::command::Command;
use crate::testing::item;

fn dead_letter(job: &str, id: &str) -> Command {
    Command::DeadLetter {
        topic: "t".into(),
        item: item(job, id).into(),
    }
}

/// A sink whose appends may wait long: the tests beside these (a 100,000-key sled tree built
/// and scanned in a debug build) can hold an append past the default store timeout.
fn config(dir: &std::path::Path) -> SinkConfig {
    let mut config = SinkConfig::new(dir);
    config.store_timeout = std::time::Duration::from_secs(120);
    config
}

/// Appends new items until the writer merged a scan of the tree's item keys.
async fn until_scanned(sink: &LocalSink) {
    let before = sink.item_scans();
    for n in 0..SCAN_AFTER_EVENTS * 20 {
        if sink.item_scans() > before {
            return;
        }
        sink.append(dead_letter("filler", &format!("f-{n}")))
            .await
            .unwrap();
    }
    panic!(
        "no scan of the item keys after {} appends",
        SCAN_AFTER_EVENTS * 20
    );
}

#[tokio::test]
async fn an_item_stored_before_the_open_is_found_after_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let sink = LocalSink::open(config(dir.path())).unwrap();
    sink.append(dead_letter("job", "old")).await.unwrap();
    let created = sink.item("job", "old").unwrap().unwrap().created_seq;
    sink.close().await.unwrap();
    drop(sink);

    let sink = LocalSink::open(config(dir.path())).unwrap();
    until_scanned(&sink).await;
    sink.append(dead_letter("job", "old")).await.unwrap();
    sink.append(dead_letter("job", "new")).await.unwrap();
    let old = sink.item("job", "old").unwrap().unwrap();
    assert_eq!((old.version, old.created_seq), (2, created), "{old:?}");
    assert_eq!(sink.item("job", "new").unwrap().unwrap().version, 1);
    assert_eq!(sink.job_len("job").unwrap(), 2, "each item counted once");
    sink.close().await.unwrap();
}

#[tokio::test]
async fn an_item_staged_after_the_scan_is_found_once_applied() {
    let dir = tempfile::tempdir().unwrap();
    let sink = LocalSink::open(config(dir.path())).unwrap();
    until_scanned(&sink).await;
    sink.append(dead_letter("job", "after")).await.unwrap();
    // A query waits for the applier: the item is in the tree, no longer in an unapplied group.
    assert_eq!(sink.item("job", "after").unwrap().unwrap().version, 1);
    sink.append(dead_letter("job", "after")).await.unwrap();
    assert_eq!(sink.item("job", "after").unwrap().unwrap().version, 2);
    assert_eq!(sink.job_len("job").unwrap(), 1);
    sink.close().await.unwrap();
}
