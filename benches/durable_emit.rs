#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Durable-emit benchmark: `cargo bench --bench durable_emit -- [--quick] [--json PATH]`.
//! Measures (1) this disk's fsync and group-commit limits, (2) `dead_letter` with a real
//! nats-server up and (3) killed, at K = 1, 8, 64 concurrent emitters, and (4) the reconciler
//! draining a backlog. It reports and never asserts; see `benches/README.md`.

#[path = "../tests/common/mod.rs"]
mod common;

use common::items::template_item;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use std::{fs::File, future::Future, io::Write, os::unix::io::AsRawFd, path::Path, path::PathBuf};

use common::NatsServer;
use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::decide::Command;
use dlq::emitter::{EmitterBuilder, TopicPolicies};
use dlq::model::DeadLetteredItem;
use dlq::reconciler::ReconcilerConfig;
use dlq::sink::{Sink, SinkConfig, SledSink};
use hdrhistogram::Histogram;
use serde::Serialize;

const TOPIC: &str = "bench";
const JOBS: usize = 64;
const CONCURRENCY: [usize; 3] = [1, 8, 64];
const BATCH_SIZES: [usize; 4] = [1, 8, 64, 256];
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
const TARGET_P99_US: u64 = 5_000;
const TARGET_RATE: f64 = 20_000.0;

/// Full and `--quick`: single fsyncs, group commits per batch size, emits per K, backlog.
const FULL: [usize; 4] = [2_000, 200, 20_000, 100_000];
const QUICK: [usize; 4] = [300, 30, 3_000, 10_000];
/// Without `--bench` (i.e. under `cargo test --all-targets`): a seconds-long smoke run of every
/// section, so CI proves the benchmark still works without spending minutes on it.
const SMOKE: [usize; 4] = [20, 3, 200, 500];

/// One line of the results table (and of the JSON).
#[derive(Serialize, Default)]
struct Row {
    section: &'static str,
    name: String,
    count: u64,
    calls_per_sec: Option<f64>,
    events_per_sec: Option<f64>,
    p50_us: Option<u64>,
    p99_us: Option<u64>,
    p999_us: Option<u64>,
    target: Option<String>,
    target_met: Option<bool>,
    note: String,
}

impl Row {
    fn new(section: &'static str, name: impl Into<String>, count: usize) -> Row {
        let mut row = Row::default();
        (row.section, row.name, row.count) = (section, name.into(), count as u64);
        row
    }
    fn latency(mut self, h: &Histogram<u64>) -> Row {
        self.p50_us = Some(h.value_at_quantile(0.50));
        self.p99_us = Some(h.value_at_quantile(0.99));
        self.p999_us = Some(h.value_at_quantile(0.999));
        self
    }
    fn rates(mut self, calls: Option<f64>, events: Option<f64>) -> Row {
        (self.calls_per_sec, self.events_per_sec) = (calls, events);
        self
    }
    fn target(mut self, text: &str, met: bool) -> Row {
        (self.target, self.target_met) = (Some(text.into()), Some(met));
        self
    }
    fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds")
}

/// Bytes this process sent towards storage (`write_bytes` of /proc/self/io: pages dirtied).
fn disk_bytes_written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: ")?.trim().parse().ok())
        .unwrap_or(0)
}

/// The filesystem type and device of the mount holding `path`, from /proc/mounts.
fn filesystem_of(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best = (0, "unknown".to_string());
    let fields = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>());
    for f in fields {
        if f.len() > 2 && path.starts_with(f[1]) && f[1].len() >= best.0 {
            best = (f[1].len(), format!("{} on {} ({})", f[2], f[0], f[1]));
        }
    }
    best.1
}

// ---------------------------------------------------------------- 1. the physical limit

extern "C" {
    fn sync_file_range(fd: i32, offset: i64, nbytes: i64, flags: u32) -> i32;
}
/// SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER: what sled 0.34 calls on Linux.
const SFR_ALL: u32 = 1 | 2 | 4;

/// Per-group latencies and the elapsed seconds of a run of group commits.
type Groups = (Histogram<u64>, f64);
type SyncFn = fn(&File, u64) -> std::io::Result<()>;

/// `rounds` group commits of `batch` 1 KiB appends to a plain file, one `sync` per group.
fn plain_groups(path: &Path, batch: usize, rounds: usize, sync: SyncFn) -> Groups {
    let mut file = File::create(path).expect("create probe file");
    let (block, mut h, started) = ([0x5au8; 1024], histogram(), Instant::now());
    for round in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            file.write_all(&block).expect("write probe");
        }
        let offset = (round * batch * 1024) as u64;
        sync(&file, offset).expect("sync probe");
        h.saturating_record(t.elapsed().as_micros() as u64);
    }
    (h, started.elapsed().as_secs_f64())
}

fn sfr(file: &File, offset: u64) -> std::io::Result<()> {
    // SAFETY: a plain syscall on an open descriptor; nbytes 0 means "to the end of the file".
    match unsafe { sync_file_range(file.as_raw_fd(), offset as i64, 0, SFR_ALL) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `rounds` group commits of `batch` sink-like commands (a ~1.9 KiB log entry, ~1.7 KiB item,
/// markers and indexes) on sled, then `flush` + fdatasync of sled's log file, as the sink's
/// writer does. `merged`: the whole group as one `apply_batch` instead of one per command.
fn sled_groups(dir: &Path, batch: usize, rounds: usize, merged: bool) -> Groups {
    let path = dir.join(format!("sled-{batch}-{merged}.probe"));
    let config = sled::Config::new().path(&path).segment_size(8 << 20);
    let db = config.flush_every_ms(None).open().expect("open sled");
    let log = File::open(path.join("db")).expect("open sled log file");
    let (event, item) = (vec![0x5au8; 1900], vec![0x5bu8; 1700]);
    let (mut h, mut seq, started) = (histogram(), 0u64, Instant::now());
    for _ in 0..rounds {
        let t = Instant::now();
        let mut group = sled::Batch::default();
        for _ in 0..batch {
            seq += 1;
            let mut one = sled::Batch::default();
            let b = if merged { &mut group } else { &mut one };
            b.insert(format!("l/{seq:016x}").as_bytes(), event.clone());
            b.insert(format!("u/{seq:016x}").as_bytes(), &seq.to_be_bytes());
            let job = seq % 64;
            b.insert(format!("i/job-{job}\0item-{seq}").as_bytes(), item.clone());
            b.insert(format!("s/0123456789abcdef/job/item-{seq}").as_bytes(), &[]);
            b.insert(format!("a/{seq:016x}/job/item-{seq}").as_bytes(), &[]);
            b.insert(format!("f/job-{job}/{seq:016x}").as_bytes(), &[]);
            b.insert(format!("c/job-{job}").as_bytes(), &seq.to_be_bytes());
            b.insert(b"n".as_slice(), &seq.to_be_bytes());
            if !merged {
                db.apply_batch(one).expect("apply batch");
            }
        }
        if merged {
            db.apply_batch(group).expect("apply batch");
        }
        db.flush().expect("sled flush");
        log.sync_data().expect("fdatasync sled log");
        h.saturating_record(t.elapsed().as_micros() as u64);
    }
    (h, started.elapsed().as_secs_f64())
}

fn physical_limit(dir: &Path, n: usize, rounds: usize, rows: &mut Vec<Row>) {
    let fdatasync: SyncFn = |file, _| file.sync_data();
    for (name, sync) in [("fdatasync", fdatasync), ("sync_file_range", sfr)] {
        let (h, _) = plain_groups(&dir.join(format!("{name}.probe")), 1, n, sync);
        let implied_max = 1e6 / h.value_at_quantile(0.5).max(1) as f64;
        let row = Row::new("1 limit", format!("1 KiB append + {name}"), n).latency(&h);
        let note = [FSYNC_NOTE, SFR_NOTE][usize::from(name != "fdatasync")];
        rows.push(row.rates(Some(implied_max), None).note(note));
    }
    let sled = [(1, 1), (8, 1), (64, 1), (64, 2), (256, 1), (256, 2)];
    for (batch, kind) in BATCH_SIZES.map(|b| (b, 0)).into_iter().chain(sled) {
        let path = dir.join(format!("g{batch}.probe"));
        let (h, secs) = match kind {
            0 => plain_groups(&path, batch, rounds, fdatasync),
            _ => sled_groups(dir, batch, rounds, kind == 2),
        };
        let (name, note) = GROUP_KINDS[kind];
        let per_sec = rounds as f64 / secs;
        let row = Row::new("1 limit", name, batch * rounds).latency(&h);
        let row = row.rates(Some(per_sec), Some(per_sec * batch as f64));
        rows.push(row.note(format!("batch {batch}; {note}")));
    }
}

/// The group-commit probes: plain file; sled with one `apply_batch` per command (as the sink's
/// writer does); sled with the whole group merged into one `apply_batch`.
const GROUP_KINDS: [(&str, &str); 3] = [
    (
        "plain-file group commit",
        "1 KiB records; one fdatasync per batch",
    ),
    ("sled group commit, one apply_batch per command", SLED_NOTE),
    ("sled group commit, one merged apply_batch", SLED_NOTE),
];
const FSYNC_NOTE: &str = "calls/s = implied max fsyncs/s (1 / p50)";
const SFR_NOTE: &str = "sled 0.34's own sync: no disk-cache flush, no file size; not durable alone";
const SLED_NOTE: &str = "sink-like commands (~3.6 KiB, 8 keys); flush + fdatasync(db) per batch";

// ---------------------------------------------------------------- 2-3. durable emit

/// The template with a new item id (never used before in this process) in one of `JOBS` jobs.
fn next_item(template: &DeadLetteredItem, job: usize) -> DeadLetteredItem {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    let mut item = template.clone();
    item.job_id = format!("job-{}", job % JOBS);
    item.item_id = format!("item-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
    item
}

fn open_sink(dir: &Path) -> SledSink {
    let mut config = SinkConfig::new(dir);
    config.capacity_per_job = 10_000_000; // distinct ids and no FIFO eviction
    SledSink::open(config).expect("open sink")
}

async fn connect_bus(url: String) -> NatsBus {
    let mut config = BusConfig::default();
    (config.url, config.publish_timeout) = (url, PUBLISH_TIMEOUT);
    NatsBus::connect(config).await.expect("connect bus")
}

async fn wait_healthy<B: Bus>(bus: &B) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !bus.is_healthy() {
        assert!(Instant::now() < deadline, "bus not connected within 20 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Per-call latencies, seconds taken, calls that returned `Ok(true)`, errors.
type Run = (Histogram<u64>, f64, u64, Vec<String>);

/// `total` calls of `call(task, i)` spread over `k` concurrent tasks. The closure's own
/// (synchronous) part, building the item, runs before the clock starts.
async fn run_concurrent<F, Fut>(k: usize, total: usize, call: F) -> Run
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<bool, String>> + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..k)
        .map(|task| {
            let call = call.clone();
            let calls = total / k + usize::from(task < total % k);
            tokio::spawn(async move {
                let (mut hist, mut ok, mut errors) = (histogram(), 0, Vec::new());
                for i in 0..calls {
                    let pending = call(task, i);
                    let t = Instant::now();
                    let result = pending.await;
                    hist.saturating_record(t.elapsed().as_micros() as u64);
                    match result {
                        Ok(flag) => ok += u64::from(flag),
                        Err(err) => errors.push(err),
                    }
                }
                (hist, ok, errors)
            })
        })
        .collect();
    let mut run = (histogram(), 0.0, 0, Vec::new());
    for task in tasks {
        let (hist, ok, errors) = task.await.expect("bench task");
        run.0.add(&hist).unwrap();
        run.2 += ok;
        run.3.extend(errors);
    }
    run.1 = started.elapsed().as_secs_f64();
    if let Some(first) = run.3.first() {
        eprintln!("{} calls failed; the first: {first}", run.3.len());
    }
    run
}

/// One scenario per K: a fresh sink and emitter, a warm-up, then `total` measured calls.
async fn emit_scenarios(base: &Path, url: &str, bus_up: bool, total: usize, rows: &mut Vec<Row>) {
    let (section, per_call) = [("3 bus down", 2.0), ("2 bus up", 1.0)][usize::from(bus_up)];
    // Bus down: no retry, so an emit is a durable write, an immediate "disconnected" and an
    // `EmitFailed` audit event appended after it.
    let mut policies = TopicPolicies::default();
    policies.default.retry_attempts = if bus_up { 1 } else { 0 };
    for k in CONCURRENCY {
        let sink = open_sink(&base.join(format!("emit-{section}-k{k}")));
        let emitter = EmitterBuilder::new(sink, connect_bus(url.into()).await)
            .policies(policies.clone())
            .publish_timeout(PUBLISH_TIMEOUT)
            .reconciler(Some(ReconcilerConfig::default()))
            .build();
        if bus_up {
            wait_healthy(emitter.bus()).await;
        }
        let (handle, template) = (emitter.clone(), template_item());
        let call = move |task, i| {
            let (emitter, item) = (handle.clone(), next_item(&template, task + i));
            async move {
                let receipt = emitter.dead_letter(TOPIC, item).await;
                receipt.map(|r| r.published).map_err(|e| e.to_string())
            }
        };
        run_concurrent(k, (total / 10).clamp(k, 500), call.clone()).await; // warm-up
        let disk_before = disk_bytes_written();
        let (hist, secs, published, errors) = run_concurrent(k, total, call).await;
        let events = total as f64 * per_call;
        let kib = (disk_bytes_written() - disk_before) as f64 / 1024.0 / events;
        let event = emitter.sink().event(1).ok().flatten();
        let bytes = event.and_then(|e| e.to_json().ok()).map_or(0, |j| j.len());
        let backlog = emitter.sink().backlog().map_or(0, |b| b.count);
        emitter.shutdown().await.expect("shutdown");
        let (p99, rate) = (hist.value_at_quantile(0.99), events / secs);
        let name = format!("durable emit, K={k}");
        let mut row = Row::new(section, name, total).latency(&hist);
        row = row.rates(Some(total as f64 / secs), Some(rate));
        let mut note = format!("event {bytes} B, {kib:.1} KiB to disk per event; ");
        note += &format!("published {published}/{total}; backlog after {backlog}");
        note += &format!("; errors {}", errors.len());
        if !bus_up {
            note += "; 2 events per emit (item + EmitFailed audit), 2 serial commits";
        }
        if k == 64 {
            let met = p99 <= TARGET_P99_US && rate >= TARGET_RATE;
            row = row.target("p99 <= 5 ms, >= 20000 events/s", met);
        }
        eprintln!("  K={k}: {:.0} emits/s, p99 {p99} us", total as f64 / secs);
        rows.push(row.note(note));
    }
}

// ---------------------------------------------------------------- 4. reconciler drain

/// Builds a backlog of `n` events with the bus down (256 tasks appending dead-letters
/// straight to the sink), then starts a server and times the reconciler until it is empty.
async fn drain(base: &Path, n: usize, rows: &mut Vec<Row>) {
    const APPENDERS: usize = 256;
    let (sink, template) = (open_sink(&base.join("drain")), template_item());
    let (appender, disk_before) = (sink.clone(), disk_bytes_written());
    let (hist, secs, _, errors) = run_concurrent(APPENDERS, n, move |task, i| {
        let item = Box::new(next_item(&template, task + i));
        let (sink, topic) = (appender.clone(), TOPIC.to_owned());
        async move {
            let appended = sink.append(Command::DeadLetter { topic, item }).await;
            appended.map(|_| false).map_err(|e| e.to_string())
        }
    })
    .await;
    let kib = (disk_bytes_written() - disk_before) as f64 / 1024.0 / n as f64;
    let name = format!("backlog build: Sink::append x{APPENDERS} concurrent");
    let note = format!("sink only, no emitter or bus; {kib:.1} KiB to disk per event");
    let row = Row::new("4 drain", name, n).latency(&hist);
    let row = row.rates(Some(n as f64 / secs), Some(n as f64 / secs));
    rows.push(row.note(format!("{note}; errors {}", errors.len())));

    let backlog = sink.backlog().expect("backlog").count;
    assert_eq!(backlog, n as u64, "backlog size");
    let server = NatsServer::start();
    let bus = connect_bus(server.url()).await;
    wait_healthy(&bus).await;
    bus.ensure_stream().await.expect("stream");
    let config = ReconcilerConfig {
        max_in_flight: 256,
        ..ReconcilerConfig::default()
    };
    let started = Instant::now();
    let emitter = EmitterBuilder::new(sink, bus)
        .publish_timeout(PUBLISH_TIMEOUT)
        .reconciler(Some(config))
        .build();
    let deadline = started + Duration::from_secs(600);
    let mut left = backlog;
    while left > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        left = emitter.sink().backlog().expect("backlog").count;
    }
    let secs = started.elapsed().as_secs_f64();
    emitter.shutdown().await.expect("shutdown");
    let rate = (backlog - left) as f64 / secs;
    let name = "reconciler drain, max_in_flight 256";
    let row = Row::new("4 drain", name, n).rates(None, Some(rate));
    let row = row.target(">= 20000 events/s", rate >= TARGET_RATE && left == 0);
    let note = format!("{} published in {secs:.2} s; {left} left", backlog - left);
    rows.push(row.note(note));
}

// ---------------------------------------------------------------- output

fn print_table(rows: &[Row]) {
    let rate = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format!("{v:.0}"));
    let ms = |v: Option<u64>| v.map_or_else(|| "-".into(), |us| format!("{:.3}", us as f64 / 1e3));
    println!("| section | measurement | n | calls/s | durable events/s | p50 ms | p99 ms | p999 ms | target | notes |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|---|");
    for r in rows {
        let target = match (&r.target, r.target_met) {
            (Some(t), Some(met)) => format!("{t}: {}", if met { "met" } else { "**NOT met**" }),
            _ => "-".into(),
        };
        let rates = [r.calls_per_sec, r.events_per_sec].map(rate).join(" | ");
        let latency = [r.p50_us, r.p99_us, r.p999_us].map(ms).join(" | ");
        let (section, name, n, note) = (r.section, &r.name, r.count, &r.note);
        println!("| {section} | {name} | {n} | {rates} | {latency} | {target} | {note} |");
    }
}

fn main() {
    let (mut quick, mut json, mut dir) = (false, None::<PathBuf>, None::<PathBuf>);
    let mut benching = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--json" => json = Some(args.next().expect("--json needs a path").into()),
            "--dir" => dir = Some(args.next().expect("--dir needs a directory").into()),
            "--bench" => benching = true, // added by `cargo bench` for `harness = false` targets
            other => eprintln!("ignoring unknown argument {other:?}"),
        }
    }
    let [fsyncs, rounds, emits, backlog] = match (benching, quick) {
        (false, _) => SMOKE,
        (true, true) => QUICK,
        (true, false) => FULL,
    };
    let (base, location) = match (dir, option_env!("CARGO_TARGET_TMPDIR")) {
        (Some(dir), _) => (dir, "--dir"),
        (None, Some(tmp)) => (PathBuf::from(tmp), "the target dir (CARGO_TARGET_TMPDIR)"),
        (None, None) => (std::env::temp_dir(), "the system temp dir"),
    };
    std::fs::create_dir_all(&base).expect("create bench base dir");
    let tmp = tempfile::tempdir_in(&base).expect("temp dir"); // removed at exit
    let dir = tmp.path();
    let fs = filesystem_of(dir);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mode = match (benching, quick) {
        (false, _) => "smoke (run by cargo test; use cargo bench for figures)",
        (true, true) => "quick",
        (true, false) => "full",
    };
    println!("# dlq durable_emit benchmark ({mode})\n");
    let shown = dir.display();
    println!("- temp dir: `{shown}` (under {location}); filesystem: {fs}");
    println!("- cores: {cores}; a private `nats-server -js` per bus section (its store under the system temp dir)");
    println!("- each emit: ~1 KiB `item_data`, a distinct item id over {JOBS} jobs, capacity_per_job 10,000,000\n");

    let started = Instant::now();
    let mut rows = Vec::new();
    eprintln!("1/4 physical limit ...");
    physical_limit(dir, fsyncs, rounds, &mut rows);
    let runtime = tokio::runtime::Runtime::new().expect("runtime"); // one worker per core
    runtime.block_on(async {
        let mut server = NatsServer::start();
        eprintln!("2/4 durable emit, bus up ...");
        emit_scenarios(dir, &server.url(), true, emits, &mut rows).await;
        server.kill();
        eprintln!("3/4 durable emit, bus down ...");
        emit_scenarios(dir, &server.url(), false, emits, &mut rows).await;
        eprintln!("4/4 backlog and reconciler drain ...");
        drain(dir, backlog, &mut rows).await;
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    let elapsed = started.elapsed().as_secs_f64();

    print_table(&rows);
    println!("\nTargets (reported, never asserted): p99 emit <= 5 ms at K=64; >= 20,000 durable events/s; drain >= 20,000 events/s.");
    println!("Total bench time: {elapsed:.1} s");
    if let Some(path) = json {
        let doc = serde_json::json!({
            "mode": mode, "temp_dir": dir.display().to_string(), "temp_dir_location": location,
            "filesystem": fs, "cores": cores, "elapsed_secs": elapsed, "results": rows,
        });
        let file = File::create(&path).expect("create json file");
        serde_json::to_writer_pretty(file, &doc).expect("write json");
        println!("JSON written to {}", path.display());
    }
}
