//! The emitter processes of a drill (`dlq-chaos emit` children) and what they report.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;

use crate::procs::signal;
use crate::{err, Res};

/// One emit call: when it started (Unix ms), how long it took (µs), its outcome.
#[derive(Debug, Clone, Copy)]
pub struct EmitRecord {
    /// Start, Unix milliseconds.
    pub start_ms: u64,
    /// Latency in microseconds.
    pub micros: u64,
}

/// The latest `STAT` line of one emitter.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct Stat {
    /// Unix ms of the line.
    pub t: u64,
    /// Unpublished events in its sink.
    pub backlog: u64,
    /// Age of the oldest unpublished event.
    pub oldest_age_ms: u64,
    /// Resident memory, KiB.
    pub rss_kb: u64,
    /// Peak resident memory, KiB.
    pub hwm_kb: u64,
}

/// Everything the emitters reported.
#[derive(Debug, Default)]
pub struct Tally {
    /// Event ids acknowledged by a sink (`ACK` lines).
    pub acked: HashSet<String>,
    /// `ACK` lines (ids are unique, so this equals `acked.len()` unless something is wrong).
    pub ack_lines: u64,
    /// Events the sink refused: id and whether they were published anyway.
    pub not_stored: Vec<(String, bool)>,
    /// Every emit call.
    pub emits: Vec<EmitRecord>,
    /// Emit calls by outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// Latest `STAT` per node.
    pub stats: HashMap<String, Stat>,
    /// Highest RSS seen (KiB).
    pub max_rss_kb: u64,
    /// Highest VmHWM seen (KiB).
    pub max_hwm_kb: u64,
    /// `FINAL` lines.
    pub finals: Vec<serde_json::Value>,
}

/// Shared tally.
pub type SharedTally = Arc<Mutex<Tally>>;

struct Member {
    node: String,
    data_dir: PathBuf,
    control_dir: PathBuf,
    incarnation: u32,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    reader: Option<JoinHandle<()>>,
}

/// How the emitters run.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// Where data dirs and logs go.
    pub work: PathBuf,
    /// NATS URL the emitters use (the proxy's for net-cut).
    pub url: String,
    /// Emits per second per emitter.
    pub rate_each: f64,
    /// Reconciler off.
    pub baseline: bool,
    /// Per-attempt publish timeout.
    pub publish_timeout: Duration,
    /// Drain wait after stopping.
    pub drain_timeout: Duration,
    /// Replicas of the stream the emitters create (3 on the cluster).
    pub replicas: usize,
    /// The network namespace the emitters run in (`ip netns exec`; net-partition only).
    pub netns: Option<String>,
}

/// The emitter processes.
pub struct Fleet {
    config: FleetConfig,
    members: Vec<Member>,
    tally: SharedTally,
}

impl Fleet {
    /// Starts `count` emitters `chaos-0` .. `chaos-{count-1}`.
    pub async fn start(config: FleetConfig, count: usize) -> Res<Fleet> {
        let mut fleet = Fleet {
            members: (0..count)
                .map(|i| Member {
                    node: format!("chaos-{i}"),
                    data_dir: config.work.join(format!("chaos-{i}")),
                    control_dir: config.work.join(format!("chaos-{i}.control")),
                    incarnation: 0,
                    child: None,
                    stdin: None,
                    reader: None,
                })
                .collect(),
            config,
            tally: SharedTally::default(),
        };
        for i in 0..count {
            std::fs::create_dir_all(&fleet.members[i].control_dir)?;
            fleet.spawn(i)?;
        }
        Ok(fleet)
    }

    /// The shared tally.
    pub fn tally(&self) -> SharedTally {
        self.tally.clone()
    }

    /// `(node_id, data_dir)` of every emitter.
    pub fn data_dirs(&self) -> Vec<(String, PathBuf)> {
        self.members
            .iter()
            .map(|m| (m.node.clone(), m.data_dir.clone()))
            .collect()
    }

    /// The stderr log of emitter `node`.
    pub fn log_path(&self, node: &str) -> PathBuf {
        self.config.work.join(format!("{node}.stderr"))
    }

    fn spawn(&mut self, i: usize) -> Res<()> {
        let exe = crate::procs::exe()?;
        let config = &self.config;
        let member = self
            .members
            .get_mut(i)
            .ok_or_else(|| err(format!("no emitter {i}")))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(config.work.join(format!("{}.stderr", member.node)))?;
        let mut cmd = match &config.netns {
            // `ip netns exec` execs in place: the child's pid is the emitter's.
            Some(netns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", netns]).arg(exe);
                cmd
            }
            None => Command::new(exe),
        };
        cmd.arg("emit")
            .arg("--data-dir")
            .arg(&member.data_dir)
            .arg("--control-dir")
            .arg(&member.control_dir)
            .args(["--node-id", &member.node, "--nats-url", &config.url])
            .args(["--rate", &config.rate_each.to_string()])
            .args(["--incarnation", &member.incarnation.to_string()])
            .args(["--replicas", &config.replicas.to_string()])
            .arg("--publish-timeout")
            .arg(humantime::format_duration(config.publish_timeout).to_string())
            .arg("--drain-timeout")
            .arg(humantime::format_duration(config.drain_timeout).to_string());
        if config.baseline {
            cmd.arg("--baseline");
        }
        if std::env::var_os("RUST_LOG").is_none() {
            // One warning per failed publish would flood the logs during a long outage.
            cmd.env("RUST_LOG", "warn,dlq::emitter=error");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        member.stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| err("emitter has no stdout"))?;
        member.reader = Some(tokio::spawn(read_lines(
            BufReader::new(stdout),
            member.node.clone(),
            self.tally.clone(),
        )));
        member.child = Some(child);
        Ok(())
    }

    /// SIGKILLs emitter `i` and reaps it (its data dir is released).
    pub async fn kill(&mut self, i: usize) -> Res<()> {
        let member = self
            .members
            .get_mut(i)
            .ok_or_else(|| err(format!("no emitter {i}")))?;
        if let Some(mut child) = member.child.take() {
            if let Some(pid) = child.id() {
                signal(pid, "KILL")?;
            }
            child.wait().await?;
        }
        member.stdin = None;
        if let Some(reader) = member.reader.take() {
            let _ = reader.await;
        }
        Ok(())
    }

    /// Starts emitter `i` again on the same data dir, as its next incarnation.
    pub fn restart(&mut self, i: usize) -> Res<()> {
        if let Some(member) = self.members.get_mut(i) {
            member.incarnation += 1;
        }
        self.spawn(i)
    }

    /// Turns a sink fault switch (`FAIL_WRITES`, `FAIL_FLUSH`) on or off in every emitter.
    pub fn set_switch(&self, name: &str, on: bool) -> Res<()> {
        for member in &self.members {
            let path = member.control_dir.join(name);
            if on {
                std::fs::write(&path, b"1")?;
            } else if path.exists() {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(())
    }

    /// Tells every emitter to stop (closes stdin), waits for them to drain and exit (at most
    /// `timeout`, then SIGKILL), and for their output to be read.
    pub async fn stop(&mut self, timeout: Duration) -> Res<()> {
        for member in &mut self.members {
            member.stdin = None;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                match tokio::time::timeout_at(deadline, child.wait()).await {
                    Ok(status) => {
                        let status = status?;
                        if !status.success() {
                            eprintln!("dlq-chaos: emitter {} exited with {status}", member.node);
                        }
                    }
                    Err(_) => {
                        eprintln!(
                            "dlq-chaos: emitter {} did not stop in time; killing it",
                            member.node
                        );
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                    }
                }
            }
            if let Some(reader) = member.reader.take() {
                let _ = reader.await;
            }
        }
        Ok(())
    }
}

async fn read_lines(
    mut stdout: BufReader<tokio::process::ChildStdout>,
    node: String,
    tally: SharedTally,
) {
    let mut line = String::new();
    loop {
        line.clear();
        match stdout.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Ok(mut t) = tally.lock() else {
            return;
        };
        record(&mut t, &node, line.trim_end());
    }
}

fn record(t: &mut Tally, node: &str, line: &str) {
    let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
    match tag {
        "ACK" => {
            t.ack_lines += 1;
            t.acked.insert(rest.to_owned());
        }
        "NOTSTORED" => {
            let (id, published) = rest.split_once(' ').unwrap_or((rest, "0"));
            t.not_stored.push((id.to_owned(), published == "1"));
        }
        "EMIT" => {
            let mut parts = rest.split(' ');
            let start_ms = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            let micros = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            let outcome = parts.next().unwrap_or("?").to_owned();
            t.emits.push(EmitRecord { start_ms, micros });
            *t.outcomes.entry(outcome).or_default() += 1;
        }
        "STAT" => {
            if let Ok(stat) = serde_json::from_str::<Stat>(rest) {
                t.max_rss_kb = t.max_rss_kb.max(stat.rss_kb);
                t.max_hwm_kb = t.max_hwm_kb.max(stat.hwm_kb);
                t.stats.insert(node.to_owned(), stat);
            }
        }
        "FINAL" => {
            if let Ok(value) = serde_json::from_str(rest) {
                t.finals.push(value);
            }
        }
        _ => {}
    }
}

/// Copies the last `max` bytes of `from` to `to` (for the report's logs).
pub fn copy_tail(from: &Path, to: &Path, max: usize) {
    if let Ok(bytes) = std::fs::read(from) {
        let start = bytes.len().saturating_sub(max);
        let _ = std::fs::write(to, bytes.get(start..).unwrap_or_default());
    }
}
