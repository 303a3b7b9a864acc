//! Crash safety with real processes and real signals.
//!
//! A `dlq demo --loop --print-acked` child emits failures as fast as it can and prints the id of
//! every event once `emit` returned (durable). The test SIGKILLs it mid-stream, many times over
//! the same data directory, with the bus alternately up and down. Afterwards every acknowledged
//! event must be in the log, sequences must have no gaps or reuse, the projection must equal a
//! rebuild from the log, and once the bus is up everything reaches the stream exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_testkit::stream::stream_ids;
use dlq_testkit::{spawn_tied, NatsServer};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const CYCLES: usize = 24;

fn dlq(data_dir: &Path, config: &Path, url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq"));
    cmd.arg("--data-dir")
        .arg(data_dir)
        .arg("--config")
        .arg(config)
        .arg("--nats-url")
        .arg(url);
    cmd
}

/// Runs one child until it acknowledged at least `want` events, SIGKILLs it, and returns every
/// id it printed (including lines still in the pipe when it died).
fn emit_until_killed(data_dir: &Path, config: &Path, url: &str, want: usize) -> Vec<String> {
    let mut cmd = dlq(data_dir, config, url);
    cmd.args(["demo", "--loop", "--print-acked", "--job-id", "crash"])
        .args(["--drain-timeout", "0s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = spawn_tied(cmd).expect("spawn dlq demo");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(id) = line.strip_prefix("ACK ") {
                if tx.send(id.to_owned()).is_err() {
                    break;
                }
            }
        }
    });
    let mut acked = Vec::new();
    while acked.len() < want {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(id) => acked.push(id),
            Err(err) => panic!("child acknowledged only {} events: {err}", acked.len()),
        }
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    acked.extend(rx.try_iter());
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_event_survives_sigkill_and_reaches_the_bus() {
    let mut server = NatsServer::start();
    let work = tempfile::tempdir().unwrap();
    let data_dir = work.path().join("data");
    let config = work.path().join("dlq.yml");
    std::fs::write(
        &config,
        "topics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 300ms\n  reconnect_max_delay: 200ms\n",
    )
    .unwrap();

    let mut acked = Vec::new();
    for cycle in 0..CYCLES {
        let bus_down = cycle % 2 == 1;
        if bus_down {
            server.kill();
        }
        acked.extend(emit_until_killed(
            &data_dir,
            &config,
            &server.url(),
            20 + 5 * cycle,
        ));
        if bus_down {
            server.restart();
        }
    }

    // Every acknowledged event is in the log, under its own sequence.
    let sink = LocalSink::open(SinkConfig::new(&data_dir)).expect("reopen after SIGKILLs");
    let node = sink.node_id().to_owned();
    for id in &acked {
        let seq: u64 = id.rsplit(':').next().unwrap().parse().unwrap();
        let event = sink
            .event(seq)
            .unwrap()
            .unwrap_or_else(|| panic!("{id} lost"));
        assert_eq!(&event.event_id, id);
        assert_eq!(event.node_id, node, "one node id across restarts");
    }
    // Sequences only go up: after a crash they may jump to the reserved floor (a gap), but an
    // id is never handed out twice.
    let logged: Vec<String> = sink.events_from(1).map(|e| e.unwrap().event_id).collect();
    let seqs: Vec<u64> = sink.events_from(1).map(|e| e.unwrap().seq).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "sequence went backwards"
    );
    // Inside an epoch (one open) sequences follow each other; every restart starts a new
    // epoch whose first event names the epoch and sequence logged before it, so a consumer
    // applying the node's events in order knows a jump is not a loss.
    let events: Vec<_> = sink.events_from(1).map(|e| e.unwrap()).collect();
    for pair in events.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if after.epoch == before.epoch {
            assert_eq!(
                after.seq,
                before.seq + 1,
                "gap inside an epoch before {}",
                after.event_id
            );
            assert_eq!(after.prev_seq, None, "{}", after.event_id);
        } else {
            assert_eq!(
                (after.prev_epoch.as_ref(), after.prev_seq),
                (before.epoch.as_ref(), Some(before.seq)),
                "an epoch that does not name what was logged before it: {}",
                after.event_id
            );
        }
    }
    let acked_unique: HashSet<&String> = acked.iter().collect();
    assert_eq!(
        acked_unique.len(),
        acked.len(),
        "an acknowledged id was reused"
    );
    assert!(logged.len() >= acked.len());
    // The projection written alongside the log equals one rebuilt from the log alone.
    let live = sink.projection_snapshot().unwrap();
    sink.rebuild_projection().await.unwrap();
    assert_eq!(live, sink.projection_snapshot().unwrap());
    sink.close().await.unwrap();
    drop(sink);

    // With the bus up, the reconciler publishes the backlog; the stream holds each event once.
    let status = dlq(&data_dir, &config, &server.url())
        .args(["reconcile", "--timeout", "120s"])
        .status()
        .unwrap();
    assert!(status.success(), "dlq reconcile failed: {status}");
    let streamed = stream_ids(&server.url(), "DLQ").await;
    let unique: HashSet<&String> = streamed.iter().collect();
    assert_eq!(
        unique.len(),
        streamed.len(),
        "an event is in the stream twice"
    );
    for id in &acked {
        assert!(
            unique.contains(id),
            "acknowledged event {id} never reached the bus"
        );
    }
    assert_eq!(unique, logged.iter().collect::<HashSet<_>>());
}

/// Bytes in the log's segments (`log/*.seg`).
fn log_bytes(data_dir: &Path) -> u64 {
    std::fs::read_dir(data_dir.join(dlq::sink::test_support::LOG_DIR))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "seg"))
        .map(|path| std::fs::metadata(path).unwrap().len())
        .sum()
}

/// sled's own files in a data directory: everything but the segment log, which is fsynced
/// before every acknowledgement.
fn sled_files(data_dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(data_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap();
            name != dlq::sink::test_support::LOG_DIR
        })
        .collect()
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
}

/// A power cut after a SIGKILL: whatever sled wrote since its last checkpoint was never
/// fsynced and is gone. The test puts sled's files back as they were when the child started
/// (its last checkpoint, with checkpoints an hour apart) and keeps the segment log, which the
/// writer fdatasyncs before it acknowledges a group. The reopened sink must hold every
/// acknowledged event, with a projection equal to a rebuild and every event unpublished.
/// (What a power cut does to the log's own unsynced bytes is checked state by state in
/// `sink_log_crash.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_power_cut_the_log_restores_every_acknowledged_event() {
    let mut server = NatsServer::start();
    let url = server.url();
    server.kill(); // the bus stays down: every event stays in the backlog
    let work = tempfile::tempdir().unwrap();
    let data_dir = work.path().join("data");
    let config = work.path().join("dlq.yml");
    std::fs::write(
        &config,
        "sink:\n  checkpoint_every: 1h\ntopics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 100ms\n  reconnect_max_delay: 200ms\n",
    )
    .unwrap();
    let sink = LocalSink::open(SinkConfig::new(&data_dir)).unwrap(); // node id and layout, flushed
    sink.close().await.unwrap();
    drop(sink);

    let mut acked = Vec::new();
    for (cycle, want) in [50, 400, 1500].into_iter().enumerate() {
        let checkpoint = work.path().join(format!("sled-at-checkpoint-{cycle}"));
        for path in sled_files(&data_dir) {
            copy_tree(&path, &checkpoint.join(path.file_name().unwrap()));
        }
        acked.extend(emit_until_killed(&data_dir, &config, &url, want));
        assert!(log_bytes(&data_dir) > 0, "the groups are in the log");
        for path in sled_files(&data_dir) {
            if path.is_dir() {
                std::fs::remove_dir_all(path).unwrap();
            } else {
                std::fs::remove_file(path).unwrap();
            }
        }
        copy_tree(&checkpoint, &data_dir);

        let sink = LocalSink::open(SinkConfig::new(&data_dir)).expect("reopen after the cut");
        for id in &acked {
            let seq: u64 = id.rsplit(':').next().unwrap().parse().unwrap();
            let event = sink.event(seq).unwrap();
            assert_eq!(event.map(|e| e.event_id).as_ref(), Some(id), "{id} lost");
        }
        let logged = sink.events_from(1).count() as u64;
        assert_eq!(
            sink.backlog().unwrap().count,
            logged,
            "every event unpublished"
        );
        let live = sink.projection_snapshot().unwrap();
        sink.rebuild_projection().await.unwrap();
        assert_eq!(live, sink.projection_snapshot().unwrap());
        sink.close().await.unwrap();
        drop(sink);
    }
}
