//! Items in sled point at their events in the log (projection formats 3 and 4): before retention
//! deletes a segment, the live items created in it are kept whole; items kept whole by an older
//! dlq (projection format 2) stay readable and keep growing; a rebuild keeps them, and refuses
//! when it would lose an item; format 3's signature index is deleted when it is taken over. Real sled
//! and the real log on disk.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use dlq::domain::command::Command;
use dlq::domain::event::RemovalReason;
use dlq::sink::{LocalSink, LogRetention, Sink, SinkConfig, SinkError};
use dlq_testkit::items::template_item;

const KEEP_NOTHING: LogRetention = LogRetention {
    max_age: Duration::ZERO,
    max_bytes: 0,
};

fn open(dir: &Path, retention: LogRetention) -> LocalSink {
    let mut config = SinkConfig::new(dir);
    config.node_id = Some("n1".into());
    config.segment_bytes = 4096; // a new segment every few events
    config.checkpoint_every = Duration::from_secs(3600);
    config.log_retention = retention;
    LocalSink::open(config).unwrap()
}

fn dead_letter(id: &str, attempt: &str) -> Command {
    let mut item = template_item();
    (item.job_id, item.item_id) = ("J".to_owned(), id.to_owned());
    item.failure_history[0].error_message = format!("failure {attempt} of {id}");
    Command::DeadLetter {
        topic: "t".into(),
        item: item.into(),
    }
}

fn resolve(id: &str) -> Command {
    Command::Remove {
        job_id: "J".into(),
        item_id: id.into(),
        reason: RemovalReason::Resolved,
        by: None,
    }
}

/// Appends `command` and marks its events published; returns their sequences.
async fn append_published(sink: &LocalSink, command: Command) -> Vec<u64> {
    let mut seqs = Vec::new();
    for event in sink.append(command).await.unwrap() {
        sink.mark_published(event.seq).unwrap();
        seqs.push(event.seq);
    }
    seqs
}

fn segment_firsts(dir: &Path) -> Vec<u64> {
    let log = dir.join(dlq::sink::test_support::LOG_DIR);
    let mut firsts: Vec<u64> = std::fs::read_dir(log)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".seg")?.parse().ok()
        })
        .collect();
    firsts.sort();
    firsts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_segments_once_the_live_items_created_in_them_are_kept_whole() {
    let dir = tempfile::tempdir().unwrap();
    let sink = open(dir.path(), KEEP_NOTHING);
    let resolved = |n: usize| format!("i{n}");
    for n in 0..8 {
        append_published(&sink, dead_letter(&resolved(n), "1")).await;
        append_published(&sink, resolve(&resolved(n))).await;
    }
    let first = append_published(&sink, dead_letter("keeper", "1")).await[0];
    for n in 8..16 {
        append_published(&sink, dead_letter(&resolved(n), "1")).await;
        append_published(&sink, resolve(&resolved(n))).await;
    }
    // Its second failure lands in a later segment: the item is the fold of both.
    append_published(&sink, dead_letter("keeper", "2")).await;
    let keeper = sink.item("J", "keeper").unwrap().unwrap();
    assert_eq!(keeper.item.failure_history.len(), 2);
    sink.close().await.unwrap(); // checkpoints: deletes what retention allows
    drop(sink);

    let after = segment_firsts(dir.path());
    assert!(
        after.first().is_some_and(|&f| f > first),
        "a live item does not pin the segment it was created in (seq {first}): {after:?}"
    );
    let sink = open(dir.path(), KEEP_NOTHING);
    assert_eq!(sink.item("J", "keeper").unwrap().as_ref(), Some(&keeper));
    // A rebuild keeps the item kept whole (its first event is gone from the log).
    let before = sink.projection_snapshot().unwrap();
    sink.rebuild_projection().await.unwrap();
    assert_eq!(sink.projection_snapshot().unwrap(), before);
    // A later failure of the item kept whole grows it, through a restart too.
    append_published(&sink, dead_letter("keeper", "3")).await;
    let grown = sink.item("J", "keeper").unwrap().unwrap();
    assert_eq!(grown.item.failure_history.len(), 3);
    assert_eq!(grown.created_seq, keeper.created_seq);
    sink.close().await.unwrap();
    drop(sink);
    let sink = open(dir.path(), KEEP_NOTHING);
    assert_eq!(sink.item("J", "keeper").unwrap().as_ref(), Some(&grown));
    append_published(&sink, resolve("keeper")).await;
    assert_eq!(sink.item("J", "keeper").unwrap(), None);
    sink.close().await.unwrap();
}

/// With the default retention nothing is deleted yet, and items stay pointers: the same
/// workload reads the same, and a rebuild from the log gives the same projection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_point_into_the_log_while_retention_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let sink = open(dir.path(), LogRetention::default());
    append_published(&sink, dead_letter("keeper", "1")).await;
    for n in 0..8 {
        append_published(&sink, dead_letter(&format!("i{n}"), "1")).await;
    }
    append_published(&sink, dead_letter("keeper", "2")).await;
    let before = segment_firsts(dir.path());
    sink.close().await.unwrap();
    drop(sink);
    assert_eq!(segment_firsts(dir.path()), before);
    let sink = open(dir.path(), LogRetention::default());
    let live = sink.projection_snapshot().unwrap();
    sink.rebuild_projection().await.unwrap();
    assert_eq!(live, sink.projection_snapshot().unwrap());
    let keeper = sink.item("J", "keeper").unwrap().unwrap();
    assert_eq!(keeper.item.failure_history.len(), 2);
    sink.close().await.unwrap();
}

/// A rebuild interrupted after it copied the items kept whole and began clearing the
/// projection (what a crash leaves: the mark `m/rebuild_kept_through`, the copy under `k`, no
/// format key, items and counters half gone) is finished by the next open from its copy: the
/// projection equals the one before, a later failure of a kept item counted once, and neither
/// the copy nor the mark stays. Red when the open takes the kept items from the projection
/// instead (the mark ignored): the cleared items are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_rebuild_is_finished_from_its_copy_of_the_kept_items() {
    let dir = tempfile::tempdir().unwrap();
    let sink = open(dir.path(), KEEP_NOTHING);
    for n in 0..8 {
        append_published(&sink, dead_letter(&format!("i{n}"), "1")).await;
    }
    sink.close().await.unwrap(); // deletes the done segments, keeping their items whole
    drop(sink);
    let sink = open(dir.path(), KEEP_NOTHING);
    append_published(&sink, dead_letter("i0", "2")).await;
    let before = items_and_counts(&sink);
    assert_eq!(before.0.len(), 8);
    sink.close().await.unwrap();
    drop(sink);
    assert!(segment_firsts(dir.path())[0] > 1, "segments deleted");
    {
        let db = dlq_testkit::sled_db::open(dir.path());
        let applied = db.get(b"m/applied_through").unwrap().unwrap();
        let items: Vec<_> = db.scan_prefix(b"i").map(|e| e.unwrap()).collect();
        assert!(items.iter().any(|(_, v)| v.first() == Some(&b'{')));
        for (key, value) in &items {
            if value.first() == Some(&b'{') {
                let mut kept = b"k".to_vec();
                kept.extend_from_slice(&key[1..]);
                db.insert(kept, value).unwrap();
            }
        }
        db.insert(b"m/rebuild_kept_through", applied).unwrap();
        db.remove(b"m/projection_format").unwrap();
        for (key, _) in &items {
            db.remove(key).unwrap();
        }
        for entry in db.scan_prefix(b"c") {
            db.remove(entry.unwrap().0).unwrap();
        }
        db.flush().unwrap();
    }

    let sink = open(dir.path(), KEEP_NOTHING);
    // The rebuild's last checkpoint may keep more items whole (retention): compare the items.
    assert_eq!(items_and_counts(&sink), before);
    let i0 = sink.item("J", "i0").unwrap().unwrap();
    assert_eq!(i0.item.failure_history.len(), 2);
    sink.close().await.unwrap();
    drop(sink);
    let db = dlq_testkit::sled_db::open(dir.path());
    assert_eq!(db.scan_prefix(b"k").count(), 0, "the copy is deleted");
    assert!(db.get(b"m/rebuild_kept_through").unwrap().is_none());
}

/// An open that rebuilds the projection (its format key names another layout) after
/// retention deleted segments keeps the items kept whole, like `dlq rebuild` (red before issue
/// 33: the open refused, "a rebuild from the log would lose them").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_on_open_keeps_the_items_kept_whole() {
    let dir = tempfile::tempdir().unwrap();
    let sink = open(dir.path(), KEEP_NOTHING);
    for n in 0..8 {
        append_published(&sink, dead_letter(&format!("i{n}"), "1")).await;
    }
    append_published(&sink, dead_letter("i0", "2")).await;
    let before = items_and_counts(&sink);
    sink.close().await.unwrap();
    drop(sink);
    assert!(segment_firsts(dir.path())[0] > 1, "segments deleted");
    {
        let db = dlq_testkit::sled_db::open(dir.path());
        db.insert(b"m/projection_format", &99u64.to_be_bytes())
            .unwrap();
        db.flush().unwrap();
    }
    let sink = open(dir.path(), KEEP_NOTHING);
    assert_eq!(items_and_counts(&sink), before);
    sink.close().await.unwrap();
}

/// Every item and every job's counters.
fn items_and_counts(
    sink: &LocalSink,
) -> (
    Vec<dlq::domain::projection::StoredItem>,
    Vec<(String, dlq::sink::JobCounters)>,
) {
    let items = sink.items().map(|item| item.unwrap()).collect();
    (items, sink.jobs().unwrap())
}

/// Rewrites the stored item `id` of job J as projection format 2 kept it: the whole item as
/// JSON, and the format key saying 2.
fn make_inline(dir: &Path, id: &str, stored: &dlq::domain::projection::StoredItem) {
    let db = dlq_testkit::sled_db::open(dir);
    db.insert(
        dlq::sink::test_support::item_key("J", id),
        serde_json::to_vec(stored).unwrap(),
    )
    .unwrap();
    db.insert(b"m/projection_format", &2u64.to_be_bytes())
        .unwrap();
    db.flush().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_kept_whole_by_format_2_stay_readable_and_grow() {
    let (old, fresh) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sink = open(old.path(), LogRetention::default());
    let control = open(fresh.path(), LogRetention::default());
    let (a1, b1, a2) = (
        dead_letter("a", "1"),
        dead_letter("b", "1"),
        dead_letter("a", "2"),
    );
    for s in [&sink, &control] {
        s.append(a1.clone()).await.unwrap();
        s.append(b1.clone()).await.unwrap();
    }
    let a = sink.item("J", "a").unwrap().unwrap();
    sink.close().await.unwrap();
    drop(sink);
    make_inline(old.path(), "a", &a);

    let sink = open(old.path(), LogRetention::default());
    assert_eq!(sink.item("J", "a").unwrap().as_ref(), Some(&a));
    for s in [&sink, &control] {
        s.append(a2.clone()).await.unwrap();
    }
    let grown = sink.item("J", "a").unwrap().unwrap();
    assert_eq!(grown.item.failure_history.len(), 2);
    let expected = control.item("J", "a").unwrap().unwrap();
    assert_eq!(grown.item, expected.item);
    assert_eq!(grown.version, 2);
    // The log still holds every event: a rebuild makes the item a pointer record, unchanged.
    sink.rebuild_projection().await.unwrap();
    assert_eq!(sink.item("J", "a").unwrap().as_ref(), Some(&grown));
    sink.close().await.unwrap();
    control.close().await.unwrap();
}

/// A rebuild keeps an item kept whole whose only event an older dlq's retention deleted (it
/// refused before, issue 33), and refuses, changing nothing, when an item that points into the
/// log lost its first event (a segment deleted by hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_keeps_items_kept_whole_and_refuses_to_lose_others() {
    let dir = tempfile::tempdir().unwrap();
    let sink = open(dir.path(), LogRetention::default());
    for n in 0..8 {
        append_published(&sink, dead_letter(&format!("i{n}"), "1")).await;
    }
    let items: Vec<_> = (0..8)
        .map(|n| sink.item("J", &format!("i{n}")).unwrap().unwrap())
        .collect();
    sink.close().await.unwrap();
    drop(sink);
    let firsts = segment_firsts(dir.path());
    assert!(firsts.len() > 2, "{firsts:?}");
    // An older dlq kept the items of the first segment whole, and its retention deleted it.
    let kept: Vec<_> = items.iter().filter(|s| s.created_seq < firsts[1]).collect();
    for stored in &kept {
        make_inline(dir.path(), &stored.item.item_id, stored);
    }
    let log = dir.path().join(dlq::sink::test_support::LOG_DIR);
    std::fs::remove_file(log.join(dlq::sink::test_support::log::segment::name(firsts[0]))).unwrap();

    let sink = open(dir.path(), LogRetention::default());
    for stored in &kept {
        let id = &stored.item.item_id;
        assert_eq!(sink.item("J", id).unwrap().as_ref(), Some(*stored));
    }
    let before = sink.projection_snapshot().unwrap();
    sink.rebuild_projection().await.unwrap();
    assert_eq!(
        before,
        sink.projection_snapshot().unwrap(),
        "kept items kept"
    );
    sink.close().await.unwrap();
    drop(sink);

    // The next segment holds the first event of an item that points into the log.
    std::fs::remove_file(log.join(dlq::sink::test_support::log::segment::name(firsts[1]))).unwrap();
    let sink = open(dir.path(), LogRetention::default());
    let before = sink.projection_snapshot().unwrap();
    let err = sink.rebuild_projection().await.unwrap_err();
    assert!(matches!(err, SinkError::Rejected(_)), "{err:?}");
    assert!(err.to_string().contains("would lose it"), "{err}");
    assert_eq!(
        before,
        sink.projection_snapshot().unwrap(),
        "nothing changed"
    );
    sink.close().await.unwrap();
}

/// The logical index keys (age `a`, recency `r`, FIFO `f`) of a projection snapshot.
fn index_keys(snapshot: &[dlq::sink::KeyValue]) -> Vec<Vec<u8>> {
    snapshot
        .iter()
        .filter(|(key, _)| matches!(key.first(), Some(b'a' | b'r' | b'f')))
        .map(|(key, _)| key.clone())
        .collect()
}

/// Rewrites a current projection as projection format `format` (3 or 4) left it: every index
/// entry its own key (`index`: the logical keys, from [`index_keys`]) instead of the runs
/// (`A`, `R`, `F`), and for format 3 a signature index (`s` + signature + NUL + job + NUL +
/// item); sets the format key. Returns how many signature keys there are.
fn make_old_format(
    dir: &Path,
    items: &[dlq::domain::projection::StoredItem],
    index: &[Vec<u8>],
    format: u64,
) -> usize {
    let db = dlq_testkit::sled_db::open(dir);
    for prefix in [b"A", b"R", b"F"] {
        for key in db.scan_prefix(prefix).keys() {
            db.remove(key.unwrap()).unwrap();
        }
    }
    for key in index {
        db.insert(key, b"").unwrap();
    }
    if format == 3 {
        for stored in items {
            let item = &stored.item;
            let key = format!(
                "s{}\0{}\0{}",
                item.error_signature, item.job_id, item.item_id
            );
            db.insert(key, b"").unwrap();
        }
    }
    db.insert(b"m/projection_format", &format.to_be_bytes())
        .unwrap();
    db.flush().unwrap();
    db.scan_prefix(b"s").count()
}

fn signature_keys_and_format(dir: &Path) -> (usize, Option<Vec<u8>>) {
    let db = dlq_testkit::sled_db::open(dir);
    let format = db.get(b"m/projection_format").unwrap();
    (db.scan_prefix(b"s").count(), format.map(|f| f.to_vec()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn formats_3_and_4_are_taken_over_and_nothing_else_changes() {
    for format in [3, 4] {
        take_over_and_compare(format).await;
    }
}

/// Format 3 loses its signature index; both move their index entries into runs; the
/// projection then equals one built by the current format.
async fn take_over_and_compare(format: u64) {
    let (old, fresh) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sink = open(old.path(), LogRetention::default());
    let control = open(fresh.path(), LogRetention::default());
    let commands = [
        dead_letter("a", "1"),
        dead_letter("b", "1"),
        dead_letter("a", "2"),
        dead_letter("c", "1"),
        resolve("b"),
    ];
    for s in [&sink, &control] {
        for command in &commands {
            s.append(command.clone()).await.unwrap();
        }
    }
    let items: Vec<_> = sink.items().collect::<Result<_, _>>().unwrap();
    assert_eq!(items.len(), 2);
    let index = index_keys(&sink.projection_snapshot().unwrap());
    assert_eq!(index.len(), 3 * items.len());
    sink.close().await.unwrap();
    drop(sink);
    let signatures = if format == 3 { 2 } else { 0 };
    assert_eq!(
        make_old_format(old.path(), &items, &index, format),
        signatures
    );

    let sink = open(old.path(), LogRetention::default());
    let taken_over = sink.projection_snapshot().unwrap();
    assert_eq!(taken_over, control.projection_snapshot().unwrap());
    let later = [dead_letter("a", "3"), resolve("c")];
    for s in [&sink, &control] {
        for command in &later {
            s.append(command.clone()).await.unwrap();
        }
    }
    assert_eq!(
        sink.projection_snapshot().unwrap(),
        control.projection_snapshot().unwrap()
    );
    sink.rebuild_projection().await.unwrap();
    assert_eq!(
        sink.projection_snapshot().unwrap(),
        control.projection_snapshot().unwrap()
    );
    sink.close().await.unwrap();
    drop(sink);
    control.close().await.unwrap();
    drop(control);
    let current = 5u64.to_be_bytes().to_vec();
    assert_eq!(
        signature_keys_and_format(old.path()),
        (0, Some(current.clone()))
    );
    assert_eq!(signature_keys_and_format(fresh.path()), (0, Some(current)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_open_does_not_take_format_3_over() {
    let dir = tempfile::tempdir().unwrap();
    let sink = open(dir.path(), LogRetention::default());
    for id in ["a", "b"] {
        sink.append(dead_letter(id, "1")).await.unwrap();
    }
    let items: Vec<_> = sink.items().collect::<Result<_, _>>().unwrap();
    let index = index_keys(&sink.projection_snapshot().unwrap());
    sink.close().await.unwrap();
    drop(sink);
    assert_eq!(make_old_format(dir.path(), &items, &index, 3), 2);
    // An empty log/ in place of the real one: the projection holds events the log does not,
    // so opening is refused.
    let log = dir.path().join(dlq::sink::test_support::LOG_DIR);
    std::fs::rename(&log, dir.path().join("log.aside")).unwrap();
    std::fs::create_dir(&log).unwrap();

    let mut config = SinkConfig::new(dir.path());
    config.node_id = Some("n1".into());
    let err = LocalSink::open(config).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("log/ was removed"), "{err}");
    assert_eq!(
        signature_keys_and_format(dir.path()),
        (2, Some(3u64.to_be_bytes().to_vec())),
        "the refused open changed the projection"
    );
}
