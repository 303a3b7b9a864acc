//! Crash states of the whole sink: the log on a simulated disk that records every write,
//! `fdatasync`, create, rename, unlink and directory fsync, and sled as of its last completed
//! checkpoint (a copy taken when each checkpoint finished).
//!
//! A workload of concurrent appends, publish acknowledgements, checkpoints and one failed
//! `fdatasync` runs on the real sink. Then, for every crash point of its trace, a crash state of the log (the synced bytes
//! plus a prefix of the unsynced writes, a torn last write, unsynced directory operations lost;
//! see `src/sink/log/crash.rs`) is put beside the sled copy of the last checkpoint before that
//! point, and the sink opened on it must: hold every acknowledged event with identical bytes;
//! have a projection equal to a rebuild from its log; still count as unpublished every
//! acknowledged event whose PubAck came after that checkpoint; and hand out new sequences
//! above everything; and return every acknowledged item as it was acknowledged. A second
//! workload keeps no log beyond what is done (retention zero): checkpoints rewrite items whole
//! in sled and delete the segments they were created in, and no crash state may lose an item
//! or an event not yet published. (Every crash state of the log alone: `sink_log_crash.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Duration;

use dlq::domain::command::Command;
use dlq::domain::projection::StoredItem;
use dlq::sink::test_support::log::crash::{self, Files};
use dlq::sink::test_support::log::sim::{OpKind, SimFs, EIO};
use dlq::sink::{LocalSink, LogRetention, Sink, SinkConfig, SinkError};
use dlq_testkit::items::template_item_sized;

/// A copy of sled's files when a checkpoint finished, and the trace length when it started:
/// a checkpoint writes nothing to the log before it flushes sled, so from that point on a crash
/// may find sled as the checkpoint left it, beside any of the log operations the checkpoint did
/// after its flush (deleting segments).
struct Snapshot {
    trace_len: usize,
    dir: tempfile::TempDir,
}

/// What the workload was promised.
#[derive(Default)]
struct Promises {
    /// seq → (bytes, trace length when acknowledged).
    acked: BTreeMap<u64, (Vec<u8>, usize)>,
    /// seq → trace length when its PubAck was recorded.
    published: BTreeMap<u64, usize>,
    /// seq of a `DeadLettered` event → the item as the sink answered right after it.
    items: BTreeMap<u64, StoredItem>,
}

/// How much of the log the workload keeps.
#[derive(Clone, Copy)]
enum Keep {
    /// The default retention: nothing is deleted in a test this short.
    Default,
    /// Every done segment goes at the next checkpoint, its items kept whole in sled first.
    Nothing,
}

fn config(dir: &Path, sim: Option<SimFs>, skip_fdatasync: bool, keep: Keep) -> SinkConfig {
    let mut config = SinkConfig::new(dir);
    config.node_id = Some("n1".into());
    config.segment_bytes = 6 * 1024; // rotations every few groups
    config.checkpoint_every = Duration::from_secs(3600); // checkpoints only when asked
    config.log_sim = sim;
    config.unsafe_skip_log_fdatasync = skip_fdatasync;
    if let Keep::Nothing = keep {
        // A segment per group or two: each checkpoint deletes several.
        config.segment_bytes = 2048;
        config.log_retention = LogRetention {
            max_age: Duration::ZERO,
            max_bytes: 0,
        };
    }
    config
}

fn job_of(id: &str) -> String {
    format!("J{}", id.len() % 3)
}

fn dl(id: &str) -> Command {
    let mut item = template_item_sized(300);
    (item.job_id, item.item_id) = (job_of(id), id.to_owned());
    Command::DeadLetter {
        topic: "t".into(),
        item: item.into(),
    }
}

fn copy_sled(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_owned();
        if path.is_dir() {
            std::fs::create_dir_all(to.join(&name)).unwrap();
            copy_sled(&path, &to.join(&name));
        } else {
            std::fs::copy(&path, to.join(&name)).unwrap();
        }
    }
}

/// A directory for a crash state: in memory (`/dev/shm`) where there is one, since each of
/// the ~1,500 states is opened, synced and closed, and what it checks does not depend on the
/// disk (the crash states themselves come from the simulated one).
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

/// Runs the workload; returns the simulated log, the sled copies and the promises.
/// `rounds` rounds of four concurrent appends; in round 4 the disk fails one `fdatasync` (the
/// group is not acknowledged and is cut off its segment).
async fn workload(
    skip_fdatasync: bool,
    rounds: u64,
    keep: Keep,
) -> (SimFs, Vec<Snapshot>, Promises) {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimFs::new();
    let config = config(dir.path(), Some(sim.clone()), skip_fdatasync, keep);
    let sink = LocalSink::open(config).unwrap();
    let mut promises = Promises::default();
    let mut snapshots = Vec::new();
    let mut failed = 0;
    for round in 0..rounds {
        if round == 4 && !skip_fdatasync {
            sim.inject(OpKind::Sync, 0, 1, EIO);
        }
        let ids: Vec<String> = (0..4).map(|k| format!("r{round}-{k}")).collect();
        let appends = ids.iter().map(|id| sink.append(dl(id)));
        for (events, id) in futures::future::join_all(appends)
            .await
            .into_iter()
            .zip(&ids)
        {
            let trace_len = sim.trace_len();
            let Ok(events) = events else {
                failed += 1;
                continue;
            };
            for event in events {
                let bytes = sink.stored(event.seq).unwrap().unwrap().json.to_vec();
                promises.acked.insert(event.seq, (bytes, trace_len));
                let item = sink.item(&job_of(id), id).unwrap().unwrap();
                promises.items.insert(event.seq, item);
            }
        }
        // The bus acknowledges every other event of the round.
        let seqs: Vec<u64> = promises.acked.keys().copied().collect();
        for seq in seqs.into_iter().filter(|s| s % 2 == round % 2) {
            if let std::collections::btree_map::Entry::Vacant(entry) = promises.published.entry(seq)
            {
                sink.mark_published(seq).unwrap();
                entry.insert(sim.trace_len());
            }
        }
        if round % 3 == 2 {
            let trace_len = sim.trace_len();
            sink.checkpoint().await.unwrap();
            let copy = scratch_dir();
            copy_sled(dir.path(), copy.path());
            snapshots.push(Snapshot {
                trace_len,
                dir: copy,
            });
        }
    }
    sim.clear_faults();
    assert!(
        skip_fdatasync || rounds <= 4 || failed > 0,
        "the injected fault failed no append"
    );
    // Closing checkpoints once more (and may delete segments): sled as it left it.
    let trace_len = sim.trace_len();
    sink.close().await.unwrap();
    drop(sink);
    let copy = scratch_dir();
    copy_sled(dir.path(), copy.path());
    snapshots.push(Snapshot {
        trace_len,
        dir: copy,
    });
    (sim, snapshots, promises)
}

/// Opens the sink on one crash state and returns what is wrong with it.
async fn check_state(
    p: usize,
    files: &Files,
    snapshots: &[Snapshot],
    promises: &Promises,
) -> Vec<String> {
    let dir = scratch_dir();
    let snapshot = snapshots.iter().rev().find(|s| s.trace_len <= p);
    if let Some(snapshot) = snapshot {
        copy_sled(snapshot.dir.path(), dir.path());
    }
    let log = dir.path().join(dlq::sink::test_support::LOG_DIR);
    std::fs::create_dir_all(&log).unwrap();
    for (name, bytes) in files {
        std::fs::write(log.join(name), bytes).unwrap();
    }
    let mut wrong = Vec::new();
    let sink = match LocalSink::open(config(dir.path(), None, false, Keep::Default)) {
        Ok(sink) => sink,
        Err(err) => return vec![format!("point {p}: the sink does not open: {err}")],
    };
    let checkpoint_at = snapshot.map_or(0, |s| s.trace_len);
    // Retention may delete an event once it was published before the sled state in use was
    // checkpointed (its item is then whole in sled); never before.
    let published_before_checkpoint = |seq: &u64| {
        promises
            .published
            .get(seq)
            .is_some_and(|at| *at <= checkpoint_at)
    };
    // An unreadable log exempts nothing: its events are reported lost below.
    let log_start = match sink.events_from(1).next() {
        Some(Ok(event)) => event.seq,
        Some(Err(_)) => 0,
        None => u64::MAX,
    };
    for (seq, (bytes, acked_at)) in &promises.acked {
        if *acked_at > p {
            continue;
        }
        match sink.stored(*seq) {
            Ok(Some(event)) if event.json.to_vec() == *bytes => {}
            Ok(Some(_)) => wrong.push(format!("point {p}: event {seq} came back with other bytes")),
            Ok(None) if *seq < log_start && published_before_checkpoint(seq) => {}
            Ok(None) => wrong.push(format!("point {p}: acknowledged event {seq} lost")),
            Err(err) => wrong.push(format!("point {p}: acknowledged event {seq} lost: {err}")),
        }
        if let Some(expected) = promises.items.get(seq) {
            let item = &expected.item;
            match sink.item(&item.job_id, &item.item_id) {
                Ok(Some(found)) if found == *expected => {}
                Ok(Some(_)) => wrong.push(format!(
                    "point {p}: item {} (event {seq}) came back changed",
                    item.item_id
                )),
                Ok(None) => wrong.push(format!(
                    "point {p}: item {} (event {seq}) lost",
                    item.item_id
                )),
                Err(err) => wrong.push(format!(
                    "point {p}: item {} (event {seq}) lost: {err}",
                    item.item_id
                )),
            }
        }
    }
    if !wrong.is_empty() {
        return wrong;
    }
    let unpublished: Vec<u64> = match sink.unpublished(0, 100_000) {
        Ok(events) => events.iter().map(|e| e.seq).collect(),
        Err(err) => {
            return vec![format!(
                "point {p}: the unpublished events cannot be read: {err}"
            )]
        }
    };
    for (seq, (_, acked_at)) in &promises.acked {
        let acked_before_pub = promises
            .published
            .get(seq)
            .is_none_or(|at| *at > checkpoint_at);
        if *acked_at <= p && acked_before_pub && !unpublished.contains(seq) {
            wrong.push(format!("point {p}: event {seq} was never PubAcked before the checkpoint but is not unpublished"));
        }
    }
    let live = comparable(&sink);
    match sink.rebuild_projection().await {
        Ok(_) if live != comparable(&sink) => wrong.push(format!(
            "point {p}: the projection differs from a rebuild from the log"
        )),
        Ok(_) => {}
        // Items older than the log are whole in sled only: a rebuild would lose them.
        Err(SinkError::Rejected(reason)) if log_start > 1 && reason.contains("would lose") => {}
        Err(err) => wrong.push(format!("point {p}: the rebuild failed: {err}")),
    }
    // Above every event found and every one acknowledged by this point (later ones were never
    // promised: the reopened sink writes under a new epoch, so even their ids differ).
    let found = sink
        .events_from(1)
        .map(|e| e.unwrap().seq)
        .max()
        .unwrap_or(0);
    let acked = promises.acked.iter().filter(|(_, (_, at))| *at <= p);
    let highest = found.max(acked.map(|(seq, _)| *seq).max().unwrap_or(0));
    let next = sink.append(dl("after-crash")).await.unwrap();
    if next[0].seq <= highest {
        wrong.push(format!(
            "point {p}: new sequence {} is not above {highest}",
            next[0].seq
        ));
    }
    sink.close().await.unwrap();
    wrong
}

type KeyValue = (Vec<u8>, Vec<u8>);

/// The projection as queries see it: every key, and every item as read. An item's stored
/// value may be a pointer into the log or (kept whole before its segment was deleted, with a
/// crash before the deletion) the item itself; both read the same.
fn comparable(sink: &LocalSink) -> (Vec<KeyValue>, Vec<StoredItem>) {
    let item_prefix = dlq::sink::test_support::item_key("", "")[0];
    let keys = sink
        .projection_snapshot()
        .unwrap()
        .into_iter()
        .map(|(key, value)| match key.first() {
            Some(&first) if first == item_prefix => (key, Vec::new()),
            _ => (key, value),
        })
        .collect();
    let items = sink.items().collect::<Result<_, _>>().unwrap();
    (keys, items)
}

/// What [`check`] found: states checked, violations, segments the workload deleted.
struct Checked {
    states: u64,
    violations: Vec<String>,
    removed_segments: usize,
}

/// Checks up to `budget` crash states spread over the whole trace (every one when the trace has
/// fewer).
async fn check(skip_fdatasync: bool, rounds: u64, budget: u64, keep: Keep) -> Checked {
    let (sim, snapshots, promises) = workload(skip_fdatasync, rounds, keep).await;
    let trace = sim.trace();
    let empty = SimFs::new().disk();
    let total = crash::for_each_crash_state(&empty, &trace, |_, _| ControlFlow::Continue(()));
    let step = (total / budget).max(1);
    eprintln!("{total} crash states in the trace, every {step}th checked");
    let mut picked = Vec::new();
    let mut n = 0u64;
    crash::for_each_crash_state(&empty, &trace, |p, files| {
        if n.is_multiple_of(step) {
            picked.push((p, files.clone()));
        }
        n += 1;
        ControlFlow::Continue(())
    });
    let mut violations = Vec::new();
    for (p, files) in &picked {
        violations.extend(check_state(*p, files, &snapshots, &promises).await);
    }
    let removed_segments = trace
        .iter()
        .filter(|op| matches!(op, crash::Op::Remove { .. }))
        .count();
    Checked {
        states: picked.len() as u64,
        violations,
        removed_segments,
    }
}

/// A number from the environment (a longer run than CI's), if set and valid.
fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn assert_no_violations(violations: &[String]) {
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_state_of_the_sink_keeps_its_promises() {
    let rounds = env_number("DLQ_SINK_CRASH_ROUNDS").unwrap_or(8);
    let budget = env_number("DLQ_SINK_CRASH_STATES").unwrap_or(u64::MAX);
    let Checked {
        states, violations, ..
    } = check(false, rounds, budget, Keep::Default).await;
    eprintln!("checked {states} crash states of the sink");
    assert!(states >= budget.min(1_000), "only {states} states");
    assert_no_violations(&violations);
}

/// The harness has teeth: with the log's fdatasync skipped, acknowledged events are lost in
/// some crash state (or the whole log cannot be opened), and it says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fdatasync_the_sink_harness_reports_lost_events() {
    let violations = check(true, 8, 150, Keep::Default).await.violations;
    assert!(
        violations
            .iter()
            .any(|v| v.contains("lost") || v.contains("does not open")),
        "no loss reported: {violations:?}"
    );
}

/// Retention zero: every checkpoint rewrites the items of done segments whole in sled, flushes
/// it, and only then deletes those segments. No crash state between loses an item, an
/// unpublished event, or an acknowledged event retention had no right to delete yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_state_around_retention_keeps_items_and_unpublished_events() {
    let budget = env_number("DLQ_SINK_CRASH_STATES").unwrap_or(600);
    let Checked {
        states,
        violations,
        removed_segments,
    } = check(false, 9, budget, Keep::Nothing).await;
    assert!(
        removed_segments >= 2,
        "retention deleted {removed_segments} segments"
    );
    eprintln!("checked {states} crash states of the sink around retention");
    assert!(states >= budget.min(300), "only {states} states");
    assert_no_violations(&violations);
}
