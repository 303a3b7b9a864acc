//! Event ids are never reused when a node's data directory is replaced (the README's recovery
//! advice: move it aside, start empty) or restored from an older copy (a backup, a VM
//! snapshot): the stream and consumers keep every event of the new incarnation, inside the
//! stream's duplicate window (where JetStream would drop a reused id) and beyond it (where
//! consumers would drop a reused sequence), and count nothing twice.
//!
//! Real nats-server, the real `dlq` binary, real sled directories moved and copied on disk.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use dlq_testkit::NatsServer;
use serde_json::{json, Value};

/// The `dlq` binary under test.
const DLQ: &str = env!("CARGO_BIN_EXE_dlq");

/// What happens to the node's data directory between its runs.
#[derive(Debug, Clone, Copy)]
enum Incident {
    /// `mv data data.damaged`, then the node starts on an empty directory.
    Replaced,
    /// A copy taken after the first run is put back after the second.
    RestoredOlderCopy,
}

/// One node (`sched-1`) with its data directory and config file in a temporary directory.
struct Node {
    work: tempfile::TempDir,
    data: PathBuf,
    url: String,
}

impl Node {
    fn new(url: &str, duplicate_window: &str) -> Node {
        let work = tempfile::tempdir().unwrap();
        let data = work.path().join("data");
        std::fs::write(
            data.with_extension("yml"),
            format!(
                "topics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 2s\n  duplicate_window: {duplicate_window}\n"
            ),
        )
        .unwrap();
        Node {
            work,
            data,
            url: url.to_owned(),
        }
    }

    /// `dlq --format json ARGS`; asserts exit 0 and returns its JSON report.
    fn dlq(&self, args: &[&str]) -> Value {
        let output = dlq_testkit::cli::dlq_output(DLQ, &self.data, &self.url, args);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "dlq {args:?}: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("dlq {args:?}: {e}: {stdout}"))
    }

    /// Dead-letters `count` items of `job` as node `sched-1`, every one published on emit.
    fn emit(&self, job: &str, count: u64) {
        let report = self.dlq(&[
            "--node-id",
            "sched-1",
            "demo",
            "--count",
            &count.to_string(),
            "--job-id",
            job,
        ]);
        assert_eq!(report["emitted"], count, "{report}");
        assert_eq!(report["unpublished"], 0, "{report}");
    }

    /// One run of the durable consumer `c1` (its store beside the data directory).
    fn consume_durable(&self) -> Value {
        let store = self.work.path().join("consumer");
        self.dlq(&[
            "consume",
            "--durable",
            "c1",
            "--store",
            store.to_str().unwrap(),
        ])
    }

    fn path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Three runs of three items each, with `incident` between the second and the third; with
/// `beyond_window`, the third run starts after the stream forgot the earlier ids.
fn scenario(incident: Incident, duplicate_window: &str, beyond_window: Option<Duration>) {
    let server = NatsServer::start();
    let node = Node::new(&server.url(), duplicate_window);
    node.dlq(&["stream", "create"]);

    node.emit("job-a", 3);
    let backup = node.path("data.backup");
    if let Incident::RestoredOlderCopy = incident {
        copy_dir(&node.data, &backup);
    }
    node.emit("job-b", 3);
    node.consume_durable();
    match incident {
        Incident::Replaced => std::fs::rename(&node.data, node.path("data.damaged")).unwrap(),
        Incident::RestoredOlderCopy => {
            std::fs::remove_dir_all(&node.data).unwrap();
            copy_dir(&backup, &node.data);
        }
    }
    if let Some(wait) = beyond_window {
        // JetStream forgets a message id between one and two windows after storing it.
        std::thread::sleep(wait);
    }
    node.emit("job-c", 3);

    let durable = node.consume_durable();
    let rebuilt = node.dlq(&["consume"]);
    let every_job = json!({"job-a": 3, "job-b": 3, "job-c": 3});
    assert_eq!(
        rebuilt["stream_messages"], 9,
        "the stream lost events: {rebuilt}"
    );
    assert_eq!(rebuilt["items_per_job"], every_job, "{rebuilt}");
    for report in [&rebuilt, &durable] {
        assert_eq!(report["events_applied"], 9, "{report}");
        assert_eq!(report["duplicates_dropped"], 0, "{report}");
        assert_eq!(report["waiting_for_predecessor"], 0, "{report}");
    }
    assert_eq!(durable["items"], 9, "{durable}");
    assert_eq!(durable["events_applied_this_run"], 3, "{durable}");

    // The node's own directory lacks what the incident took away; verify says so.
    let store = node.path("consumer");
    let verify = dlq_testkit::cli::dlq_output(
        DLQ,
        &node.data,
        &node.url,
        &["verify", "--consumer-store", store.to_str().unwrap()],
    );
    let report: Value = serde_json::from_slice(&verify.stdout).unwrap();
    let lost_locally = match incident {
        Incident::Replaced => 6,
        Incident::RestoredOlderCopy => 3,
    };
    assert_eq!(verify.status.code(), Some(5), "{report}");
    assert_eq!(
        (&report["extra"], &report["missing"], &report["diverging"]),
        (&json!(lost_locally), &json!(0), &json!(0)),
        "{report}"
    );
}

const LONG_WINDOW: &str = "2m";
const SHORT_WINDOW: &str = "1s";
const BEYOND_SHORT_WINDOW: Duration = Duration::from_secs(3);

#[test]
fn a_replaced_directory_inside_the_duplicate_window_loses_nothing() {
    scenario(Incident::Replaced, LONG_WINDOW, None);
}

#[test]
fn a_replaced_directory_beyond_the_duplicate_window_loses_nothing() {
    scenario(Incident::Replaced, SHORT_WINDOW, Some(BEYOND_SHORT_WINDOW));
}

#[test]
fn a_restored_older_copy_inside_the_duplicate_window_loses_nothing() {
    scenario(Incident::RestoredOlderCopy, LONG_WINDOW, None);
}

#[test]
fn a_restored_older_copy_beyond_the_duplicate_window_loses_nothing() {
    scenario(
        Incident::RestoredOlderCopy,
        SHORT_WINDOW,
        Some(BEYOND_SHORT_WINDOW),
    );
}
