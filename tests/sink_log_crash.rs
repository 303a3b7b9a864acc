//! Every crash state of a segment-log workload (issues 16 and 33): the log keeps every
//! acknowledged event, never reuses a sequence and always recovers; and the harness has teeth —
//! with the writer's `fdatasync` or its directory fsync switched off, it reports a loss.
//!
//! The crash model is POSIX's, page by page (`src/sink/log/crash.rs`): unsynced pages persist
//! in any subset, so a crash can leave a hole followed by frames. A small workload is cut at
//! every byte with every subset of pages; the long one samples its tears and, above 4 pages,
//! its subsets (seeded). `DLQ_LOG_CRASH_GROUPS=N` runs a longer workload (default 200 groups),
//! `DLQ_LOG_CRASH_SEED=S` other samples.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ops::ControlFlow;

use dlq::sink::test_support::log::crash::{for_each_crash_state, Disk, Model, Op};
use dlq::sink::test_support::log::harness::{Recorder, Report};
use dlq::sink::test_support::log::sim::{OpKind, SimFs, EIO, ENOSPC};
use dlq::sink::test_support::log::{LogConfig, LogWriter};

/// Small segments, so the workload rotates often; a few pages each, so groups cross pages.
fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 6000,
        ..LogConfig::default()
    }
}

/// A deterministic stream of JSON events of varied sizes, one group in seven with events of
/// 1–3 KiB, so that groups span pages.
struct Events(u64);

impl Events {
    fn group(&mut self) -> Vec<Vec<u8>> {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let count = 1 + (self.0 >> 33) as usize % 3;
        (0..count)
            .map(|i| {
                let len = if (self.0 >> 40).is_multiple_of(7) {
                    1000 + (self.0 >> (20 + i)) as usize % 2000
                } else {
                    (self.0 >> (20 + i)) as usize % 90
                };
                let pad = "x".repeat(len);
                format!(
                    "{{\"event\":{},\"item\":\"{pad}\"}}",
                    self.0 % 1000 + i as u64
                )
                .into_bytes()
            })
            .collect()
    }
}

/// Groups, rotations, a reopen half-way and a deletion every 10 groups.
fn workload(config: LogConfig, groups: usize) -> Recorder {
    let mut recorder = Recorder::new(config);
    let mut events = Events(7);
    let mut writer = recorder.open().unwrap();
    for g in 1..=groups {
        let group = events.group();
        recorder.append(&mut writer, &group).unwrap();
        if g % 10 == 0 {
            let through = writer.durable_through().saturating_sub(20);
            recorder.remove_through(&mut writer, through).unwrap();
        }
        if g == groups / 2 {
            drop(writer);
            writer = recorder.open().unwrap();
        }
    }
    recorder
}

fn groups() -> usize {
    std::env::var("DLQ_LOG_CRASH_GROUPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

/// The sampled model, its seed from `DLQ_LOG_CRASH_SEED` (0 by default).
fn sampled() -> Model {
    let seed = std::env::var("DLQ_LOG_CRASH_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Model {
        seed,
        ..Model::default()
    }
}

fn assert_clean(report: &Report) {
    assert!(
        report.violations.is_empty(),
        "{} violations in {} crash states, first: {:#?}",
        report.violations.len(),
        report.states,
        &report.violations[..report.violations.len().min(5)]
    );
}

#[test]
fn every_crash_state_keeps_acknowledged_events_and_never_reuses_a_sequence() {
    let recorder = workload(config(), groups());
    let model = sampled();
    let report = recorder.check_with(&model, 10);
    eprintln!(
        "crash states checked: {} ({} with a hole and frames after it cut off), seed {}",
        report.states, report.holes, model.seed
    );
    assert_clean(&report);
    assert!(report.states >= 10_000, "only {} states", report.states);
    assert!(report.holes > 0, "no state had a hole followed by frames");
    assert!(recorder.acknowledged().count() > 2 * groups() / 2);
}

#[test]
fn crash_states_after_failed_writes_syncs_and_rotations_are_clean() {
    // One fault per run, in the middle of a workload: a failed sync leaves its bytes doubtful
    // (kept or a hole), a failed write leaves half a group; the writer must abandon those
    // segments and go on above the burned sequences.
    let mut states = 0;
    for kind in [
        OpKind::Sync,
        OpKind::Write,
        OpKind::Create,
        OpKind::Rename,
        OpKind::SyncDir,
    ] {
        let mut recorder = Recorder::new(config());
        let mut events = Events(11);
        let mut writer = recorder.open().unwrap();
        for _ in 0..4 {
            recorder.append(&mut writer, &events.group()).unwrap();
        }
        recorder.fs().inject(kind, 0, 1, ENOSPC);
        // Rotation-time faults need a rotation: append until the injected call failed.
        let failed = (0..20)
            .find(|_| recorder.append(&mut writer, &events.group()).is_err())
            .is_some();
        assert!(failed, "{kind:?} never failed");
        for _ in 0..3 {
            recorder.append(&mut writer, &events.group()).unwrap();
        }
        let report = recorder.check(10);
        states += report.states;
        assert_clean(&report);
    }
    eprintln!("crash states checked: {states}");
}

/// The harness has teeth: run with `config`, it must report a lost acknowledged event.
fn assert_reports_loss(config: LogConfig) {
    let report = workload(config, 12).check(500);
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("lost acknowledged event")),
        "no loss reported: {:?}",
        report.violations
    );
}

#[test]
fn without_fdatasync_the_harness_reports_lost_events() {
    assert_reports_loss(LogConfig {
        unsafe_skip_fdatasync: true,
        ..config()
    });
}

#[test]
fn without_directory_fsync_the_harness_reports_lost_events() {
    assert_reports_loss(LogConfig {
        unsafe_skip_dir_fsync: true,
        ..config()
    });
}

/// A process killed at `point` of `trace` (its unsynced writes still readable), restarted, then
/// a power cut at any later point: every event the restarted writer reported durable survives.
fn kill_then_power_cut(config: &LogConfig, trace: &[Op], point: usize) -> Result<u64, String> {
    let mut disk = Disk::default();
    trace[..point].iter().for_each(|op| disk.apply(op));
    let fs = SimFs::from_disk(disk.clone());
    let (mut writer, _) = LogWriter::open(fs.clone(), config.clone()).unwrap();
    // The restarted writer reports events once `open` returned: after its own operations.
    let opened = fs.trace_len();
    let seen: Vec<(u64, Vec<u8>)> = writer
        .records(0)
        .map(|r| r.map(|r| (r.seq, r.payload)).unwrap())
        .collect();
    writer
        .append(&[b"{\"after\":\"restart\"}".to_vec()])
        .unwrap();
    let mut violation = None;
    let states = for_each_crash_state(&disk, &fs.trace(), |at, files| {
        if at < opened {
            return ControlFlow::Continue(());
        }
        let (writer, _) = LogWriter::open(SimFs::from_files(files), config.clone()).unwrap();
        let now: Vec<(u64, Vec<u8>)> = writer
            .records(0)
            .map(|r| r.map(|r| (r.seq, r.payload)).unwrap())
            .collect();
        if let Some(lost) = seen.iter().find(|event| !now.contains(event)) {
            violation = Some(format!(
                "killed after {point} operations: event {} reported durable after the restart is lost",
                lost.0
            ));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    violation.map_or(Ok(states), Err)
}

#[test]
fn events_a_restarted_writer_reports_durable_survive_a_later_power_cut() {
    let recorder = workload(config(), 12);
    let trace = recorder.fs().trace();
    let mut states = 0;
    for point in 0..=trace.len() {
        states += kill_then_power_cut(&config(), &trace, point).unwrap();
    }
    eprintln!("crash states checked: {states}");
}

/// The trace points at which a process dies after a failed `fdatasync` and before the writer
/// cut the group off its segment: the one window in which a restart still finds the group.
fn between_failed_sync_and_cut(trace: &[Op]) -> Vec<std::ops::RangeInclusive<usize>> {
    let mut windows = Vec::new();
    for (at, op) in trace.iter().enumerate() {
        let after_cut = at > 0 && matches!(trace[at - 1], Op::Cut { .. });
        if let (Op::FailedSync { ino }, false) = (op, after_cut) {
            let cut = trace[at..]
                .iter()
                .position(|later| matches!(later, Op::Cut { ino: cut, .. } if cut == ino))
                .map(|offset| at + offset)
                .unwrap_or_else(|| panic!("the failed sync at {at} is never followed by a cut"));
            windows.push(at + 1..=cut);
        }
    }
    windows
}

#[test]
fn events_of_a_failed_sync_are_not_found_by_a_restart() {
    // A failed fdatasync leaves the group readable in the page cache while the disk may lack
    // it: a restarted process must not find it (and publish it) if a later power cut can take
    // it away. Kill the process at every point of a workload with failed syncs and failed cuts,
    // restart, then cut the power at every later point.
    let mut recorder = Recorder::new(config());
    let mut events = Events(23);
    let mut writer = recorder.open().unwrap();
    for round in 0..3 {
        for _ in 0..3 {
            recorder.append(&mut writer, &events.group()).unwrap();
        }
        // Round 0: the group's sync fails; round 1: the cut's sync fails too, twice (the next
        // group fails while it cannot cut); round 2: the group's write fails half-way.
        let (kind, times) = [(OpKind::Sync, 1), (OpKind::Sync, 3), (OpKind::Write, 1)][round];
        recorder.fs().inject(kind, 0, times, ENOSPC);
        assert!(recorder.append(&mut writer, &events.group()).is_err());
        let next = recorder.append(&mut writer, &events.group());
        assert_eq!(next.is_err(), times == 3, "round {round}: {next:?}");
        recorder.fs().clear_faults();
    }
    for _ in 0..3 {
        recorder.append(&mut writer, &events.group()).unwrap();
    }
    let trace = recorder.fs().trace();
    let windows = between_failed_sync_and_cut(&trace);
    assert_eq!(windows.len(), 2, "{windows:?}");
    let mut states = 0;
    for point in (0..=trace.len()).filter(|p| !windows.iter().any(|w| w.contains(p))) {
        states += kill_then_power_cut(&config(), &trace, point).unwrap();
    }
    eprintln!("crash states checked: {states}");
}

#[test]
fn a_cut_not_yet_synced_may_be_lost_in_a_crash() {
    let mut disk = Disk::default();
    let ops = [
        Op::Create {
            name: "f".into(),
            ino: 0,
        },
        Op::SyncDir,
        Op::Write {
            ino: 0,
            at: 0,
            bytes: b"durable".to_vec(),
        },
        Op::SyncData { ino: 0 },
        Op::Write {
            ino: 0,
            at: 7,
            bytes: b"+failed".to_vec(),
        },
        Op::FailedSync { ino: 0 },
        Op::Cut { ino: 0, len: 7 },
    ];
    ops.iter().for_each(|op| disk.apply(op));
    let contents = |disk: &Disk| -> std::collections::BTreeSet<Vec<u8>> {
        disk.crash_states()
            .into_iter()
            .map(|files| files["f"].clone())
            .collect()
    };
    let before_sync = contents(&disk);
    assert!(
        before_sync.contains(b"durable".as_slice()),
        "{before_sync:?}"
    );
    assert!(
        before_sync.contains(b"durable+failed".as_slice()),
        "{before_sync:?}"
    );
    assert!(
        before_sync.contains(b"durable\0\0\0\0\0\0\0".as_slice()),
        "{before_sync:?}"
    );
    disk.apply(&Op::SyncData { ino: 0 });
    assert_eq!(contents(&disk), [b"durable".to_vec()].into());
}

/// An event of about `len` bytes.
fn sized(n: usize, len: usize) -> Vec<u8> {
    format!("{{\"n\":{n},\"pad\":\"{}\"}}", "x".repeat(len)).into_bytes()
}

/// A few frames: a group filling most of the first page, a group across the page boundary
/// (its last frame wholly in the second page, so that page can persist while the first reads
/// as zeros), a group whose `fdatasync` fails (doubtful page by page, then cut off; its last
/// frame wholly in the third page), a new segment, a reopen and one more group.
fn small_workload(config: LogConfig) -> Recorder {
    let syncs = !config.unsafe_skip_fdatasync;
    let mut recorder = Recorder::new(config);
    let mut writer = recorder.open().unwrap();
    recorder
        .append(&mut writer, &[sized(1, 1500), sized(2, 1500)])
        .unwrap();
    recorder
        .append(&mut writer, &[sized(3, 700), sized(4, 700), sized(5, 300)])
        .unwrap();
    recorder.fs().inject(OpKind::Sync, 0, 1, EIO);
    let failed = recorder.append(
        &mut writer,
        &[sized(6, 1700), sized(7, 1700), sized(8, 300)],
    );
    assert_eq!(failed.is_err(), syncs, "{failed:?}");
    recorder.fs().clear_faults();
    recorder.append(&mut writer, &[sized(9, 300)]).unwrap();
    drop(writer);
    let mut writer = recorder.open().unwrap();
    recorder
        .append(&mut writer, &[sized(10, 100), sized(11, 100)])
        .unwrap();
    recorder
}

#[test]
fn a_few_frames_cut_at_every_byte_with_every_subset_of_pages_keep_their_promises() {
    let recorder = small_workload(LogConfig::default());
    let report = recorder.check_with(&Model::exhaustive(), 10);
    eprintln!(
        "crash states checked: {} ({} with a hole and frames after it cut off)",
        report.states, report.holes
    );
    assert_clean(&report);
    assert!(report.states >= 10_000, "only {} states", report.states);
    assert!(report.holes > 0, "no state had a hole followed by frames");
}

#[test]
fn without_fdatasync_the_exhaustive_model_reports_lost_events() {
    let recorder = small_workload(LogConfig {
        unsafe_skip_fdatasync: true,
        ..LogConfig::default()
    });
    let report = recorder.check_with(&Model::exhaustive(), 500);
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("lost acknowledged event")),
        "no loss reported: {:?}",
        report.violations
    );
}

/// A power cut kept the second page of the group it interrupted and not the first: the newest
/// segment ends in zeros, then a frame. Opening cuts that off; when the cut fails, opening
/// fails with what to do, and following it (open again once the disk works) loses nothing.
#[test]
fn a_failed_cut_of_a_hole_fails_the_open_and_opening_again_loses_nothing() {
    use dlq::sink::test_support::log::{frame, segment, LogError};
    let mut bytes = segment::MAGIC.to_vec();
    frame::encode(1, b"{\"n\":1}", &mut bytes);
    frame::encode(2, b"{\"n\":2}", &mut bytes);
    let durable = bytes.len();
    frame::encode(3, &vec![b'x'; 5000], &mut bytes);
    frame::encode(4, b"{\"n\":4}", &mut bytes);
    bytes[durable..4096].fill(0);
    let files = [(segment::name(1), bytes)].into_iter().collect();
    let fs = SimFs::from_files(&files);

    fs.inject(OpKind::Write, 0, 1, EIO);
    let err = LogWriter::open(fs.clone(), config()).unwrap_err();
    assert!(
        matches!(&err, LogError::CutTail { offset, .. } if *offset == durable),
        "{err:?}"
    );
    assert!(err.to_string().contains("open again"), "{err}");

    let (mut writer, recovery) = LogWriter::open(fs.clone(), config()).unwrap();
    assert_eq!(recovery.cut, vec![(segment::name(1), durable)]);
    let read = |writer: &LogWriter<SimFs>| -> Vec<u64> {
        writer.records(0).map(|r| r.unwrap().seq).collect()
    };
    assert_eq!(read(&writer), vec![1, 2]);
    let next = writer.append(&[b"{\"n\":5}".to_vec()]).unwrap();
    assert!(next.start > 2, "{next:?}");
    drop(writer);
    let (writer, _) = LogWriter::open(fs, config()).unwrap();
    assert_eq!(read(&writer), vec![1, 2, next.start]);
}

/// The model itself: of an unsynced write across a page boundary, a crash may keep the later
/// page while the earlier reads as zeros, and (every byte torn) any prefix of it; a sampled
/// model draws the same subsets for the same seed and others for another.
#[test]
fn unsynced_pages_persist_in_any_subset_and_samples_follow_the_seed() {
    use dlq::sink::test_support::log::crash::PAGE;
    use std::collections::BTreeSet;
    use std::hash::{DefaultHasher, Hash, Hasher};

    let durable: Vec<u8> = vec![b'd'; PAGE - 50];
    let write: Vec<u8> = (0..100u8).map(|i| i + 1).collect();
    let mut disk = Disk::default();
    for op in [
        Op::Create {
            name: "f".into(),
            ino: 0,
        },
        Op::SyncDir,
        Op::Write {
            ino: 0,
            at: 0,
            bytes: durable.clone(),
        },
        Op::SyncData { ino: 0 },
        Op::Write {
            ino: 0,
            at: durable.len(),
            bytes: write.clone(),
        },
    ] {
        disk.apply(&op);
    }
    let mut all = BTreeSet::new();
    let _ = disk.for_each_state(&Model::exhaustive(), 0, &mut |files| {
        all.insert(files["f"].clone());
        ControlFlow::Continue(())
    });
    let mut hole = durable.clone();
    hole.extend_from_slice(&[0; 50]);
    hole.extend_from_slice(&write[50..]);
    assert!(all.contains(&hole), "the second page kept, the first not");
    for cut in 0..=write.len() {
        let mut torn = durable.clone();
        torn.extend_from_slice(&write[..cut]);
        assert!(all.contains(&torn), "torn at byte {cut}");
    }

    // Five pages written, none synced: above four pages, subsets are drawn from the seed.
    let mut disk = Disk::default();
    disk.apply(&Op::Create {
        name: "f".into(),
        ino: 0,
    });
    disk.apply(&Op::Write {
        ino: 0,
        at: 0,
        bytes: vec![7; 4 * PAGE + 10],
    });
    let sampled = |seed: u64| {
        let mut hashes = BTreeSet::new();
        let model = Model {
            samples: 4,
            ..Model::default()
        };
        let _ = disk.for_each_state(&model, seed, &mut |files| {
            let mut hasher = DefaultHasher::new();
            files.get("f").hash(&mut hasher);
            hashes.insert(hasher.finish());
            ControlFlow::Continue(())
        });
        hashes
    };
    assert_eq!(sampled(1), sampled(1));
    assert_ne!(sampled(1), sampled(2));
}
