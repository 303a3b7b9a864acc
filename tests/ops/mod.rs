//! Helpers for the operator-command tests (`cli_ops.rs`, `cli_ops_admin.rs`): run the `dlq`
//! binary, read its JSON, open the sink after it exited, and write reference-000 layouts.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use chrono::{DateTime, Duration, Utc};
use dlq::domain::event::Event;
use dlq::domain::model::DeadLetteredItem;
use dlq::sink::{Sink, SinkConfig, SledSink};
use serde_json::{json, Value};

/// A data directory with its config file and a bus URL.
pub struct Env {
    /// Keeps the temporary directory alive.
    pub work: tempfile::TempDir,
    /// The data directory.
    pub data: PathBuf,
    /// NATS URL (a free port when there is no server).
    pub url: String,
}

impl Env {
    /// A fresh data directory; `url` is the bus (pass a free port for none).
    pub fn new(url: &str) -> Env {
        let work = tempfile::tempdir().unwrap();
        let data = work.path().join("data");
        // No emit-path retries and short timeouts keep runs without a bus fast.
        std::fs::write(
            data.with_extension("yml"),
            "topics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 300ms\n  reconnect_max_delay: 200ms\n",
        )
        .unwrap();
        Env {
            work,
            data,
            url: url.to_owned(),
        }
    }

    /// A path inside the work directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    /// `dlq --format json <args>` (unless `args` has its own `--format`) on this data
    /// directory, stdin closed, logging errors only.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq"));
        cmd.arg("--data-dir")
            .arg(&self.data)
            .args(["--nats-url", &self.url])
            .args(if args.contains(&"--format") {
                &[][..]
            } else {
                &["--format", "json"][..]
            })
            .args(args)
            .env("DLQ_CONFIG", self.data.with_extension("yml"))
            .env("RUST_LOG", "error")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs [`Env::command`].
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs and parses stdout as one JSON document; panics with stderr on failure.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "dlq {args:?} failed ({:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
            panic!("not JSON ({err}): {}", String::from_utf8_lossy(&out.stdout))
        })
    }

    /// `dlq demo` without waiting for the bus.
    pub fn demo(&self, job: &str, count: u32) -> Value {
        let count = count.to_string();
        self.json(&[
            "demo",
            "--count",
            &count,
            "--job-id",
            job,
            "--drain-timeout",
            "0s",
        ])
    }

    /// Opens the sink (the CLI must have exited) and hands it to `f`.
    pub async fn with_sink<T>(&self, f: impl FnOnce(&SledSink) -> T) -> T {
        let sink = SledSink::open(SinkConfig::new(&self.data)).unwrap();
        let value = f(&sink);
        sink.close().await.unwrap();
        value
    }

    /// Every item in the sink, in key order.
    pub async fn items(&self) -> Vec<DeadLetteredItem> {
        self.with_sink(|sink| sink.items().map(|s| s.unwrap().item).collect())
            .await
    }

    /// Every event in the log.
    pub async fn events(&self) -> Vec<Event> {
        self.with_sink(|sink| sink.events_from(1).map(|e| e.unwrap()).collect())
            .await
    }
}

/// The exit code and stderr of a run.
pub fn failure(out: &Output) -> (Option<i32>, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An item in reference 000's format (no `job_id`, no `error_pattern`, its own style of
/// signature) that last failed `hours_ago` hours ago and first failed `first_days_ago` days ago.
pub fn reference_item(id: &str, hours_ago: i64, first_days_ago: i64) -> Value {
    let now = Utc::now();
    let last: DateTime<Utc> = now - Duration::hours(hours_ago);
    let first = now - Duration::days(first_days_ago) - Duration::hours(hours_ago);
    json!({
        "item_id": id,
        "item_data": { "file": format!("src/{id}.rs"), "priority": 5 },
        "first_attempt": first,
        "last_attempt": last,
        "failure_count": 1,
        "failure_history": [{
            "attempt_number": 1,
            "timestamp": last,
            "error_type": { "CommandFailed": { "exit_code": 101 } },
            "error_message": "cargo test failed with exit code 101",
            "stack_trace": "thread 'main' panicked at src/main.rs:42...",
            "agent_id": "agent-1",
            "step_failed": "shell: cargo test",
            "duration_ms": 45000,
            "json_log_location": format!("/logs/session-{id}.json")
        }],
        "error_signature": "CommandFailed::cargo test failed with exit",
        "reprocess_eligible": true,
        "manual_review_required": false,
        "worktree_artifacts": {
            "worktree_path": "/worktrees/agent-1",
            "branch_name": "agent-1",
            "uncommitted_changes": "src/main.rs modified",
            "error_logs": "error.log contents..."
        }
    })
}

/// Writes a job directory of reference 000 (`items/{id}.json` and `index.json`) at `dir`.
pub fn write_reference_job(dir: &Path, job_id: &str, items: &[Value]) {
    std::fs::create_dir_all(dir.join("items")).unwrap();
    let mut ids = Vec::new();
    for item in items {
        let id = item["item_id"].as_str().unwrap().to_owned();
        let text = serde_json::to_string_pretty(item).unwrap();
        std::fs::write(dir.join("items").join(format!("{id}.json")), text).unwrap();
        ids.push(id);
    }
    let index = json!({
        "job_id": job_id,
        "item_count": ids.len(),
        "item_ids": ids,
        "updated_at": Utc::now(),
    });
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
}

/// The `item_id`s of a `dlq list --format json` answer, in order.
pub fn listed_ids(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["job_id"].as_str().unwrap(),
                i["item_id"].as_str().unwrap()
            )
        })
        .collect()
}
