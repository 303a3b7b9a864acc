//! The applier keeps the index runs it wrote decoded between its batches
//! (`index_runs::RunCache`). When the writer applies the projection itself (a rebuild, a
//! catch-up after sled refused a batch) those runs are stale: appends after it must still leave
//! every index run whole.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::{LocalSink, Sink, SinkConfig};
use crate::domain::command::Command;
use crate::sink::projection::index_runs;
use crate::testing::item;

fn dead_letter(n: usize) -> Command {
    Command::DeadLetter {
        topic: "t".into(),
        item: item("job", &format!("item-{n:04}")).into(),
    }
}

#[tokio::test]
async fn appends_after_a_rebuild_keep_the_index_runs_whole() {
    let dir = tempfile::tempdir().unwrap();
    let sink = LocalSink::open(SinkConfig::new(dir.path())).unwrap();
    // One at a time: the runs split as they grow (pieces of about 65), and the applier keeps
    // them. The rebuild applies all 300 in one batch: pieces of 100, other run keys.
    for n in 0..300 {
        sink.append(dead_letter(n)).await.unwrap();
    }
    sink.rebuild_projection().await.unwrap();
    for n in 300..350 {
        sink.append(dead_letter(n)).await.unwrap();
    }
    sink.close().await.unwrap();
    let problems = index_runs::violations(sink.tree());
    assert!(problems.is_empty(), "{problems:#?}");
}
