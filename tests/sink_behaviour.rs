#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Behaviour of the sled sink through its public API, on a real sled database in a temporary
//! directory (no mocks). Each test says what it proves.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use dlq::domain::command::Command;
use dlq::domain::event::{EncodedEvent, Event, EventKind, RemovalReason};
use dlq::domain::model::{DeadLetteredItem, ErrorType, FailureDetail};
use dlq::domain::projection::{MemoryProjection, StoredItem};
use dlq::sink::purge;
use dlq::sink::{Appended, Backlog, LocalSink, Sink, SinkConfig, SinkError};
use tempfile::TempDir;

/// `events` as the bus gets them: what the sink stores is exactly their encoding.
fn encoded(events: &[Event]) -> Vec<EncodedEvent> {
    events
        .iter()
        .map(|e| EncodedEvent::encode(e).unwrap())
        .collect()
}

fn failures(n: u32, from: DateTime<Utc>, kind: ErrorType, msg: &str) -> Vec<FailureDetail> {
    let detail = |k: u32| FailureDetail {
        attempt_number: k,
        timestamp: from + TimeDelta::minutes(i64::from(k - 1)),
        error_type: kind.clone(),
        error_message: msg.to_owned(),
        stack_trace: None,
        agent_id: format!("agent-{k}"),
        step_failed: "shell: cargo test".into(),
        duration_ms: 1000,
        json_log_location: None,
    };
    (1..=n).map(detail).collect()
}

/// A complete item of `n` failures, the first at `first`.
fn item(job: &str, id: &str, first: DateTime<Utc>, n: u32) -> DeadLetteredItem {
    let fails = failures(n, first, ErrorType::Unknown, "test failed");
    DeadLetteredItem::new(job, id, serde_json::json!({ "id": id }), fails).unwrap()
}

fn dead_letter(item: DeadLetteredItem) -> Command {
    let (topic, item) = ("mapreduce".to_owned(), std::sync::Arc::new(item));
    Command::DeadLetter { topic, item }
}

fn dl(job: &str, id: &str) -> Command {
    dead_letter(item(job, id, Utc::now(), 1))
}

fn clear(job: &str, limit: usize) -> Command {
    let job_id = job.to_owned();
    let by = None;
    Command::Clear { job_id, limit, by }
}

fn reopen(dir: &Path, node: Option<&str>) -> Result<LocalSink, SinkError> {
    let mut config = SinkConfig::new(dir);
    config.node_id = node.map(str::to_owned);
    LocalSink::open(config)
}

fn fresh(tweak: impl FnOnce(&mut SinkConfig)) -> (TempDir, LocalSink) {
    let dir = TempDir::new().unwrap();
    let mut config = SinkConfig::new(dir.path());
    tweak(&mut config);
    (dir, LocalSink::open(config).unwrap())
}

fn len(sink: &LocalSink, job: &str) -> u64 {
    sink.job_len(job).unwrap()
}

async fn ok(sink: &LocalSink, command: Command) -> Vec<Event> {
    sink.append(command).await.unwrap()
}

/// The variant name and the message of an error that must occur.
fn error<T>(result: Result<T, SinkError>) -> (String, String) {
    let err = result.err().expect("expected an error");
    let debug = format!("{err:?}");
    let name = debug.split([' ', '(']).next().unwrap_or_default();
    (name.to_owned(), err.to_string())
}

/// Closes the sink and drops the handle: sled's file lock goes with the last handle, not with
/// `close` (a handle kept alive after `close` still locks the directory).
async fn close(sink: LocalSink) {
    sink.close().await.unwrap();
}

fn log(sink: &LocalSink) -> Vec<Event> {
    sink.events_from(1).collect::<Result<_, _>>().unwrap()
}

fn items(sink: &LocalSink) -> Vec<StoredItem> {
    sink.items().collect::<Result<_, _>>().unwrap()
}

fn ids_in(sink: &LocalSink, job: &str) -> Vec<String> {
    let of_job = items(sink).into_iter().filter(|s| s.item.job_id == job);
    of_job.map(|s| s.item.item_id.clone()).collect()
}

/// Events in short form: "seq kind job/item", plus the reason of a removal.
fn brief(events: &[Event]) -> Vec<String> {
    let one = |e: &Event| {
        let item = e.kind.item_id().unwrap_or("-");
        let reason = match &e.kind {
            EventKind::ItemRemoved { reason, .. } => format!(" {reason:?}").to_lowercase(),
            _ => String::new(),
        };
        format!("{} {} {}/{item}{reason}", e.seq, e.kind.name(), e.job_id)
    };
    events.iter().map(one).collect()
}

/// The next append gets `seq`: proves that a refused command consumed no sequence number.
async fn assert_next_seq(sink: &LocalSink, seq: u64) {
    let events = ok(sink, dl("probe", &format!("probe-{seq}"))).await;
    assert_eq!(events.last().unwrap().seq, seq);
}

/// A first dead-letter is one `dead_lettered` event with seq 1 and id "<node>:<epoch>:1", the
/// first of its epoch (naming nothing before it), stored as an item of version 1, and stays in
/// the backlog until the bus acknowledges it.
#[tokio::test]
async fn dead_letter_is_stored_and_unpublished_until_marked() {
    let (_dir, sink) = fresh(|c| c.node_id = Some("n1".into()));
    let events = ok(&sink, dl("job-a", "item-1")).await;
    assert_eq!(brief(&events), ["1 dead_lettered job-a/item-1"]);
    let epoch = events[0]
        .epoch
        .clone()
        .expect("stored events carry the epoch");
    let id = format!("n1:{epoch}:1");
    assert_eq!((&*events[0].event_id, &*events[0].node_id), (&*id, "n1"));
    assert_eq!(
        (events[0].prev_epoch.as_ref(), events[0].prev_seq),
        (None, Some(0))
    );
    let stored = sink.item("job-a", "item-1").unwrap().unwrap();
    assert_eq!((&*stored.item.job_id, len(&sink, "job-a")), ("job-a", 1));
    assert_eq!((stored.version, &*stored.last_event_id), (1, &*id));
    assert_eq!(log(&sink), events);
    let backlog = sink.backlog().unwrap();
    assert!(backlog.count == 1 && backlog.oldest.is_some());
    assert_eq!(sink.unpublished(0, 10).unwrap(), encoded(&events));
    sink.mark_published(1).unwrap();
    sink.mark_published(1).unwrap(); // idempotent: the count must not go below zero
    assert_eq!(sink.backlog().unwrap(), Backlog::default());
    close(sink).await;
}

/// A repeated failure of the same item is a `failure_appended` event that merges histories:
/// counts add up, attempts continue their numbering, the newest failure wins signature and
/// last_attempt; first_attempt, item_data and created_seq stay.
#[tokio::test]
async fn repeated_failure_appends_history() {
    let (_dir, sink) = fresh(|_| {});
    let t0 = Utc::now() - TimeDelta::hours(3);
    let first = item("A", "i1", t0, 2);
    let later = failures(3, t0 + TimeDelta::hours(1), ErrorType::Timeout, "slow");
    let second = DeadLetteredItem::new("A", "i1", 1.into(), later).unwrap();
    ok(&sink, dead_letter(first.clone())).await;
    let events = ok(&sink, dead_letter(second.clone())).await;
    assert_eq!(brief(&events), ["2 failure_appended A/i1"]);
    let stored = sink.item("A", "i1").unwrap().unwrap();
    let it = &stored.item;
    let numbers = it.failure_history.iter().map(|f| f.attempt_number);
    assert!(
        it.failure_count == 5 && numbers.eq(1..=5),
        "renumbered 1..=5"
    );
    assert_eq!(it.failure_history[..2], first.failure_history);
    assert_eq!(it.first_attempt, first.first_attempt);
    assert_eq!(it.last_attempt, second.last_attempt);
    assert_ne!(first.error_signature, second.error_signature);
    assert_eq!(it.error_signature, second.error_signature);
    assert_eq!(it.item_data, first.item_data);
    assert_eq!((stored.version, stored.created_seq), (2, 1));
    assert_eq!(stored.last_event_id, events[0].event_id);
    close(sink).await;
}

/// At capacity a new item evicts the oldest-created item of its job (FIFO), in the same append
/// and before the new item; other jobs are untouched and a re-failure does not evict.
#[tokio::test]
async fn fifo_eviction_at_capacity() {
    let (_dir, sink) = fresh(|c| c.capacity_per_job = 3);
    let mut appended = Vec::new();
    for id in ["a1", "b1", "a2", "a3", "b2", "a4", "a5"] {
        let job = if id.starts_with('a') { "A" } else { "B" };
        appended.push(brief(&ok(&sink, dl(job, id)).await).join(", "));
    }
    let evictions = [
        "6 item_removed A/a1 evicted, 7 dead_lettered A/a4",
        "8 item_removed A/a2 evicted, 9 dead_lettered A/a5",
    ];
    assert_eq!(appended[5..], evictions);
    assert_eq!(brief(&log(&sink)).join(", "), appended.join(", "));
    assert_eq!(ids_in(&sink, "A"), ["a3", "a4", "a5"]);
    assert_eq!(ids_in(&sink, "B"), ["b1", "b2"]);
    assert_eq!((len(&sink, "A"), len(&sink, "B")), (3, 2));
    // Re-failing an existing item at capacity adds history, evicts nothing.
    let again = ok(&sink, dl("A", "a3")).await;
    assert_eq!(brief(&again), ["10 failure_appended A/a3"]);
    // Eviction follows creation order, not the last failure: a3 is still the oldest.
    let next = brief(&ok(&sink, dl("A", "a6")).await).join(", ");
    assert_eq!(next, "11 item_removed A/a3 evicted, 12 dead_lettered A/a6");
    assert_eq!(ids_in(&sink, "A"), ["a4", "a5", "a6"]);
    close(sink).await;
}

/// Retention purges exactly the items first failed before the cutoff, as `purged` removals,
/// optionally restricted to one job.
#[tokio::test]
async fn retention_purges_only_old_items() {
    let (_dir, sink) = fresh(|_| {});
    let now = Utc::now();
    let (old, new) = (now - TimeDelta::days(40), now - TimeDelta::days(1));
    let rows = [("A", "o1", old), ("A", "n1", new), ("A", "o2", old)];
    for (job, id, first) in rows.into_iter().chain([("B", "o3", old), ("B", "n2", new)]) {
        ok(&sink, dead_letter(item(job, id, first, 2))).await;
    }
    let cutoff = now - TimeDelta::days(30);
    assert_eq!(purge(&sink, cutoff, Some("A"), None).await.unwrap(), 2);
    assert_eq!(ids_in(&sink, "A"), ["n1"]);
    assert_eq!(ids_in(&sink, "B"), ["n2", "o3"]);
    assert_eq!(purge(&sink, cutoff, None, None).await.unwrap(), 1);
    assert_eq!(purge(&sink, cutoff, None, None).await.unwrap(), 0);
    assert_eq!(ids_in(&sink, "B"), ["n2"]);
    let purged = brief(&log(&sink)[5..]).join(", ");
    let expected = "item_removed A/o1 purged, 7 item_removed A/o2 purged, 8 item_removed B/o3";
    assert_eq!(purged, format!("6 {expected} purged"));
    close(sink).await;
}

/// Clear removes a job's items oldest first, `limit` per command (reason `cleared`); removing
/// an unknown item is `NotFound` and writes nothing, not even a sequence number.
#[tokio::test]
async fn clear_in_chunks_and_not_found_writes_nothing() {
    let (_dir, sink) = fresh(|_| {});
    for id in ["i1", "i2", "i3", "i4", "i5"] {
        ok(&sink, dl("A", id)).await;
    }
    ok(&sink, dl("B", "keep")).await;
    let mut chunks = Vec::new();
    for _ in 0..4 {
        chunks.push(brief(&ok(&sink, clear("A", 2)).await).join(", "));
    }
    let expected = [
        "7 item_removed A/i1 cleared, 8 item_removed A/i2 cleared",
        "9 item_removed A/i3 cleared, 10 item_removed A/i4 cleared",
        "11 item_removed A/i5 cleared",
        "", // nothing left: no event, no sequence number used
    ];
    assert_eq!(chunks, expected);
    assert_eq!((len(&sink, "A"), len(&sink, "B")), (0, 1));
    let (job_id, item_id, reason) = ("A".into(), "i1".into(), RemovalReason::Resolved);
    let remove = Command::Remove {
        job_id,
        item_id,
        reason,
        by: None,
    };
    let (kind, message) = error(sink.append(remove).await);
    assert_eq!(kind, "NotFound");
    assert_eq!(message, "item 'i1' not found in job 'A'");
    assert_eq!(log(&sink).len(), 11);
    assert_next_seq(&sink, 12).await;
    close(sink).await;
}

/// Invalid ids (empty, NUL, newline, over 256 bytes) and events over max_event_bytes are
/// `Rejected` and write nothing.
#[tokio::test]
async fn bad_input_is_rejected_and_writes_nothing() {
    let (_dir, sink) = fresh(|_| {});
    let long = "x".repeat(300);
    let ids = [("", "i"), ("A", "a\0b"), ("A", "a\nb"), ("A", "")];
    for (job, id) in ids.into_iter().chain([("A", &*long), (&*long, "i")]) {
        let (kind, message) = error(sink.append(dl(job, id)).await);
        assert_eq!(kind, "Rejected", "{job:?}/{id:?}: {message}");
    }
    let mut huge = item("A", "big", Utc::now(), 1);
    huge.item_data = serde_json::Value::String("y".repeat(600 * 1024));
    let (kind, message) = error(sink.append(dead_letter(huge)).await);
    assert_eq!(kind, "Rejected");
    assert!(message.contains("max_event_bytes"), "{message}");
    assert!(log(&sink).is_empty() && items(&sink).is_empty());
    assert_next_seq(&sink, 1).await;
    close(sink).await;
}

/// Everything acknowledged survives close and reopen: node id, log, items, backlog (count and
/// oldest); the sequence continues without reusing a number.
#[tokio::test]
async fn state_survives_reopen_and_sequence_continues() {
    let (dir, sink) = fresh(|_| {});
    let node = sink.node_id().to_owned();
    for k in 0..10 {
        ok(&sink, dl(["A", "B"][k % 2], &format!("i{k}"))).await;
    }
    (1..=3).for_each(|seq| sink.mark_published(seq).unwrap());
    let (events, backlog, stored) = (log(&sink), sink.backlog().unwrap(), items(&sink));
    assert_eq!((events.len(), backlog.count), (10, 7));
    close(sink).await;
    let sink = reopen(dir.path(), None).unwrap();
    assert_eq!(sink.node_id(), node);
    assert_eq!(log(&sink), events);
    assert_eq!(items(&sink), stored);
    assert_eq!(sink.backlog().unwrap(), backlog);
    assert_eq!(sink.unpublished(0, 100).unwrap(), encoded(&events[3..]));
    let next = ok(&sink, dl("A", "after")).await;
    let epoch = next[0].epoch.clone().unwrap();
    assert_ne!(next[0].epoch, events[9].epoch, "every open is a new epoch");
    assert_eq!(next[0].event_id, format!("{node}:{epoch}:11"));
    assert_eq!(
        (next[0].prev_epoch.as_ref(), next[0].prev_seq),
        (events[9].epoch.as_ref(), Some(10)),
        "the epoch's first event names the last one logged"
    );
    close(sink).await;
}

/// 64 concurrent tasks × 50 appends on a multi-thread runtime all succeed through group commit
/// (no flush_async deadlock, sled issue 1308) with sequences exactly 1..=3200.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_appends_group_commit_without_gaps() {
    let (_dir, sink) = fresh(|c| c.store_timeout = Duration::from_secs(60));
    let task = |t: usize, sink: LocalSink| async move {
        let mut seqs = Vec::new();
        for i in 0..50 {
            let events = ok(&sink, dl(&format!("job-{}", t % 4), &format!("t{t}-{i}"))).await;
            seqs.extend(events.iter().map(|e| e.seq));
        }
        seqs
    };
    let spawn = |t| tokio::spawn(task(t, sink.clone()));
    let all = futures::future::join_all((0..64).map(spawn));
    let all = tokio::time::timeout(Duration::from_secs(120), all).await;
    let tasks = all.expect("appends deadlocked").into_iter();
    let mut seqs: Vec<u64> = tasks.flat_map(Result::unwrap).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=3200).collect::<Vec<u64>>());
    assert_eq!(sink.backlog().unwrap().count, 3200);
    assert_eq!((log(&sink).len(), items(&sink).len()), (3200, 3200));
    close(sink).await;
}

/// A stalled disk after the writer took a request makes append return `Unconfirmed` after
/// store_timeout: the writer has the request and stores it once the disk answers, so the event
/// later appears in the log with its sequence number. The caller must not send it again.
#[tokio::test]
async fn store_timeout_after_the_writer_took_the_write_is_unconfirmed_and_completes() {
    let (_dir, sink) = fresh(|c| c.store_timeout = Duration::from_millis(200));
    // The disk stalls until the test lets it go: append must answer while the write waits.
    sink.faults().set_stall(Duration::from_secs(3600));
    let answered = tokio::time::timeout(Duration::from_secs(120), sink.append(dl("A", "slow")));
    let (kind, message) = error(answered.await.expect("append waited for the stalled disk"));
    assert_eq!(kind, "Unconfirmed", "{message}");
    assert!(
        log(&sink).is_empty(),
        "not written yet: the disk is stalled"
    );
    sink.faults().set_stall(Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink.item("A", "slow").unwrap().is_none() {
        assert!(Instant::now() < deadline, "write never completed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(brief(&log(&sink)), ["1 dead_lettered A/slow"]);
    assert_next_seq(&sink, 2).await;
    close(sink).await;
}

/// A request the writer had not taken when the store timeout ran out is withdrawn: append
/// returns `Timeout`, and the writer drops it unread once it gets to it. It is never stored, so
/// the emitter may publish it without a durable copy.
#[tokio::test]
async fn a_write_withdrawn_before_the_writer_took_it_is_never_stored() {
    let (_dir, sink) = fresh(|c| c.store_timeout = Duration::from_millis(200));
    sink.faults().set_paused(true);
    let (kind, message) = error(sink.append(dl("A", "withdrawn")).await);
    assert_eq!(kind, "Timeout", "{message}");
    sink.faults().set_paused(false);
    // The writer has gone past the withdrawn request once a later one is answered.
    let events = sink.append(dl("A", "later")).await.unwrap();
    assert_eq!(events[0].seq, 1, "the withdrawn request used no sequence");
    assert!(sink.item("A", "withdrawn").unwrap().is_none());
    assert_eq!(brief(&log(&sink)), ["1 dead_lettered A/later"]);
    assert_eq!(sink.backlog().unwrap().count, 1);
    close(sink).await;
}

/// A write fault is `Io` and writes nothing; a flush fault is `NotDurable` and hands back the
/// stored events with their ids so they can still be published.
#[tokio::test]
async fn injected_faults_surface_as_errors() {
    let (_dir, sink) = fresh(|c| c.node_id = Some("n1".into()));
    sink.faults().set_fail_writes(true);
    assert_eq!(error(sink.append(dl("A", "w")).await).0, "Io");
    sink.faults().set_fail_writes(false);
    assert!(log(&sink).is_empty() && items(&sink).is_empty());
    sink.faults().set_fail_flush(true);
    let Err(SinkError::NotDurable { events, .. }) = sink.append(dl("A", "f")).await else {
        panic!("expected NotDurable")
    };
    assert_eq!(brief(&events), ["1 dead_lettered A/f"]);
    assert_eq!(events[0].seq, 1);
    sink.faults().set_fail_flush(false);
    assert_next_seq(&sink, 2).await;
    close(sink).await;
}

/// Opening is refused with `Open` naming the cause (a directory another sink holds; another
/// node's database); an invalid node id for a new database is `Rejected`.
#[tokio::test]
async fn open_refusals_name_the_cause() {
    let (dir, sink) = fresh(|c| c.node_id = Some("n1".into()));
    ok(&sink, dl("A", "i")).await;
    let (kind, message) = error(reopen(dir.path(), None));
    assert_eq!(kind, "Open");
    assert!(message.contains("Another process holds"), "{message}");
    close(sink).await;
    let (kind, message) = error(reopen(dir.path(), Some("n2")));
    assert_eq!(kind, "Open");
    assert!(message.contains("'n1', not 'n2'"), "{message}");
    let sink = reopen(dir.path(), None).unwrap();
    assert_eq!(sink.node_id(), "n1"); // no node id given: the stored one is used
    assert_eq!(log(&sink).len(), 1);
    close(sink).await;
    let fresh = TempDir::new().unwrap();
    for bad in ["", "bad\nid", "a\0b"] {
        let result = reopen(fresh.path(), Some(bad));
        assert_eq!(error(result).0, "Rejected", "{bad:?}");
    }
}

/// Damages the files sled 0.34 keeps (`conf`, `db`; `blobs/` stays empty at this size): db cut
/// to half or to 100 bytes, db middle flipped, db header garbage, conf garbage or cut.
fn damage(dir: &Path, how: usize) {
    let (db_path, conf_path) = (dir.join("db"), dir.join("conf"));
    let mut db = std::fs::read(&db_path).unwrap();
    let mut conf = std::fs::read(&conf_path).unwrap();
    let mid = db.len() / 2;
    match how {
        0 => db.truncate(mid),
        1 => db.truncate(100),
        2 => db[mid - 64..mid + 64].iter_mut().for_each(|x| *x ^= 0xA5),
        3 => db[..512].fill(0x5A),
        4 => conf = b"not a sled config".to_vec(),
        _ => conf.truncate(conf.len() / 2),
    }
    std::fs::write(db_path, db).unwrap();
    std::fs::write(conf_path, conf).unwrap();
}

/// A damaged database never crashes or hangs the opener: it is refused with the recovery hint,
/// or opens in a consistent state (a prefix of the log and exactly its projection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_database_is_refused_or_consistent() {
    for how in 0..6 {
        let (dir, sink) = fresh(|_| {});
        for k in 0..30 {
            ok(&sink, dl(["A", "B", "B"][k % 3], &format!("i{k}"))).await;
        }
        ok(&sink, clear("A", 4)).await;
        let original = log(&sink);
        close(sink).await;
        damage(dir.path(), how);
        let path = dir.path().to_owned();
        let opening = tokio::task::spawn_blocking(move || reopen(&path, None));
        let opened = tokio::time::timeout(Duration::from_secs(60), opening).await;
        let result = opened.expect("open hung").expect("open panicked");
        if result.is_err() {
            let (kind, message) = error(result);
            assert_eq!(kind, "Open", "damage {how}: {message}");
            assert!(message.contains("Recovering a data directory"), "{message}");
            continue;
        }
        let sink = result.unwrap();
        let events = log(&sink); // a prefix of the log, every entry readable
        assert_eq!(events, original[..events.len()], "damage {how}");
        let mut model = MemoryProjection::default();
        events.iter().for_each(|e| model.apply(e));
        assert!(items(&sink).iter().eq(model.items.values()), "damage {how}");
        close(sink).await;
    }
}

/// The applier is held back, so every append is acknowledged (durable in the log) while sled
/// holds none of it: each decision (a re-failure, a FIFO eviction, a purge by age) must be made
/// on the groups not applied yet. Once it applies, the projection equals a rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_see_groups_the_applier_has_not_applied_yet() {
    let (_dir, sink) = fresh(|c| c.capacity_per_job = 3);
    sink.faults().set_applier_paused(true);
    let mut appended = Vec::new();
    for id in ["a1", "b1", "a2", "a3", "b2", "a4", "a5"] {
        let job = if id.starts_with('a') { "A" } else { "B" };
        appended.push(brief(&ok(&sink, dl(job, id)).await).join(", "));
    }
    assert_eq!(
        appended[5..],
        [
            "6 item_removed A/a1 evicted, 7 dead_lettered A/a4",
            "8 item_removed A/a2 evicted, 9 dead_lettered A/a5",
        ]
    );
    let again = ok(&sink, dl("A", "a3")).await;
    assert_eq!(brief(&again), ["10 failure_appended A/a3"]);
    let old = Utc::now() - TimeDelta::days(40);
    ok(&sink, dead_letter(item("B", "old", old, 1))).await;
    let cutoff = Utc::now() - TimeDelta::days(30);
    let purge = Command::Purge {
        cutoff,
        job_id: None,
        limit: 10,
        by: None,
    };
    assert_eq!(
        brief(&ok(&sink, purge).await),
        ["12 item_removed B/old purged"]
    );
    sink.faults().set_applier_paused(false);
    assert_eq!(ids_in(&sink, "A"), ["a3", "a4", "a5"]);
    assert_eq!(ids_in(&sink, "B"), ["b1", "b2"]);
    assert_eq!(sink.item("A", "a3").unwrap().unwrap().item.failure_count, 2);
    assert_eq!((len(&sink, "A"), len(&sink, "B")), (3, 2));
    let live = sink.projection_snapshot().unwrap();
    sink.rebuild_projection().await.unwrap();
    assert_eq!(live, sink.projection_snapshot().unwrap());
    close(sink).await;
}

/// A clean close leaves every log segment exactly its frames: the blocks reserved ahead of the
/// appends are given back, so the closed segment's sidecar fits it and the disk holds no zeros.
#[tokio::test]
async fn a_clean_close_gives_back_the_log_space_reserved_ahead() {
    let (dir, sink) = fresh(|_| {});
    for n in 0..5 {
        ok(&sink, dl("job", &format!("i{n}"))).await;
    }
    close(sink).await;
    let segments: Vec<_> = std::fs::read_dir(dir.path().join("log"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
        .collect();
    assert!(!segments.is_empty(), "no segment in the log directory");
    for path in segments {
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            bytes.last(),
            Some(&b'}'),
            "{} ends in reserved zeros ({} bytes)",
            path.display(),
            bytes.len()
        );
    }
}

/// Whether a thread of this process has the name `name` now.
fn thread_named(name: &str) -> bool {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .any(|comm| comm.trim_end() == name)
}

/// A periodic checkpoint's sled flush runs beside the writer: while it is held back, appends
/// are still acknowledged; once it ends, closing and reopening find everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_go_on_while_a_periodic_checkpoint_flushes_sled() {
    let (dir, sink) = fresh(|c| c.checkpoint_every = Duration::from_millis(10));
    sink.faults().set_flush_paused(true);
    ok(&sink, dl("A", "a1")).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !thread_named("dlq-sink-flush") {
        assert!(Instant::now() < deadline, "no periodic checkpoint started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Liveness, not speed: a writer that flushes itself waits here until the flush resumes.
    let appended = tokio::time::timeout(Duration::from_secs(30), sink.append(dl("A", "a2"))).await;
    sink.faults().set_flush_paused(false);
    let appended = appended.expect("an append waited for the paused checkpoint flush");
    assert_eq!(brief(&appended.unwrap()), ["2 dead_lettered A/a2"]);
    close(sink).await;
    let sink = reopen(dir.path(), None).unwrap();
    assert_eq!(ids_in(&sink, "A"), ["a1", "a2"]);
    close(sink).await;
}

/// `append_encoded` hands each stored event as the exact bytes the log holds for it (what
/// the emitter publishes without encoding again, issue 37), not the event: in order, for an
/// append of two events (an eviction, then the new item), equal to the event's own encoding.
/// The new item moved into the projection uncopied is the item the event carries.
#[tokio::test]
async fn append_encoded_gives_each_event_the_bytes_the_log_holds() {
    let (_dir, sink) = fresh(|c| c.capacity_per_job = 1);
    ok(&sink, dl("A", "a1")).await;
    let (answer, late) = sink.append_encoded(dl("A", "a2")).await;
    assert!(late.is_none());
    let appended = answer.unwrap();
    assert_eq!(appended.len(), 2, "an eviction and the new item");
    let mut events = Vec::new();
    for stored in appended {
        let Appended::Encoded(encoded) = &stored else {
            panic!("the local sink answers append_encoded with the bytes: {stored:?}");
        };
        let logged = sink.stored(encoded.seq).unwrap().expect("in the log");
        assert_eq!(encoded, &logged, "event {}", encoded.seq);
        let event = stored.clone().into_event().unwrap();
        assert_eq!(encoded, &EncodedEvent::encode(&event).unwrap());
        events.push(event);
    }
    let EventKind::DeadLettered { item } = &events[1].kind else {
        panic!("the second event is the new item: {:?}", events[1].kind);
    };
    let mut expected = (**item).clone();
    expected.job_id = "A".into();
    let stored = sink.item("A", "a2").unwrap().expect("a2 in the projection");
    assert_eq!(*stored.item, expected);
}
