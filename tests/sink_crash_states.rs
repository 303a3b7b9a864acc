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
//! above everything. (Every crash state of the log alone: `sink_log_crash.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Duration;

use dlq::domain::command::Command;
use dlq::sink::log::crash::{self, Files};
use dlq::sink::log::sim::{OpKind, SimFs, EIO};
use dlq::sink::{Sink, SinkConfig, SledSink};
use dlq_testkit::items::template_item_sized;

/// A copy of sled's files when a checkpoint finished, and the trace length then.
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
}

fn config(dir: &Path, sim: Option<SimFs>, skip_fdatasync: bool) -> SinkConfig {
    let mut config = SinkConfig::new(dir);
    config.node_id = Some("n1".into());
    config.segment_bytes = 6 * 1024; // rotations every few groups
    config.checkpoint_every = Duration::from_secs(3600); // checkpoints only when asked
    config.log_sim = sim;
    config.unsafe_skip_log_fdatasync = skip_fdatasync;
    config
}

fn dl(id: &str) -> Command {
    let mut item = template_item_sized(300);
    (item.job_id, item.item_id) = (format!("J{}", id.len() % 3), id.to_owned());
    Command::DeadLetter {
        topic: "t".into(),
        item: Box::new(item),
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
async fn workload(skip_fdatasync: bool, rounds: u64) -> (SimFs, Vec<Snapshot>, Promises) {
    let dir = tempfile::tempdir().unwrap();
    let sim = SimFs::new();
    let sink = SledSink::open(config(dir.path(), Some(sim.clone()), skip_fdatasync)).unwrap();
    let mut promises = Promises::default();
    let mut snapshots = Vec::new();
    let mut failed = 0;
    for round in 0..rounds {
        if round == 4 && !skip_fdatasync {
            sim.inject(OpKind::Sync, 0, 1, EIO);
        }
        let appends = (0..4).map(|k| sink.append(dl(&format!("r{round}-{k}"))));
        for events in futures::future::join_all(appends).await {
            let trace_len = sim.trace_len();
            let Ok(events) = events else {
                failed += 1;
                continue;
            };
            for event in events {
                let bytes = sink.stored(event.seq).unwrap().unwrap().json.to_vec();
                promises.acked.insert(event.seq, (bytes, trace_len));
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
            sink.checkpoint().await.unwrap();
            let copy = scratch_dir();
            copy_sled(dir.path(), copy.path());
            snapshots.push(Snapshot {
                trace_len: sim.trace_len(),
                dir: copy,
            });
        }
    }
    sim.clear_faults();
    assert!(
        skip_fdatasync || rounds <= 4 || failed > 0,
        "the injected fault failed no append"
    );
    sink.close().await.unwrap();
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
    let sink = match SledSink::open(config(dir.path(), None, false)) {
        Ok(sink) => sink,
        Err(err) => return vec![format!("point {p}: the sink does not open: {err}")],
    };
    for (seq, (bytes, acked_at)) in &promises.acked {
        if *acked_at > p {
            continue;
        }
        match sink.stored(*seq) {
            Ok(Some(event)) if event.json.to_vec() == *bytes => {}
            Ok(Some(_)) => wrong.push(format!("point {p}: event {seq} came back with other bytes")),
            Ok(None) => wrong.push(format!("point {p}: acknowledged event {seq} lost")),
            Err(err) => wrong.push(format!("point {p}: acknowledged event {seq} lost: {err}")),
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
    let checkpoint_at = snapshot.map_or(0, |s| s.trace_len);
    for (seq, (_, acked_at)) in &promises.acked {
        let acked_before_pub = promises
            .published
            .get(seq)
            .is_none_or(|at| *at > checkpoint_at);
        if *acked_at <= p && acked_before_pub && !unpublished.contains(seq) {
            wrong.push(format!("point {p}: event {seq} was never PubAcked before the checkpoint but is not unpublished"));
        }
    }
    let live = sink.projection_snapshot().unwrap();
    sink.rebuild_projection().await.unwrap();
    if live != sink.projection_snapshot().unwrap() {
        wrong.push(format!(
            "point {p}: the projection differs from a rebuild from the log"
        ));
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

/// Checks up to `budget` crash states spread over the whole trace (every one when the trace has
/// fewer); returns (states checked, violations).
async fn check(skip_fdatasync: bool, rounds: u64, budget: u64) -> (u64, Vec<String>) {
    let (sim, snapshots, promises) = workload(skip_fdatasync, rounds).await;
    let trace = sim.trace();
    let empty = SimFs::new().disk();
    let total = crash::for_each_crash_state(&empty, &trace, |_, _| ControlFlow::Continue(()));
    let step = (total / budget).max(1);
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
    (picked.len() as u64, violations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_crash_state_of_the_sink_keeps_its_promises() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let rounds = env("DLQ_SINK_CRASH_ROUNDS").unwrap_or(8);
    let budget = env("DLQ_SINK_CRASH_STATES").unwrap_or(u64::MAX);
    let (states, violations) = check(false, rounds, budget).await;
    eprintln!("checked {states} crash states of the sink");
    assert!(states >= budget.min(1_000), "only {states} states");
    assert!(
        violations.is_empty(),
        "{} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// The harness has teeth: with the log's fdatasync skipped, acknowledged events are lost in
/// some crash state (or the whole log cannot be opened), and it says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fdatasync_the_sink_harness_reports_lost_events() {
    let (_, violations) = check(true, 8, 150).await;
    assert!(
        violations
            .iter()
            .any(|v| v.contains("lost") || v.contains("does not open")),
        "no loss reported: {violations:?}"
    );
}
