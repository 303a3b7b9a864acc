//! ENOSPC and EIO at every kind of I/O the segment log does (issue 16): the call fails with a
//! typed error that says what to do, nothing acknowledged is lost, no sequence is reused, and
//! the log works again by itself once the fault clears.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use dlq::sink::test_support::log::harness::Recorder;
use dlq::sink::test_support::log::sim::{OpKind, EIO, ENOSPC};
use dlq::sink::test_support::log::{LogConfig, LogError};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 400,
        ..LogConfig::default()
    }
}

fn event(n: u64) -> Vec<u8> {
    format!(
        "{{\"event\":{n},\"data\":\"{}\"}}",
        "y".repeat((n % 50) as usize)
    )
    .into_bytes()
}

/// Whether `err` is the variant a fault in `kind` must produce.
fn is_for(kind: OpKind, err: &LogError) -> bool {
    matches!(
        (kind, err),
        (OpKind::Create, LogError::Create { .. })
            | (OpKind::Write, LogError::Write { .. })
            | (OpKind::Sync, LogError::Sync { .. })
            | (OpKind::Rename, LogError::Rename { .. })
            | (OpKind::SyncDir, LogError::SyncDir { .. })
            | (OpKind::Remove, LogError::Remove { .. })
    )
}

/// Appends while `kind` fails until the first error, checks it, appends again while the fault
/// lasts (every call fails, none hangs the writer), then clears the fault and appends again.
fn append_through_fault(kind: OpKind, errno: i32) {
    let mut recorder = Recorder::new(config());
    let mut writer = recorder.open().unwrap();
    let mut n = 0;
    for _ in 0..5 {
        n += 1;
        recorder
            .append(&mut writer, &[event(n), event(n + 100)])
            .unwrap();
    }
    recorder.fs().inject(kind, 0, usize::MAX, errno);
    let mut handed_out = writer.next_seq() - 1;
    let mut errors = Vec::new();
    for _ in 0..30 {
        n += 1;
        let before = writer.next_seq();
        match recorder.append(&mut writer, &[event(n)]) {
            Ok(seqs) => assert!(seqs.start >= before),
            Err(err) => errors.push(err),
        }
        handed_out = handed_out.max(writer.next_seq() - 1);
        if errors.len() == 3 {
            break;
        }
    }
    assert_eq!(errors.len(), 3, "{kind:?} never failed an append");
    for err in &errors {
        assert!(is_for(kind, err), "{kind:?} gave {err:?}");
        let text = err.to_string();
        assert!(text.contains("not acknowledged") || text.contains("nothing was acknowledged"));
        assert!(text.contains("next"), "no way forward in: {text}");
        let source = std::error::Error::source(err).expect("the I/O error is kept");
        assert!(source.to_string().contains(&format!("os error {errno}")));
    }
    recorder.fs().clear_faults();
    n += 1;
    let seqs = recorder.append(&mut writer, &[event(n)]).unwrap();
    assert!(seqs.start > handed_out, "sequence {} reused", seqs.start);
    // Everything acknowledged reads back, in this process and after reopening.
    let acked: Vec<u64> = recorder.acknowledged().collect();
    let read: Vec<u64> = writer.records(0).map(|r| r.unwrap().seq).collect();
    assert!(
        acked.iter().all(|s| read.contains(s)),
        "{kind:?}: {acked:?} vs {read:?}"
    );
    drop(writer);
    let mut writer = recorder.open().unwrap();
    let read: Vec<u64> = writer.records(0).map(|r| r.unwrap().seq).collect();
    assert!(
        acked.iter().all(|s| read.contains(s)),
        "{kind:?} after reopen"
    );
    let next = recorder.append(&mut writer, &[event(0)]).unwrap();
    assert!(next.start > handed_out.max(seqs.end - 1));
    // And every crash state of the whole run, faults included, is sound.
    let report = recorder.check(5);
    eprintln!("{kind:?}: {} crash states", report.states);
    assert!(
        report.violations.is_empty(),
        "{kind:?}: {:#?}",
        report.violations
    );
}

#[test]
fn enospc_on_each_kind_of_append_io_fails_cleanly_and_recovers() {
    for kind in [
        OpKind::Write,
        OpKind::Sync,
        OpKind::Create,
        OpKind::Rename,
        OpKind::SyncDir,
    ] {
        append_through_fault(kind, ENOSPC);
    }
}

#[test]
fn eio_on_each_kind_of_append_io_fails_cleanly_and_recovers() {
    for kind in [
        OpKind::Write,
        OpKind::Sync,
        OpKind::Create,
        OpKind::Rename,
        OpKind::SyncDir,
    ] {
        append_through_fault(kind, EIO);
    }
}

#[test]
fn failed_deletion_keeps_the_segment_and_the_next_call_deletes_it() {
    for (kind, errno) in [(OpKind::Remove, EIO), (OpKind::SyncDir, ENOSPC)] {
        let mut recorder = Recorder::new(config());
        let mut writer = recorder.open().unwrap();
        for n in 0..40 {
            recorder.append(&mut writer, &[event(n)]).unwrap();
        }
        let segments = writer.segments().len();
        assert!(segments > 3, "the workload must rotate");
        let through = writer.durable_through() / 2;
        recorder.fs().inject(kind, 0, usize::MAX, errno);
        let err = recorder.remove_through(&mut writer, through).unwrap_err();
        assert!(is_for(kind, &err), "{kind:?} gave {err:?}");
        if kind == OpKind::Remove {
            // Appends still work while deletions fail.
            recorder.append(&mut writer, &[event(99)]).unwrap();
        }
        recorder.fs().clear_faults();
        recorder.remove_through(&mut writer, through).unwrap();
        assert!(writer.segments().len() < segments);
        let first_left = writer.records(0).next().unwrap().unwrap().seq;
        assert!(
            first_left <= through + 1,
            "deleted past {through}: {first_left}"
        );
        let acked: Vec<u64> = recorder.acknowledged().filter(|s| *s > through).collect();
        let read: Vec<u64> = writer.records(0).map(|r| r.unwrap().seq).collect();
        assert!(acked.iter().all(|s| read.contains(s)));
        let report = recorder.check(5);
        assert!(
            report.violations.is_empty(),
            "{kind:?}: {:#?}",
            report.violations
        );
    }
}

#[test]
fn faults_while_opening_fail_the_open_and_a_later_open_succeeds() {
    for kind in [OpKind::Read, OpKind::Sync, OpKind::SyncDir] {
        let mut recorder = Recorder::new(config());
        let mut writer = recorder.open().unwrap();
        for n in 0..10 {
            recorder.append(&mut writer, &[event(n)]).unwrap();
        }
        drop(writer);
        recorder.fs().inject(kind, 0, usize::MAX, EIO);
        let err = recorder.open().unwrap_err();
        assert!(err.to_string().contains("os error 5"), "{kind:?}: {err}");
        recorder.fs().clear_faults();
        let writer = recorder.open().unwrap();
        assert_eq!(writer.records(0).count(), 10);
    }
}

#[test]
fn an_oversized_event_is_refused_and_uses_no_sequence() {
    let mut recorder = Recorder::new(config());
    let mut writer = recorder.open().unwrap();
    let next = writer.next_seq();
    let huge = vec![b'x'; dlq::sink::test_support::log::frame::MAX_PAYLOAD + 1];
    let err = writer.append(&[event(1), huge]).unwrap_err();
    assert!(
        matches!(err, LogError::TooLarge { index: 1, .. }),
        "{err:?}"
    );
    assert_eq!(writer.next_seq(), next);
    assert_eq!(
        recorder.append(&mut writer, &[event(2)]).unwrap(),
        next..next + 1
    );
}
