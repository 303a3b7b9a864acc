//! The real sink with the disk failing under its log: ENOSPC or EIO on a write, an
//! `fdatasync`, a segment's creation, its rename, the directory fsync and a deletion. Each
//! fault makes `append` fail with an error that names it; nothing acknowledged is lost, no
//! sequence is handed out twice, the projection never holds what the log does not, and the
//! sink recovers by itself once the disk does; a restart does not find the failed group. (Every crash state of the log alone is checked
//! in `sink_log_crash.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use dlq::domain::command::Command;
use dlq::sink::faults::LogOp;
use dlq::sink::{LocalSink, LogRetention, Sink, SinkConfig, SinkError};
use dlq_testkit::items::template_item;

const ENOSPC: i32 = 28;
const EIO: i32 = 5;

fn open(dir: &Path, retention: LogRetention) -> LocalSink {
    let mut config = SinkConfig::new(dir);
    config.node_id = Some("n1".into());
    config.segment_bytes = 4096; // a new segment every few events: creates, renames, dir fsyncs
    config.checkpoint_every = Duration::from_secs(3600);
    config.log_retention = retention;
    LocalSink::open(config).unwrap()
}

fn dl(id: &str) -> Command {
    let mut item = template_item();
    (item.job_id, item.item_id) = ("J".to_owned(), id.to_owned());
    Command::DeadLetter {
        topic: "t".into(),
        item: item.into(),
    }
}

fn segments(dir: &Path) -> usize {
    let log = dir.join(dlq::sink::test_support::LOG_DIR);
    std::fs::read_dir(log)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "seg")
        })
        .count()
}

/// (event id, seq) of each acknowledged event.
type Acked = Vec<(String, u64)>;

async fn append_ok(sink: &LocalSink, id: &str, acked: &mut Acked) {
    for event in sink.append(dl(id)).await.unwrap() {
        acked.push((event.event_id, event.seq));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_fault_is_a_clear_error_and_the_sink_recovers_by_itself() {
    let faults = [
        (LogOp::Write, ENOSPC, "No space left on device"),
        (LogOp::Sync, EIO, "Input/output error"),
        (LogOp::Create, ENOSPC, "No space left on device"),
        (LogOp::Rename, EIO, "Input/output error"),
        (LogOp::SyncDir, EIO, "Input/output error"),
    ];
    for (op, errno, text) in faults {
        let dir = tempfile::tempdir().unwrap();
        let sink = open(dir.path(), LogRetention::default());
        let mut acked = Acked::new();
        // Four events: the fourth starts the second segment, so a write or sync fault hits a
        // group in the middle of a segment, behind an acknowledged one.
        for n in 0..4 {
            append_ok(&sink, &format!("before-{n}"), &mut acked).await;
        }
        sink.faults().set_log_fault(Some((op, errno)));
        // A create, rename or directory fsync happens only when a group starts a segment: with
        // 4 KiB segments one does within a few groups.
        let mut failed = None;
        for n in 0..20 {
            let id = format!("during-{n}");
            match sink.append(dl(&id)).await {
                Ok(events) => acked.extend(events.into_iter().map(|e| (e.event_id, e.seq))),
                Err(err) => {
                    failed = Some((id, err));
                    break;
                }
            }
        }
        let (failed_id, err) = failed.unwrap_or_else(|| panic!("{op:?}: no append failed"));
        assert!(
            matches!(err, SinkError::NotDurable { .. }) && err.to_string().contains(text),
            "{op:?}: {err}"
        );
        let named = if op == LogOp::SyncDir {
            "log directory"
        } else {
            ".seg"
        };
        assert!(
            err.to_string().contains(named),
            "{op:?}: names what failed: {err}"
        );
        // The cause is kept: the chain reaches the file system's error.
        let io = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
            .find_map(|e| e.downcast_ref::<std::io::Error>());
        assert_eq!(
            io.and_then(std::io::Error::raw_os_error),
            Some(errno),
            "{op:?}: no io::Error behind {err:?}"
        );
        assert!(
            sink.item("J", &failed_id).unwrap().is_none(),
            "{op:?}: the projection holds an event the log did not acknowledge"
        );
        sink.faults().set_log_fault(None);
        for n in 0..5 {
            append_ok(&sink, &format!("after-{n}"), &mut acked).await;
        }
        let seqs: Vec<u64> = acked.iter().map(|(_, seq)| *seq).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{op:?}: {seqs:?}");
        sink.close().await.unwrap();
        drop(sink);

        let sink = open(dir.path(), LogRetention::default());
        for (id, seq) in &acked {
            let event = sink.event(*seq).unwrap();
            assert_eq!(
                event.map(|e| e.event_id).as_ref(),
                Some(id),
                "{op:?}: {id} lost"
            );
        }
        let logged: Vec<u64> = sink.events_from(1).map(|e| e.unwrap().seq).collect();
        let mut unique = logged.clone();
        unique.dedup();
        assert_eq!(logged, unique, "{op:?}: a sequence is in the log twice");
        // Not even after a failed fdatasync, whose bytes the page cache still showed: the
        // writer cut them off, so a restart cannot publish what a power cut may take away.
        assert_eq!(
            logged.len(),
            acked.len(),
            "{op:?}: the failed group came back"
        );
        assert!(
            sink.item("J", &failed_id).unwrap().is_none(),
            "{op:?}: the failed group came back after a restart"
        );
        assert_eq!(sink.backlog().unwrap().count, logged.len() as u64);
        let live = sink.projection_snapshot().unwrap();
        sink.rebuild_projection().await.unwrap();
        assert_eq!(live, sink.projection_snapshot().unwrap(), "{op:?}");
        sink.close().await.unwrap();
    }
}

/// Deleting done segments fails (EIO on unlink): the sink keeps working and keeps the
/// segments; once the disk works again the next checkpoint deletes them. (The items are
/// resolved first: a segment a live item points into is never deleted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_deletion_keeps_the_segments_until_the_next_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let keep_nothing = LogRetention {
        max_age: Duration::ZERO,
        max_bytes: 0,
    };
    let sink = open(dir.path(), keep_nothing);
    let mut acked = Acked::new();
    for n in 0..12 {
        append_ok(&sink, &format!("i{n}"), &mut acked).await;
    }
    for n in 0..12 {
        let resolve = Command::Remove {
            job_id: "J".into(),
            item_id: format!("i{n}"),
            reason: dlq::domain::event::RemovalReason::Resolved,
            by: None,
        };
        for event in sink.append(resolve).await.unwrap() {
            acked.push((event.event_id, event.seq));
        }
    }
    for (_, seq) in &acked {
        sink.mark_published(*seq).unwrap();
    }
    let before = segments(dir.path());
    assert!(before > 2, "{before} segments");
    sink.faults().set_log_fault(Some((LogOp::Remove, EIO)));
    sink.close().await.unwrap(); // checkpoints: the deletion fails and is logged
    drop(sink);
    assert_eq!(segments(dir.path()), before, "nothing was deleted");

    let sink = open(dir.path(), keep_nothing);
    assert_eq!(
        sink.backlog().unwrap().count,
        0,
        "the publish state was saved"
    );
    append_ok(&sink, "last", &mut acked).await;
    sink.close().await.unwrap();
    assert!(
        segments(dir.path()) < before,
        "done segments are deleted once the disk works"
    );
}
