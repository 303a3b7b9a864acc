//! The job runner through the binary: a workflow directory with its input, `dlq run` /
//! `dlq resume`, and the job's files.

use std::path::PathBuf;
use std::process::{Child, Output, Stdio};

use serde_json::Value;

use crate::cli::Env;

/// A data directory (via [`Env`]) and a directory holding a workflow and its input.
pub struct Flow {
    /// The data directory and bus.
    pub env: Env,
    /// Where the workflow and its input live.
    pub dir: PathBuf,
}

impl Flow {
    /// A new flow directory next to a fresh data directory, for the `dlq` binary `bin` (see
    /// [`Env::new`]).
    pub fn new(bin: impl Into<PathBuf>, url: &str) -> Flow {
        let env = Env::new(bin, url);
        let dir = env.path("flow");
        std::fs::create_dir_all(&dir).unwrap();
        Flow { env, dir }
    }

    /// Writes a file in the flow directory; returns its path.
    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    /// Writes `items.json` holding `{"items": [...]}`.
    pub fn items(&self, items: &[Value]) {
        self.write(
            "items.json",
            &serde_json::json!({ "items": items }).to_string(),
        );
    }

    /// `dlq run flow.yml --job-id JOB --progress lines`.
    pub fn run(&self, workflow: &str, job: &str) -> Output {
        let path = self.write("flow.yml", workflow);
        let path = path.to_str().unwrap().to_owned();
        self.env.run(&[
            "run",
            &path,
            "--job-id",
            job,
            "--progress",
            "lines",
            "--drain-timeout",
            "5s",
        ])
    }

    /// `dlq run flow.yml --job-id JOB --progress quiet --drain-timeout 0s` started in the
    /// background (its report on piped stdout, see [`report`]), for tests that act while the
    /// job holds the data directory.
    pub fn spawn_run(&self, workflow: &str, job: &str) -> Child {
        let path = self.write("flow.yml", workflow);
        let path = path.to_str().unwrap().to_owned();
        let mut cmd = self.env.command(&[
            "run",
            &path,
            "--job-id",
            job,
            "--progress",
            "quiet",
            "--drain-timeout",
            "0s",
        ]);
        cmd.stdout(Stdio::piped()).stderr(Stdio::null());
        crate::process::spawn_tied(cmd).unwrap()
    }

    /// `dlq resume JOB [extra...]`.
    pub fn resume(&self, job: &str, extra: &[&str]) -> Output {
        let mut args = vec![
            "resume",
            job,
            "--progress",
            "lines",
            "--drain-timeout",
            "5s",
        ];
        args.extend_from_slice(extra);
        self.env.run(&args)
    }

    /// The job's directory in the data directory.
    pub fn job_dir(&self, job: &str) -> PathBuf {
        self.env.data.join("jobs").join(job)
    }

    /// The outcome lines of a job.
    pub fn outcomes(&self, job: &str) -> Vec<Value> {
        let text =
            std::fs::read_to_string(self.job_dir(job).join("outcomes.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The job's events.
    pub fn events(&self, job: &str) -> Vec<Value> {
        let out = self.env.run(&["events", job]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// The JSON report a run printed, with its exit code; panics with stderr if not JSON.
pub fn report(out: &Output) -> (i32, Value) {
    let code = out.status.code().unwrap_or(-1);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "no JSON report ({err}), exit {code}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, report)
}

/// `(successful, failed, skipped, pending)` of a report.
pub fn counts(report: &Value) -> (u64, u64, u64, u64) {
    let s = &report["summary"];
    (
        s["successful"].as_u64().unwrap(),
        s["failed"].as_u64().unwrap(),
        s["skipped"].as_u64().unwrap(),
        s["pending"].as_u64().unwrap(),
    )
}
