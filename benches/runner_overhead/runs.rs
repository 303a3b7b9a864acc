//! Measuring one run: the in-process baselines and a `dlq run` child, with their CPU times.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;

use crate::{BIN, PARALLEL, TICK_SECS};

/// One measured run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Run {
    pub(crate) wall: Duration,
    /// CPU seconds (user + sys) of the measured process itself.
    pub(crate) own_cpu: f64,
    /// CPU seconds of the children it waited for (the `sh` processes).
    pub(crate) child_cpu: f64,
    /// Lines the runner wrote to stderr (warnings).
    pub(crate) stderr_lines: usize,
    /// Slowest minus fastest wall time of the runs this median was taken from.
    pub(crate) spread: Duration,
}

/// (own, waited-for children) CPU seconds from the text of a `/proc/PID/stat`.
fn cpu_of(stat: &str) -> (f64, f64) {
    let rest = &stat[stat.rfind(')').expect("stat has a ')'") + 1..];
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // Fields 14-17 of proc(5) (utime, stime, cutime, cstime); `rest` starts at field 3.
    ((f[11] + f[12]) * TICK_SECS, (f[13] + f[14]) * TICK_SECS)
}

fn self_cpu() -> (f64, f64) {
    cpu_of(&std::fs::read_to_string("/proc/self/stat").unwrap())
}

/// One baseline item: `sh -c true` spawned like the runner spawns a step; with `dir`, its output
/// goes to log files in that fresh directory, removed afterwards.
async fn spawn_true(dir: Option<PathBuf>) -> bool {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg("true")
        .process_group(0)
        .kill_on_drop(true)
        .stdin(Stdio::null());
    match &dir {
        None => {
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).unwrap();
            let open = |name: &str| {
                let path = dir.join(name);
                OpenOptions::new().create(true).append(true).open(path)
            };
            cmd.current_dir(dir)
                .stdout(open("stdout.log").unwrap())
                .stderr(open("stderr.log").unwrap());
        }
    }
    let ok = cmd.spawn().unwrap().wait().await.unwrap().success();
    if let Some(dir) = dir {
        std::fs::remove_dir_all(dir).unwrap();
    }
    ok
}

/// `n` baseline items, at most [`PARALLEL`] in flight; per-item directories under `root`.
pub(crate) fn baseline(n: usize, root: Option<&Path>) -> Run {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (cpu0, child0) = self_cpu();
    let started = Instant::now();
    let ok = runtime.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        let mut ok = 0usize;
        for i in 0..n {
            if set.len() >= PARALLEL {
                ok += usize::from(set.join_next().await.unwrap().unwrap());
            }
            let dir = root.map(|r| r.join(format!("i{i:05}")));
            set.spawn(spawn_true(dir));
        }
        while let Some(done) = set.join_next().await {
            ok += usize::from(done.unwrap());
        }
        ok
    });
    let wall = started.elapsed();
    let (cpu1, child1) = self_cpu();
    assert_eq!(ok, n, "every baseline `sh -c true` must succeed");
    Run {
        wall,
        own_cpu: cpu1 - cpu0,
        child_cpu: child1 - child0,
        ..Run::default()
    }
}

/// A `dlq run` job: `items` items running `shell`, bus at `bus`, optional config file text.
pub(crate) struct Job<'a> {
    pub(crate) items: usize,
    pub(crate) shell: &'a str,
    pub(crate) bus: &'a str,
    pub(crate) config: Option<&'a str>,
}

/// Runs `case` once in a fresh directory under `base`; asserts the report's counts.
pub(crate) fn run_dlq(base: &Path, case: &Job) -> Run {
    let tmp = tempfile::tempdir_in(base).unwrap();
    let dir = tmp.path();
    let items: Vec<serde_json::Value> = (1..=case.items)
        .map(|i| serde_json::json!({"id": format!("i{i:05}"), "n": i, "path": format!("src/f{i:05}.rs")}))
        .collect();
    let doc = serde_json::json!({ "items": items });
    std::fs::write(dir.join("items.json"), doc.to_string()).unwrap();
    let workflow = format!(
        "name: bench\nmode: mapreduce\nmap:\n  input: items.json\n  json_path: \"$.items[*]\"\n  \
         max_parallel: {PARALLEL}\n  agent_template:\n    - shell: \"{}\"\n",
        case.shell
    );
    std::fs::write(dir.join("workflow.yml"), workflow).unwrap();
    let mut cmd = Command::new(BIN);
    for var in ["DLQ_CONFIG", "DLQ_TOPIC", "DLQ_NODE_ID", "DLQ_METRICS_ADDR"] {
        cmd.env_remove(var);
    }
    cmd.arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--nats-url", case.bus, "--format", "json"]);
    if let Some(config) = case.config {
        std::fs::write(dir.join("config.yml"), config).unwrap();
        cmd.arg("--config").arg(dir.join("config.yml"));
    }
    cmd.arg("run")
        .arg(dir.join("workflow.yml"))
        .args([
            "--job-id",
            "bench",
            "--progress",
            "quiet",
            "--drain-timeout",
            "0s",
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(File::create(dir.join("report.json")).unwrap())
        .stderr(File::create(dir.join("stderr.log")).unwrap());
    let started = Instant::now();
    let mut child = cmd.spawn().expect("spawn dlq");
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    // Wait for the exit without reaping, so that /proc still has the runner's CPU times.
    waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT).expect("waitid");
    let wall = started.elapsed();
    let (own_cpu, child_cpu) =
        cpu_of(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap());
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    let report = std::fs::read_to_string(dir.join("report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&report).unwrap_or_else(|e| {
        panic!("dlq run ({status}) printed no JSON report ({e}); stderr:\n{stderr}")
    });
    let count = |field: &str| report["summary"][field].as_u64().unwrap();
    let (ok, failed) = match case.shell {
        "true" => (case.items as u64, 0),
        _ => (0, case.items as u64),
    };
    assert_eq!(
        (count("successful"), count("failed"), count("pending")),
        (ok, failed, 0),
        "dlq run of {} items `{}`: unexpected counts; stderr:\n{stderr}",
        case.items,
        case.shell
    );
    Run {
        wall,
        own_cpu,
        child_cpu,
        stderr_lines: stderr.lines().count(),
        ..Run::default()
    }
}

/// The run of median wall time among `runs`.
pub(crate) fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by_key(|r| r.wall);
    let spread = runs[runs.len() - 1].wall - runs[0].wall;
    Run {
        spread,
        ..runs[runs.len() / 2]
    }
}
