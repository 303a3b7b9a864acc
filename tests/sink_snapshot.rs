//! sled writes its snapshot only while opening, so the first open after a process that wrote
//! replays all it wrote. `refresh_snapshot` (and `dlq generate`, `dlq run` and `dlq serve`,
//! which call it at their end) leaves a current snapshot: the next open has nothing to replay
//! and keeps the snapshot as it found it. Real sled on disk, the real `dlq` binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command as Process, Stdio};
use std::time::Duration;

use dlq::domain::command::Command;
use dlq::sink::{refresh_snapshot, LocalSink, Sink, SinkConfig};
use dlq_testkit::cli::Env;
use dlq_testkit::flow::{self, counts, Flow};
use dlq_testkit::items::template_item;
use dlq_testkit::serve::FAIL_UNTIL_FIXED;
use dlq_testkit::{free_port, http_get, poll_until, spawn_tied, DEAD_BUS_URL};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;

const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// The names of sled's snapshot files (`snap.<stable log offset>`), sorted.
fn snapshots(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("snap."))
        .collect();
    names.sort();
    names
}

fn config(dir: &Path) -> SinkConfig {
    let mut config = SinkConfig::new(dir);
    config.node_id = Some("n1".into());
    config
}

/// What the next command does first: open the sink (sled writes its snapshot here), close it.
async fn next_open(config: SinkConfig) {
    LocalSink::open(config).unwrap().close().await.unwrap();
}

/// Asserts that the first open of `data` after `command` exited keeps sled's snapshot as the
/// command left it: there was nothing to replay.
async fn assert_snapshot_current(data: &Path, command: &str) {
    let left = snapshots(data);
    next_open(SinkConfig::new(data)).await;
    assert_eq!(
        snapshots(data),
        left,
        "the first open after `{command}` had to replay what it wrote"
    );
}

async fn write_items(dir: &Path, n: usize) {
    let sink = LocalSink::open(config(dir)).unwrap();
    for i in 0..n {
        let mut item = template_item();
        (item.job_id, item.item_id) = ("J".to_owned(), format!("item-{i}"));
        let command = Command::DeadLetter {
            topic: "t".into(),
            item: item.into(),
        };
        sink.append(command).await.unwrap();
    }
    sink.close().await.unwrap();
}

#[tokio::test]
async fn after_a_refresh_the_next_open_has_nothing_to_replay() {
    let dir = tempfile::tempdir().unwrap();
    write_items(dir.path(), 300).await;
    refresh_snapshot(&config(dir.path())).unwrap();
    let refreshed = snapshots(dir.path());
    next_open(config(dir.path())).await;
    assert_eq!(
        snapshots(dir.path()),
        refreshed,
        "the open after the refresh advanced sled's snapshot: it had to replay the writes"
    );
}

#[tokio::test]
async fn without_a_refresh_the_next_open_replays_the_writes() {
    // The check above can fail: an open after writing advances the snapshot.
    let dir = tempfile::tempdir().unwrap();
    write_items(dir.path(), 300).await;
    let before = snapshots(dir.path());
    next_open(config(dir.path())).await;
    assert_ne!(snapshots(dir.path()), before);
}

#[test]
fn a_directory_without_a_database_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-there");
    refresh_snapshot(&config(&missing)).unwrap();
    assert!(!missing.exists(), "the refresh created a data directory");
}

#[tokio::test]
async fn dlq_generate_leaves_a_current_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = Process::new(DLQ)
        .args(["--data-dir"])
        .arg(&data)
        .args([
            "--nats-url",
            "nats://127.0.0.1:1",
            "generate",
            "--items",
            "2000",
            "--jobs",
            "4",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "dlq generate failed: {out:?}");
    assert_snapshot_current(&data, "dlq generate").await;
}

/// Runs job `j` of `n` items with the real `dlq run`, the bus down: every item fails its one
/// attempt, so the job dead-letters all of them.
fn dead_letter_job(n: u64) -> Flow {
    let flow = Flow::new(DLQ, DEAD_BUS_URL);
    let items: Vec<_> = (0..n)
        .map(|n| json!({"id": format!("item-{n}"), "msg": "exploded"}))
        .collect();
    flow.items(&items);
    let workflow = flow.write("flow.yml", FAIL_UNTIL_FIXED);
    let out = flow.env.run(&[
        "run",
        workflow.to_str().unwrap(),
        "--job-id",
        "j",
        "--progress",
        "quiet",
        "--drain-timeout",
        "0s",
    ]);
    let (code, report) = flow::report(&out);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(counts(&report), (0, n, 0, 0));
    flow
}

#[tokio::test]
async fn dlq_run_leaves_a_current_snapshot() {
    let flow = dead_letter_job(20);
    assert_snapshot_current(&flow.env.data, "dlq run").await;
}

#[tokio::test]
async fn dlq_retry_leaves_a_current_snapshot() {
    let flow = dead_letter_job(10);
    // Every item fails again: the retry writes a failure for each.
    let out = flow
        .env
        .run(&["retry", "j", "--progress", "quiet", "--drain-timeout", "0s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("no retry report ({err}): {stderr}"));
    assert_eq!(report["failed_again"], 10, "{report}\n{stderr}");
    assert_snapshot_current(&flow.env.data, "dlq retry").await;
}

#[tokio::test]
async fn dlq_serve_stopped_with_sigterm_leaves_a_current_snapshot() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j", 20);
    let port = free_port(0);
    let listen = format!("127.0.0.1:{port}");
    let log = env.path("serve.log");
    let mut cmd = env.command(&["serve", "--listen", &listen]);
    cmd.env_remove("DLQ_API_TOKEN")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut server = spawn_tied(cmd).unwrap();
    let log = || std::fs::read_to_string(&log).unwrap_or_default();
    let up = poll_until(Duration::from_secs(60), || {
        http_get(port, "/healthz").filter(|(status, _)| *status == 200)
    });
    assert!(up.is_some(), "dlq serve never answered: {}", log());
    // The server writes (the removals), through a connection that held its state.
    let cleared = env.json(&["clear", "j", "--yes", "--drain-timeout", "0s"]);
    assert_eq!(cleared["removed"], 20, "{}", log());
    kill(Pid::from_raw(server.id() as i32), Signal::SIGTERM).unwrap();
    let status = server.wait().unwrap();
    assert!(status.success(), "dlq serve exited {status}: {}", log());
    assert_snapshot_current(&env.data, "dlq serve").await;
}
