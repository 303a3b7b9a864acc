//! Running the `dlq` binary the way the end-to-end tests do.
//!
//! A library cannot name the binary itself (`CARGO_BIN_EXE_dlq` is only set for the dlq
//! package's own tests and benches), so every helper takes its path: a test passes
//! `env!("CARGO_BIN_EXE_dlq")`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use dlq::domain::event::Event;
use dlq::domain::model::DeadLetteredItem;
use dlq::sink::{LocalSink, Sink, SinkConfig};
use serde_json::Value;

/// `BIN --data-dir DIR --nats-url URL --format json ARGS...`, with `DLQ_CONFIG` pointing at
/// `DIR.yml` (each test writes its config beside its data directory).
pub fn dlq_command(bin: impl AsRef<OsStr>, data_dir: &Path, url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("--data-dir")
        .arg(data_dir)
        .args(["--nats-url", url, "--format", "json"])
        .args(args)
        .env("DLQ_CONFIG", data_dir.with_extension("yml"));
    cmd
}

/// Runs [`dlq_command`] to completion.
pub fn dlq_output(bin: impl AsRef<OsStr>, data_dir: &Path, url: &str, args: &[&str]) -> Output {
    dlq_command(bin, data_dir, url, args)
        .output()
        .expect("run the dlq binary")
}

/// A data directory with its config file and a bus URL.
pub struct Env {
    /// The `dlq` binary.
    pub bin: PathBuf,
    /// Keeps the temporary directory alive.
    pub work: tempfile::TempDir,
    /// The data directory.
    pub data: PathBuf,
    /// NATS URL (a free port when there is no server).
    pub url: String,
}

impl Env {
    /// A fresh data directory for the `dlq` binary `bin` (a test passes
    /// `env!("CARGO_BIN_EXE_dlq")`); `url` is the bus (pass [`crate::DEAD_BUS_URL`] for none).
    pub fn new(bin: impl Into<PathBuf>, url: &str) -> Env {
        let work = tempfile::tempdir().unwrap();
        let data = work.path().join("data");
        // No emit-path retries and short timeouts keep runs without a bus fast.
        std::fs::write(
            data.with_extension("yml"),
            "topics:\n  default:\n    retry_attempts: 0\nbus:\n  publish_timeout: 300ms\n  reconnect_max_delay: 200ms\n",
        )
        .unwrap();
        Env {
            bin: bin.into(),
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
        let mut cmd = Command::new(&self.bin);
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
        let out = self.demo_command(job, count).output().unwrap();
        assert!(
            out.status.success(),
            "dlq demo failed ({:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
            panic!("not JSON ({err}): {}", String::from_utf8_lossy(&out.stdout))
        })
    }

    /// The command of [`Env::demo`], to change before it runs (a preload library, ...).
    pub fn demo_command(&self, job: &str, count: u32) -> Command {
        let count = count.to_string();
        self.command(&[
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
    pub async fn with_sink<T>(&self, f: impl FnOnce(&LocalSink) -> T) -> T {
        let sink = LocalSink::open(SinkConfig::new(&self.data)).unwrap();
        let value = f(&sink);
        sink.close().await.unwrap();
        value
    }

    /// Every item in the sink, in key order.
    pub async fn items(&self) -> Vec<DeadLetteredItem> {
        self.with_sink(|sink| {
            sink.items()
                .map(|s| std::sync::Arc::unwrap_or_clone(s.unwrap().item))
                .collect()
        })
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
