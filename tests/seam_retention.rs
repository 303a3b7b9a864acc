//! Where retention meets the rest, through the real `dlq` binary (issue 33, items 1 and 2):
//! `dlq rebuild` with retention on keeps every item; a failed write followed by retention
//! leaves a directory that opens; every recovery hint an error prints, followed, keeps what it
//! says it keeps. And a CLI whose stdout reader went away ends quietly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use dlq::sink::test_support::item_key;
use dlq_testkit::cli::Env;
use dlq_testkit::fail_sync::fail_segment_fdatasync;
use dlq_testkit::nats::NatsServer;
use dlq_testkit::{poll_until, DEAD_BUS_URL};
use serde_json::Value;

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// Runs `args` with stdout a pipe whose reading end is already closed: the first write fails.
fn run_into_closed_pipe(env: &Env, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut cmd = env.command(args);
    cmd.stdout(writer).stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    // The command holds the only writer now.
    drop(cmd);
    child.wait_with_output().unwrap()
}

/// `dlq status | head -3` and `dlq list | head`: `println!` (status) and a buffered writer
/// (list, stats) both meet the closed pipe; each ends with 141 and says nothing.
#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 3);
    for args in [
        &["--format", "table", "status"][..],
        &["--format", "json", "status"],
        &["--format", "table", "list"],
        &["--format", "table", "stats"],
    ] {
        let out = run_into_closed_pipe(&env, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "dlq {args:?}: {stderr}");
        assert!(stderr.is_empty(), "dlq {args:?} printed: {stderr}");
    }
    // Output that is read still arrives whole.
    assert_eq!(env.json(&["status"])["items"], 3);
}

/// `dlq run … 2>&1 | head -2`: the job's progress lines on stderr meet the closed pipe; the
/// command ends with 141 instead of a panic's 101 (red before: 101, the panic message lost).
#[test]
fn a_closed_stderr_ends_a_job_quietly() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    let workflows = env.data.with_extension("workflows");
    std::fs::create_dir_all(&workflows).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/workflows");
    for name in ["process-items.yml", "items.json"] {
        std::fs::copy(source.join(name), workflows.join(name)).unwrap();
    }
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let workflow = workflows.join("process-items.yml");
    let mut cmd = env.command(&["run", workflow.to_str().unwrap()]);
    cmd.stdout(writer.try_clone().unwrap()).stderr(writer);
    let child = cmd.spawn().unwrap();
    drop(cmd);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141), "dlq run into a closed pipe");
}

/// A data directory whose config adds `sink` to [`Env::new`]'s.
fn env_with_sink(url: &str, sink: &str) -> Env {
    let env = Env::new(DLQ, url);
    let config = env.data.with_extension("yml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("sink:\n");
    text.push_str(sink);
    std::fs::write(config, text).unwrap();
    env
}

/// `dlq demo` for `job`, waiting for the bus (the events get published, so retention may
/// delete their segments).
fn demo_published(env: &Env, job: &str, count: u32) {
    let count = count.to_string();
    let out = env.json(&["demo", "--count", &count, "--job-id", job]);
    assert_eq!(out["emitted"], count.parse::<u64>().unwrap(), "{out}");
}

/// The path of the log segment starting at `first`.
fn segment(env: &Env, first: u64) -> PathBuf {
    env.data.join("log").join(format!("{first:020}.seg"))
}

/// Waits until the segment starting at `first` is older than `age` (by its modification time,
/// as retention measures it), or gone already (a command's checkpoint found it aged).
fn wait_until_older(env: &Env, first: u64, age: Duration) {
    let path = segment(env, first);
    poll_until(Duration::from_secs(30), || match std::fs::metadata(&path) {
        Ok(meta) => {
            let modified = meta.modified().unwrap();
            (modified.elapsed().unwrap_or_default() > age).then_some(())
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Some(()),
        Err(err) => panic!("{}: {err}", path.display()),
    })
    .expect("the segment ages");
}

/// Every item as `dlq list` shows it, whole, in key order.
fn all_items(env: &Env) -> Vec<Value> {
    let list = env.json(&["list", "--limit", "1000"]);
    let mut items = list["items"].as_array().unwrap().clone();
    items.sort_by_key(|item| format!("{}/{}", item["job_id"], item["item_id"]));
    items
}

/// `dlq verify` reads the stream into a consumer and compares it with the sink: nothing
/// missing, nothing extra.
fn assert_verified(env: &Env) {
    let verify = env.json(&["verify"]);
    assert_eq!(verify["missing"], 0, "{verify}");
    assert_eq!(verify["extra"], 0, "{verify}");
}

/// Issue 33, item 1, as reported: retention 2 s, five items in each of two jobs, published,
/// and `dlq rebuild` after the first segment aged. The rebuild's own checkpoint deletes that
/// segment (keeping j1's items whole in sled); the rebuild then kept only the 5 items the log
/// still held and exited 0. Now it keeps all 10, equal to before, and again when repeated.
#[test]
fn rebuild_after_retention_keeps_every_item() {
    let server = NatsServer::start();
    let env = env_with_sink(&server.url(), "  log_retention_age: 2s\n");
    demo_published(&env, "j1", 5);
    demo_published(&env, "j2", 5);
    // Read before the segment ages: the first command after that deletes it at its close
    // (on a machine slow enough, this one already; the rebuild must keep the items either way).
    let before = all_items(&env);
    assert_eq!(before.len(), 10);
    wait_until_older(&env, 1, Duration::from_secs(2));

    let rebuilt = env.json(&["rebuild"]);
    assert!(!segment(&env, 1).exists(), "retention deleted j1's segment");
    assert_eq!(env.json(&["status"])["items"], 10, "{rebuilt}");
    assert_eq!(all_items(&env), before);
    assert_verified(&env);
    // What an operator tries next: rebuild again, then compare.
    env.json(&["rebuild"]);
    assert_eq!(all_items(&env), before);
    assert_eq!(env.json(&["status"])["items"], 10);
    assert_verified(&env);
}

/// The items kept whole change after their segment is gone (another failure of each j1 item,
/// applied to the whole item; its events are still in the log): a rebuild keeps them and
/// applies none of those events a second time (the failure counts stay as they were).
#[test]
fn rebuild_applies_no_event_twice_to_an_item_kept_whole() {
    let server = NatsServer::start();
    let env = env_with_sink(&server.url(), "  log_retention_age: 1s\n");
    demo_published(&env, "j1", 5);
    demo_published(&env, "j2", 5);
    wait_until_older(&env, 1, Duration::from_secs(1));
    // Fails j1's items again; the checkpoint at its end deletes the aged segment.
    demo_published(&env, "j1", 5);
    assert!(
        !segment(&env, 1).exists(),
        "retention deleted j1's first segment"
    );
    let before = all_items(&env);
    assert_eq!(before.len(), 10);
    // j1's items (first in key order) carry the second failure, j2's do not.
    let count = |at: usize| before[at]["failure_count"].as_u64().unwrap();
    assert!(count(0) > count(9), "{:?}", before[0]);

    let out = env.run(&["rebuild"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(all_items(&env), before);
    assert_verified(&env);
}

/// Zero retention, five items published, then one more whose first segment `fdatasync` fails
/// (`fail_sync`): the failed group is cut back to the header of a fresh segment, the newest.
fn five_items_then_a_failed_write() -> (NatsServer, Env) {
    let server = NatsServer::start();
    let env = env_with_sink(
        &server.url(),
        "  log_retention_age: 0s\n  log_retention_mb: 0\n",
    );
    demo_published(&env, "j1", 5);
    let mut failing = env.command(&["demo", "--count", "1", "--job-id", "j2"]);
    // The first `fdatasync` is the open's of the existing segment, the second the group's.
    fail_segment_fdatasync(&mut failing, &[2]);
    let out = failing.output().unwrap();
    let demo: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(demo["failed"], 1, "{demo}");
    (server, env)
}

/// After it, the directory opens with its 5 items, rebuilds to the same, and takes new items.
fn assert_opens_rebuilds_and_grows(env: &Env) {
    let status = env.run(&["status"]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let before = all_items(env);
    assert_eq!(before.len(), 5);
    env.json(&["rebuild"]);
    assert_eq!(all_items(env), before);
    demo_published(env, "j3", 2);
    assert_eq!(env.json(&["status"])["items"], 7);
    env.json(&["rebuild"]);
    assert_eq!(env.json(&["status"])["items"], 7);
}

/// Issue 33, item 2: after a failed write the newest segment is empty, and zero retention
/// deleted the older one holding every event; opening looked for the newest event only in
/// segments holding one and refused for good ("the projection holds events up to sequence 5
/// but the log only up to 0"). Now retention keeps the newest segment holding an event, so the
/// directory opens, and the next epoch names that event as its predecessor (it named nothing).
#[tokio::test]
async fn a_failed_write_then_retention_leaves_a_directory_that_opens() {
    let (_server, env) = five_items_then_a_failed_write();
    assert!(segment(&env, 1).exists(), "the last event's segment stays");
    let last = env.events().await.pop().unwrap();
    assert_opens_rebuilds_and_grows(&env);
    let events = env.events().await;
    let first_new = events.iter().find(|e| e.job_id == "j3").unwrap();
    assert_eq!(first_new.prev_seq, Some(last.seq), "{first_new:?}");
    assert_eq!(first_new.prev_epoch, last.epoch, "{first_new:?}");
}

/// The same directory as an older dlq left it: its retention deleted the segment holding
/// every event. Opening reads how far the log went from the empty newest segment's name, so
/// the directory opens (red before: the open error above), rebuilds and grows.
#[test]
fn a_directory_left_so_by_an_older_dlq_opens() {
    let (_server, env) = five_items_then_a_failed_write();
    std::fs::remove_file(segment(&env, 1)).unwrap();
    assert_opens_rebuilds_and_grows(&env);
}

/// sled's files in a data directory, as the recovery hints name them: `db`, `conf`, `blobs/`
/// and every `snap.*` file.
fn sled_files(data: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(data)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            ["db", "conf", "blobs"].contains(&name.as_ref()) || name.starts_with("snap.")
        })
        .collect()
}

/// Follows "move sled's files aside (db, conf, blobs/ and every snap.* file)".
fn move_sled_files_aside(env: &Env, into: &str) {
    let aside = env.path(into);
    std::fs::create_dir(&aside).unwrap();
    let files = sled_files(&env.data);
    assert!(files.iter().any(|f| f.ends_with("db")), "{files:?}");
    for file in files {
        std::fs::rename(&file, aside.join(file.file_name().unwrap())).unwrap();
    }
}

/// The stderr of a command that must fail.
fn refused(env: &Env, args: &[&str]) -> String {
    let out = env.run(args);
    assert!(!out.status.success(), "dlq {args:?} opened");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The hint of "the projection holds events up to sequence N but the log only up to M" (an
/// older copy of log/ put back), followed both ways: the right log/ put back opens with every
/// item; sled's files moved aside (every one it names: `snap.*` left behind made the next open
/// fail with "Read corrupted data") opens with exactly the older log's items, under the same
/// node id.
#[test]
fn the_hints_of_a_log_behind_its_projection_work_when_followed() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 3);
    let node = env.json(&["status"])["node_id"].clone();
    let (log, older, newer) = (
        env.data.join("log"),
        env.path("log.older"),
        env.path("log.newer"),
    );
    copy_dir(&log, &older);
    env.demo("j2", 3);
    let all = all_items(&env);
    std::fs::rename(&log, &newer).unwrap();
    copy_dir(&older, &log);

    let message = refused(&env, &["status"]);
    assert!(message.contains("but the log only up to"), "{message}");
    assert!(
        message.contains("db, conf, blobs/ and every snap.* file"),
        "{message}"
    );
    // Put back the log/ that belongs to the database: everything is there.
    std::fs::remove_dir_all(&log).unwrap();
    std::fs::rename(&newer, &log).unwrap();
    assert_eq!(all_items(&env), all);

    // Or keep only what the older log/ holds.
    std::fs::remove_dir_all(&log).unwrap();
    copy_dir(&older, &log);
    refused(&env, &["status"]);
    move_sled_files_aside(&env, "sled.aside");
    let status = env.json(&["status"]);
    assert_eq!(status["node_id"], node, "{status}");
    let kept: Vec<Value> = all
        .iter()
        .filter(|item| item["job_id"] == "j1")
        .cloned()
        .collect();
    assert_eq!(all_items(&env), kept);
    // Its events (j1's three dead-letters, stored by demo without a publish attempt while the
    // bus is down) are published again: duplicates the stream and consumers drop by id.
    assert_eq!(status["unpublished"], 3, "{status}");
}

/// A damaged sled database ("Read corrupted data", here its `conf`) is refused with the
/// recovery hint; followed (sled's files moved aside, log/ kept), the next open has every item
/// back, under the same node id, and every event to publish again. Before, the hint said to
/// move the whole directory aside and start empty: the unpublished events went with it.
#[test]
fn the_hint_of_a_damaged_database_keeps_every_logged_item() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 3);
    env.demo("j2", 2);
    let before = env.json(&["status"]);
    let all = all_items(&env);
    std::fs::write(env.data.join("conf"), "not a sled config").unwrap();

    let message = refused(&env, &["status"]);
    assert!(message.contains("Keep log/"), "{message}");
    move_sled_files_aside(&env, "sled.damaged");
    let status = env.json(&["status"]);
    assert_eq!(status["node_id"], before["node_id"], "{status}");
    assert_eq!(status["unpublished"], before["unpublished"], "{status}");
    assert_eq!(all_items(&env), all);
}

/// `SinkError::Corrupt` says "run `dlq rebuild`": with retention on (items kept whole in sled,
/// their segments deleted), a damaged item record is made again and nothing else is lost.
#[test]
fn the_corrupt_record_hint_rebuilds_without_losing_items_kept_whole() {
    let server = NatsServer::start();
    let env = env_with_sink(&server.url(), "  log_retention_age: 1s\n");
    demo_published(&env, "j1", 5);
    wait_until_older(&env, 1, Duration::from_secs(1));
    // Its close deletes j1's segment, keeping j1's items whole.
    demo_published(&env, "j2", 3);
    assert!(!segment(&env, 1).exists());
    let all = all_items(&env);
    {
        let db = dlq_testkit::sled_db::open(&env.data);
        db.insert(item_key("j2", "item-1"), &b"\x07damaged"[..])
            .unwrap();
        db.flush().unwrap();
    }
    let out = env.run(&["list"]);
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(message.contains("run `dlq rebuild`"), "{message}");

    env.json(&["rebuild"]);
    assert_eq!(all_items(&env), all);
    assert_verified(&env);
}

/// Copies a directory of files.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

/// A log segment damaged in the middle (a bad frame followed by intact ones: no crash leaves
/// this) is refused with the file, the offset and what to do; followed ("copy the file aside
/// and truncate it to N bytes to keep what precedes the damage"), the directory opens, the
/// items whose events are gone are refused by name with "run `dlq rebuild`", and the rebuild
/// keeps exactly what the log still holds: the events before the damage and every later
/// segment.
#[test]
fn the_hint_of_a_damaged_segment_keeps_what_precedes_the_damage() {
    let env = Env::new(DLQ, DEAD_BUS_URL);
    env.demo("j1", 3);
    env.demo("j2", 3);
    let all = all_items(&env);
    let first = segment(&env, 1);
    let mut bytes = std::fs::read(&first).unwrap();
    // The second frame: after the 8-byte header and the first frame (16 bytes + payload).
    let len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let second = 8 + 16 + len;
    bytes[second + 20] ^= 0x55;
    std::fs::write(&first, &bytes).unwrap();
    // Without its sidecar (a segment a crash ended) the open scans it and finds the damage.
    std::fs::remove_file(first.with_extension("idx")).unwrap();

    let message = refused(&env, &["status"]);
    let truncate = format!("truncate it to {second} bytes");
    assert!(message.contains(&truncate), "{message}");
    std::fs::copy(&first, env.path("segment.damaged")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap()
        .set_len(second as u64)
        .unwrap();

    assert!(env.run(&["status"]).status.success());
    let listed = env.run(&["list"]);
    let message = String::from_utf8_lossy(&listed.stderr);
    assert!(message.contains("run `dlq rebuild`"), "{message}");
    env.json(&["rebuild"]);
    // The first event of the segment (j1/item-0's) and the second demo's segment are kept.
    let kept: Vec<Value> = all
        .iter()
        .filter(|item| item["job_id"] == "j2" || item["item_id"] == "item-0")
        .cloned()
        .collect();
    assert_eq!(all_items(&env), kept);
}
