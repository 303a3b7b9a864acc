//! The three-node NATS JetStream cluster of `deploy/nats-cluster/`, with real processes.
//!
//! * A `dlq demo --loop --print-acked` emitter publishes into the `DLQ` stream, which the
//!   product creates with three replicas (`bus.replicas: 3`). Node n1, the emitter's seed and
//!   the stream's leader, is SIGKILLed during emission and restarted later; afterwards
//!   `dlq reconcile` publishes the backlog. Every acknowledged event is in the stream exactly
//!   once, `dlq verify` finds no difference, and the restarted node is a current replica again.
//! * A stream the operator made with three replicas and a week's `max_age` stays so when a
//!   `dlq demo` with the default `bus.replicas: 1` publishes to it, which warns about the
//!   stream's shorter duplicate window instead of changing it.
//! * `cluster.sh start|status|kill|restart|stop` on free ports.
//! * The deployment files: `deploy/dlq.cluster.yml` is a valid config, the alert rules and the
//!   Grafana dashboard use only metrics the product exports, and the dashboard covers them all.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use dlq_testkit::cluster::{meta_leader, ScriptCluster};
use dlq_testkit::nats::healthz_ok;
use dlq_testkit::spawn_tied;
use dlq_testkit::stream::stream_ids;
use dlq_testkit::NatsCluster;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// The two cluster tests run one after the other: three raft nodes each on a 2-core machine
/// would slow both down.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const STREAM: &str = "DLQ";

fn dlq(data_dir: &Path, config: &Path, url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlq"));
    cmd.arg("--data-dir")
        .arg(data_dir)
        .arg("--config")
        .arg(config)
        // `--nats-url` (default nats://127.0.0.1:4222) replaces the config's `bus.url`, so the
        // URL is passed here too; the config file carries the same one.
        .args(["--nats-url", url, "--format", "json"])
        .env_remove("DLQ_NATS_URL")
        .env("RUST_LOG", "warn");
    cmd
}

/// Runs a `dlq` command to completion, bounded by `limit` (SIGKILL after it).
fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = spawn_tied(cmd).expect("spawn dlq");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send(());
        out
    });
    if rx.recv_timeout(limit).is_err() {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    let out = waiter.join().unwrap().expect("wait for dlq");
    assert!(
        out.status.code().is_some(),
        "dlq did not finish within {limit:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Polls `f` every 100 ms until it returns `Some`; panics naming `what` after `timeout`.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "dlq printed no JSON ({err}): stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The emitter child and the ids it acknowledged so far.
struct Emitter {
    child: Child,
    acks: Receiver<String>,
    reader: Option<std::thread::JoinHandle<()>>,
    acked: Vec<String>,
    stderr: PathBuf,
}

impl Emitter {
    fn spawn(data_dir: &Path, config: &Path, url: &str, stderr: PathBuf) -> Emitter {
        let mut cmd = dlq(data_dir, config, url);
        cmd.args(["demo", "--loop", "--print-acked", "--job-id", "cluster"])
            .args(["--drain-timeout", "0s"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut child = spawn_tied(cmd).expect("spawn dlq demo");
        let stdout = child.stdout.take().unwrap();
        let (tx, acks) = mpsc::channel();
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
        Emitter {
            child,
            acks,
            reader: Some(reader),
            acked: Vec::new(),
            stderr,
        }
    }

    /// Takes every id printed so far.
    fn drain(&mut self) -> usize {
        self.acked.extend(self.acks.try_iter());
        self.acked.len()
    }

    /// Waits until `more` further events were acknowledged (the emitter must keep going).
    fn await_more(&mut self, more: usize, within: Duration, phase: &str) {
        let want = self.drain() + more;
        let deadline = Instant::now() + within;
        while self.acked.len() < want {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.acks.recv_timeout(left) {
                Ok(id) => self.acked.push(id),
                Err(err) => panic!(
                    "{phase}: the emitter acknowledged {} of {want} events within {within:?} ({err})\n{}",
                    self.acked.len(),
                    dlq_testkit::process::tail(&self.stderr, 30)
                ),
            }
        }
    }

    /// SIGKILL, reap, and collect the ids still in the pipe.
    fn kill(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.drain();
    }
}

impl Drop for Emitter {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Stream info through one node, bounded to 3 s (`None` while there is no leader).
async fn stream_info(url: &str) -> Option<async_nats::jetstream::stream::Info> {
    let attempt = async {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(2))
            .connect(url)
            .await
            .ok()?;
        let mut js = async_nats::jetstream::new(client);
        js.set_timeout(Duration::from_secs(2));
        let mut stream = js.get_stream(STREAM).await.ok()?;
        stream.info().await.ok().cloned()
    };
    tokio::time::timeout(Duration::from_secs(3), attempt)
        .await
        .ok()
        .flatten()
}

/// Asks the stream's leader to step down until `wanted` leads (at most 20 tries; each lands on
/// `wanted` with a chance of one in two); returns the stream info that shows it.
async fn move_stream_leader(
    url: &str,
    wanted: &str,
    mut info: async_nats::jetstream::stream::Info,
) -> async_nats::jetstream::stream::Info {
    let leader_of = |info: &async_nats::jetstream::stream::Info| {
        info.cluster.as_ref().and_then(|c| c.leader.clone())
    };
    let client = async_nats::connect(url)
        .await
        .expect("connect for step-down");
    let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}");
    for _ in 0..20 {
        let Some(leader) = leader_of(&info) else {
            panic!("stream without a leader: {info:?}")
        };
        if leader == wanted {
            return info;
        }
        let reply = tokio::time::timeout(
            Duration::from_secs(3),
            client.request(subject.clone(), "".into()),
        )
        .await;
        eprintln!(
            "stream leader {leader}, asking it to step down: {:?}",
            reply.map(|r| r.map(|m| String::from_utf8_lossy(&m.payload).into_owned()))
        );
        let old = leader.clone();
        info = eventually(
            "a new stream leader after a step-down",
            Duration::from_secs(10),
            || {
                let old = old.clone();
                async move {
                    stream_info(url).await.filter(|i| {
                        all_replicas_current(i) && leader_of(i).is_some_and(|l| l != old)
                    })
                }
            },
        )
        .await;
    }
    panic!("{wanted} did not become the stream leader after 20 step-downs")
}

/// True when the stream has three replicas, a leader, and every other peer is current.
fn all_replicas_current(info: &async_nats::jetstream::stream::Info) -> bool {
    let Some(cluster) = &info.cluster else {
        return false;
    };
    info.config.num_replicas == 3
        && cluster.leader.is_some()
        && cluster.replicas.len() == 2
        && cluster
            .replicas
            .iter()
            .all(|peer| peer.current && !peer.offline)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_during_emission_loses_nothing_duplicates_nothing_and_rejoins() {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let mut cluster = NatsCluster::start();
    eprintln!("cluster ready after {:?}", started.elapsed());

    let work = tempfile::tempdir().unwrap();
    let data_dir = work.path().join("data");
    let config = work.path().join("dlq.yml");
    // The emitter's seed is n1. async-nats 0.51 takes one URL per string (a comma-separated
    // list is refused as an invalid port); the cluster advertises the other nodes' client URLs,
    // so the client fails over to them when n1 goes away.
    let seed = cluster.url(0);
    std::fs::write(
        &config,
        format!(
            "bus:\n  url: {seed}\n  replicas: 3\n  publish_timeout: 1s\n  reconnect_max_delay: 200ms\n\
             topics:\n  default:\n    retry_attempts: 0\nreconciler:\n  interval: 200ms\n"
        ),
    )
    .unwrap();

    // 1. Emit; the product creates the stream with three replicas.
    let mut emitter = Emitter::spawn(&data_dir, &config, &seed, work.path().join("demo.stderr"));
    emitter.await_more(100, Duration::from_secs(30), "before the kill");
    let seed_url = &seed;
    let info = eventually(
        "the DLQ stream with 3 current replicas and messages",
        Duration::from_secs(30),
        || async move {
            stream_info(seed_url)
                .await
                .filter(|i| all_replicas_current(i) && i.state.messages > 0)
        },
    )
    .await;
    // The node to kill is n1: the emitter's seed (its connection must fail over to the nodes the
    // cluster advertised) and, after step-downs if needed, the stream's leader (the survivors
    // must elect a new one without losing or doubling an acknowledged event).
    let victim = 0;
    let leader_name = cluster.name(victim).to_owned();
    let info = move_stream_leader(&seed, &leader_name, info).await;
    let survivor = 1;
    let survivor_url = cluster.url(survivor);
    eprintln!(
        "stream leader {leader_name}, the emitter's seed: killing it during emission ({} acked, stream last seq {}, {:?} since start)",
        emitter.drain(),
        info.state.last_sequence,
        started.elapsed()
    );

    // 2. SIGKILL the stream leader while events keep coming.
    let last_seq_at_kill = info.state.last_sequence;
    cluster.kill(victim);
    emitter.await_more(100, Duration::from_secs(30), "with a node down");
    // The two survivors elect a new leader and keep accepting events.
    let (survivor_ref, old_leader) = (&survivor_url, &leader_name);
    let new_leader = eventually(
        "the stream to accept events again with one node down",
        Duration::from_secs(30),
        || async move {
            let info = stream_info(survivor_ref).await?;
            let leader = info.cluster.as_ref()?.leader.clone()?;
            (info.state.last_sequence > last_seq_at_kill && leader != *old_leader).then_some(leader)
        },
    )
    .await;
    eprintln!(
        "new leader {new_leader}; {} acked, {:?} since start",
        emitter.drain(),
        started.elapsed()
    );

    // 3. Restart the node; emission goes on.
    cluster.restart(victim);
    emitter.await_more(100, Duration::from_secs(30), "after the restart");
    emitter.kill();
    let acked = emitter.acked.clone();
    eprintln!(
        "emitter killed after {} acknowledged events, {:?} since start",
        acked.len(),
        started.elapsed()
    );

    // 4. Publish what the bus never acknowledged.
    let out = run_bounded(
        {
            let mut cmd = dlq(&data_dir, &config, &survivor_url);
            cmd.args(["reconcile", "--timeout", "120s"]);
            cmd
        },
        Duration::from_secs(130),
    );
    let report = json(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "reconcile: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["unpublished_after"], 0, "{report}");
    eprintln!("reconcile: {report}");

    // 5. Every acknowledged event is in the stream exactly once (read through a survivor).
    let ids = stream_ids(&survivor_url, STREAM).await;
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for id in &ids {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    let duplicated: Vec<(&&str, &usize)> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "events stored twice in the stream: {:?}",
        &duplicated[..duplicated.len().min(10)]
    );
    let missing: Vec<&String> = acked
        .iter()
        .filter(|id| !counts.contains_key(id.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged events are not in the stream, e.g. {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(ids.len() >= acked.len());

    // 6. The sink and the stream agree.
    let out = run_bounded(
        {
            let mut cmd = dlq(&data_dir, &config, &survivor_url);
            cmd.arg("verify");
            cmd
        },
        Duration::from_secs(60),
    );
    let report = json(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "verify found differences: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["missing"], 0, "{report}");
    assert_eq!(report["unpublished"], 0, "{report}");

    // 7. Three replicas, and the restarted node is a current peer again.
    let restarted = cluster.name(victim);
    let info = eventually(
        "the restarted node to be a current replica",
        Duration::from_secs(30),
        || async move {
            stream_info(survivor_ref).await.filter(|i| {
                all_replicas_current(i)
                    && i.cluster.as_ref().is_some_and(|c| {
                        c.leader.as_deref() == Some(restarted)
                            || c.replicas.iter().any(|p| p.name == restarted && p.current)
                    })
            })
        },
    )
    .await;
    assert_eq!(info.config.num_replicas, 3);
    assert_eq!(info.state.messages as usize, ids.len());
    // The restarted node serves the whole stream too.
    let through_restarted = stream_info(&cluster.url(victim)).await.unwrap();
    assert_eq!(
        through_restarted.state.last_sequence,
        info.state.last_sequence
    );
    let cluster_info = info.cluster.unwrap();
    eprintln!(
        "done in {:?}: {} acknowledged, {} stream messages, leader {:?}, replicas {:?}",
        started.elapsed(),
        acked.len(),
        ids.len(),
        cluster_info.leader,
        cluster_info
            .replicas
            .iter()
            .map(|p| (p.name.as_str(), p.current))
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_three_replica_stream_stays_so_when_a_node_runs_with_one() {
    let _serial = SERIAL.lock().await;
    let cluster = NatsCluster::start();
    let seed = cluster.url(0);
    let week = Duration::from_secs(7 * 86_400);
    let client = async_nats::connect(&seed).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: STREAM.into(),
        subjects: vec!["sys.job.dlq".into()],
        num_replicas: 3,
        max_age: week,
        max_messages: 1_000_000,
        // Shorter than dlq's default (2m): a weaker setting dlq warns about and keeps.
        duplicate_window: Duration::from_secs(30),
        ..Default::default()
    })
    .await
    .unwrap();
    let before = eventually("the stream's info", Duration::from_secs(20), || {
        stream_info(&seed)
    })
    .await
    .config;

    // The node's configuration leaves `bus.replicas` at its default, 1.
    let work = tempfile::tempdir().unwrap();
    let config = work.path().join("dlq.yml");
    std::fs::write(
        &config,
        format!("bus:\n  url: {seed}\n  publish_timeout: 2s\ntopics:\n  default:\n    retry_attempts: 0\n"),
    )
    .unwrap();
    let mut demo = dlq(&work.path().join("data"), &config, &seed);
    demo.args(["demo", "--count", "3", "--drain-timeout", "10s"]);
    let out = run_bounded(demo, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo: {stderr}\n{}",
        cluster.log_tails()
    );
    let after = eventually("the stream's info", Duration::from_secs(20), || {
        stream_info(&seed)
    })
    .await;
    assert_eq!(
        after.config.num_replicas, 3,
        "scaled down: {:?}",
        after.config
    );
    assert_eq!(
        (after.config.max_age, after.config.max_messages),
        (week, 1_000_000)
    );
    assert_eq!(after.config, before);
    assert!(
        after.state.messages >= 3,
        "the demo published: {:?}",
        after.state
    );
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("drops re-published event ids for 30s"))
        .collect();
    assert_eq!(warnings.len(), 1, "one warning per connect: {stderr}");
    assert!(!stderr.contains("replica"), "no replica warning: {stderr}");
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn cluster_script_starts_reports_kills_restarts_and_stops_the_nodes() {
    let _serial = SERIAL.blocking_lock();
    let cluster = ScriptCluster::new();
    let ports = cluster.ports.clone();

    let out = cluster.run(&["start"]);
    assert!(
        out.status.success(),
        "start: {}\n{}",
        text(&out),
        cluster.log_tails()
    );
    assert!(text(&out).contains("cluster healthy"), "{}", text(&out));
    for node in 0..3 {
        assert!(healthz_ok(ports.http[node]), "n{} not healthy", node + 1);
        assert!(meta_leader(ports.http[node]).is_some());
    }
    let out = cluster.run(&["status"]);
    assert!(out.status.success(), "status: {}", text(&out));
    assert_eq!(text(&out).matches("healthy, meta leader n").count(), 3);

    // Starting again is harmless; the same ports in another base dir are refused.
    let out = cluster.run(&["start"]);
    assert!(out.status.success(), "second start: {}", text(&out));
    assert_eq!(text(&out).matches("already running").count(), 3);

    let n2 = cluster.pid(1).expect("pid file of n2");
    let out = cluster.run(&["kill", "n2"]);
    assert!(out.status.success(), "kill: {}", text(&out));
    assert!(!Path::new(&format!("/proc/{n2}/cmdline")).exists() || !healthz_ok(ports.http[1]));
    let out = cluster.run(&["status"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "status with n2 down: {}",
        text(&out)
    );
    assert!(text(&out).contains("n2: stopped"), "{}", text(&out));

    let out = cluster.run(&["restart", "n2"]);
    assert!(
        out.status.success(),
        "restart: {}\n{}",
        text(&out),
        cluster.log_tails()
    );
    assert!(healthz_ok(ports.http[1]));
    assert_ne!(cluster.pid(1), Some(n2));

    let out = cluster.run(&["kill", "n7"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("unknown node 'n7'"), "{}", text(&out));

    let out = cluster.run(&["stop"]);
    assert!(out.status.success(), "stop: {}", text(&out));
    assert_eq!(
        text(&out).matches("stopped (pid").count(),
        3,
        "{}",
        text(&out)
    );
    for node in 0..3 {
        assert!(
            cluster.pid(node).is_none(),
            "pid file left for n{}",
            node + 1
        );
        assert!(!healthz_ok(ports.http[node]));
    }
}

/// Every `dlq_*` metric name in a text.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("dlq_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let preceded_by_word = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        // `dlq_.+` (a regex in the dashboard's variables) names no metric.
        if !preceded_by_word && end > "dlq_".len() {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

#[test]
fn deployment_files_are_valid_and_cover_every_exported_metric() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let config = dlq::config::Config::load(&root.join("dlq.cluster.yml"))
        .unwrap_or_else(|err| panic!("deploy/dlq.cluster.yml: {err}"));
    assert_eq!(config.bus.0.replicas, 3);
    assert_eq!(
        dlq::bus::server_list(&config.bus.0.url).len(),
        3,
        "all three seeds"
    );

    let exported: BTreeSet<String> = [
        dlq::metrics::EMIT_FAILURES,
        dlq::metrics::SINK_FAILURES,
        dlq::metrics::UNPUBLISHED,
        dlq::metrics::RECONCILED,
        dlq::metrics::OLDEST_UNPUBLISHED_AGE,
        dlq::metrics::EVENTS_STORED,
        dlq::metrics::PUBLISHED,
        dlq::metrics::EMIT_DURATION,
        dlq::metrics::PARKED,
        dlq::metrics::PARKED_TOTAL,
        dlq::metrics::ANTI_ENTROPY_CHECKED,
        dlq::metrics::ANTI_ENTROPY_MISSING,
        dlq::metrics::ANTI_ENTROPY_REPUBLISHED,
        dlq::metrics::ANTI_ENTROPY_DUPLICATES,
        dlq::metrics::ANTI_ENTROPY_DROPPED,
        dlq::metrics::ANTI_ENTROPY_TRACKED,
        dlq::metrics::ANTI_ENTROPY_OLDEST_UNCHECKED_AGE,
        dlq::metrics::ANTI_ENTROPY_LAST_PASS,
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    // The durable consumer's metrics (src/consumer/durable.rs).
    let mut known = exported.clone();
    for name in [
        dlq::consumer::LAG,
        dlq::consumer::APPLIED,
        dlq::consumer::DUPLICATES,
        dlq::consumer::WAITING,
        dlq::consumer::OLDEST_WAITING_AGE,
        dlq::consumer::READ_BY_SEQUENCE,
        dlq::consumer::ABSENT,
    ] {
        known.insert(name.to_owned());
    }

    let dashboard = std::fs::read_to_string(root.join("grafana/dlq-dashboard.json")).unwrap();
    let parsed: Value = serde_json::from_str(&dashboard).expect("dashboard is JSON");
    assert!(parsed["panels"].as_array().is_some_and(|p| !p.is_empty()));
    let on_dashboard = metric_names(&dashboard);
    for name in &known {
        assert!(
            on_dashboard.contains(name),
            "no dashboard panel uses {name}"
        );
    }
    let alerts = std::fs::read_to_string(root.join("prometheus/alerts.yml")).unwrap();
    let scrape = std::fs::read_to_string(root.join("prometheus/prometheus.yml")).unwrap();
    for (file, names) in [
        ("grafana/dlq-dashboard.json", on_dashboard),
        ("prometheus/alerts.yml", metric_names(&alerts)),
    ] {
        for name in names {
            // A summary also has `_sum` and `_count` series.
            let base = name
                .strip_suffix("_sum")
                .or_else(|| name.strip_suffix("_count"))
                .filter(|base| *base == dlq::metrics::EMIT_DURATION)
                .unwrap_or(&name);
            assert!(
                known.contains(base),
                "deploy/{file} uses {name}, which dlq does not export"
            );
        }
    }
    for name in [
        "dlq_emit_failures_total",
        "dlq_oldest_unpublished_age_seconds",
        "dlq_parked_events",
        "dlq_consumer_lag",
        "dlq_consumer_oldest_waiting_age_seconds",
        "dlq_anti_entropy_republished_total",
        "dlq_anti_entropy_last_pass_timestamp_seconds",
    ] {
        assert!(alerts.contains(name), "no alert on {name}");
    }
    assert!(scrape.contains("alerts.yml") && scrape.contains("/metrics"));
    // The emit-duration panel reads the summary's quantiles.
    assert!(dashboard.contains("quantile=~"));
}
