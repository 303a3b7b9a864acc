#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Memory and disk of a large sink:
//! `cargo bench --bench sink_footprint -- [--items N] [--dir DIR] [--emits N] [--json PATH]`.
//!
//! 1. **Emitter RSS**: this process opens the sink on a data set of N items (default 100,000,
//!    made with the hidden `dlq generate`; `--dir` reuses one, or generates it there and keeps
//!    it), builds an emitter with the reconciler against a private nats-server, and emits
//!    `--emits` new items (default 10,000, ~1 KiB `item_data`, 64 in flight, 64 new jobs).
//!    Resident memory (VmRSS, VmHWM of /proc/self/status) before the open, after it, and after
//!    the emits. The sink's default configuration (64 MiB sled cache).
//! 2. **Disk bytes per item**: the data directory's size over the items in it, and where the
//!    bytes go: every key of the sled tree read back, key and value bytes summed per key
//!    prefix (log entries, items, each index, counters); the rest is sled's own overhead.
//!
//! The emits *write to the data set*: point `--dir` at a copy to keep one pristine. Without
//! `--bench` (under `cargo test --all-targets`) it is a seconds-long smoke run (2,000 items).
//! It reports and never asserts a figure.

/// The allocator the `dlq` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::emitter::reconciler::ReconcilerConfig;
use dlq::emitter::EmitterBuilder;
use dlq::sink::test_support::key_prefixes as keys;
use dlq::sink::{LocalSink, Sink, SinkConfig};
use dlq_ops::query::stats::stats;
use dlq_testkit::bench::suite;
use dlq_testkit::items::template_item;
use dlq_testkit::NatsServer;
use suite::SuiteRow;

const BIN: &str = env!("CARGO_BIN_EXE_dlq");
const SECTION: &str = "6 memory and disk";
const IN_FLIGHT: usize = 64;

/// VmRSS and VmHWM of this process, in MiB.
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        kb / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Apparent bytes and allocated bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut total = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()) {
        let Ok(meta) = entry.metadata() else { continue };
        let (len, alloc) = match meta.is_dir() {
            true => dir_bytes(&entry.path()),
            false => (meta.len(), meta.blocks() * 512),
        };
        (total.0, total.1) = (total.0 + len, total.1 + alloc);
    }
    total
}

fn generate(dir: &Path, items: u64) {
    let jobs = items.div_ceil(10_000).max(100).to_string();
    let started = Instant::now();
    let status = Command::new(BIN)
        .arg("--data-dir")
        .arg(dir)
        .args(["--nats-url", "nats://127.0.0.1:1", "generate", "--items"])
        .args([&items.to_string(), "--jobs", &jobs])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .status()
        .expect("spawn dlq generate");
    assert!(status.success(), "dlq generate failed");
    let secs = started.elapsed().as_secs_f64();
    println!("- generated {items} items over {jobs} jobs in {secs:.0} s");
}

/// Opens the sink, emits `emits` items through an emitter with the bus up; RSS rows.
/// Returns the label of the rows ("N items", N as given or as found) and the items after.
async fn emitter_rss(
    data: &Path,
    emits: usize,
    nominal: Option<u64>,
    rows: &mut Vec<SuiteRow>,
) -> (String, u64) {
    let server = NatsServer::start();
    let config = BusConfig {
        url: server.url(),
        ..BusConfig::default()
    };
    let bus = NatsBus::connect(config).await.expect("connect bus");
    let (before, _) = rss_mib();
    let started = Instant::now();
    let sink = LocalSink::open(SinkConfig::new(data)).expect("open sink");
    let open_ms = started.elapsed().as_secs_f64() * 1e3;
    let (opened, _) = rss_mib();
    let items_before = stats(&sink, None).expect("stats").total_items;
    let label = format!(
        "{} items",
        suite::thousands(nominal.unwrap_or(items_before))
    );
    let emitter = EmitterBuilder::new(sink, bus)
        .reconciler(Some(ReconcilerConfig::default()))
        .build();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !emitter.bus().is_healthy() {
        assert!(Instant::now() < deadline, "bus not connected within 20 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (template, next) = (Arc::new(template_item()), Arc::new(AtomicUsize::new(0)));
    let started = Instant::now();
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (emitter, template, next) = (emitter.clone(), template.clone(), next.clone());
            tokio::spawn(async move {
                let mut published = 0;
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= emits {
                        return published;
                    }
                    let mut item = (*template).clone();
                    item.job_id = format!("footprint-{}", n % IN_FLIGHT);
                    item.item_id = format!("fp-{n}");
                    let receipt = emitter.dead_letter("bench", item).await.expect("emit");
                    published += usize::from(receipt.published);
                }
            })
        })
        .collect();
    let mut published = 0;
    for task in tasks {
        published += task.await.expect("emit task");
    }
    let emit_secs = started.elapsed().as_secs_f64();
    let (after, peak) = rss_mib();
    let items_after = stats(emitter.sink(), None).expect("stats").total_items;
    emitter.shutdown().await.expect("shutdown");
    emitter.sink().close().await.expect("close sink");
    drop(emitter);
    drop(server);
    println!("- sink opened in {open_ms:.0} ms; {items_before} items before, {items_after} after {emits} emits ({published} published) in {emit_secs:.1} s");
    println!("- RSS: {before:.0} MiB before the open, {opened:.0} MiB after it, {after:.0} MiB after the emits, peak {peak:.0} MiB\n");
    let rate = emits as f64 / emit_secs;
    let fig = |what: &str| format!("{label}: {what}");
    rows.push(SuiteRow::new(SECTION, fig("emitter RSS after opening the sink"), opened, "MiB").note(format!("VmRSS of the bench process; {before:.0} MiB before the open (runtime, bus client); default sink config (64 MiB sled cache)")));
    rows.push(SuiteRow::new(SECTION, fig(&format!("emitter peak RSS, sink open + {emits} emits")), peak, "MiB").note(format!("VmHWM; {after:.0} MiB resident after the emits; {IN_FLIGHT} in flight, bus up, {rate:.0} emits/s, {published} published")));
    rows.push(
        SuiteRow::new(SECTION, fig("sink open"), open_ms, "ms")
            .note("LocalSink::open of the data directory in this process"),
    );
    (label, items_after)
}

/// Key and value bytes per key prefix of the sled tree in `data` (the sink must be closed).
fn breakdown(data: &Path) -> BTreeMap<u8, (u64, u64, u64)> {
    // Opened as the sink opens it (its segment size), read only.
    let db = sled::Config::new()
        .path(data)
        .segment_size(8 << 20)
        .open()
        .expect("open sled");
    let mut sums: BTreeMap<u8, (u64, u64, u64)> = BTreeMap::new();
    for entry in db.iter() {
        let (key, value) = entry.expect("read entry");
        let sum = sums.entry(key.first().copied().unwrap_or(0)).or_default();
        (sum.0, sum.1, sum.2) = (
            sum.0 + 1,
            sum.1 + key.len() as u64,
            sum.2 + value.len() as u64,
        );
    }
    sums
}

fn prefix_name(prefix: u8) -> &'static str {
    let named = [
        (keys::LOG, "event log of sink format 2 (l)"),
        (keys::UNPUBLISHED, "unpublished markers (u)"),
        (keys::ITEM, "items (i)"),
        (keys::BY_SIGNATURE, "signature index of formats 2-3 (s)"),
        (keys::BY_AGE, "age index of format 4 (a)"),
        (keys::BY_RECENCY, "recency index of format 4 (r)"),
        (keys::FIFO, "FIFO index of format 4 (f)"),
        (keys::AGE_RUNS, "age index runs (A)"),
        (keys::RECENCY_RUNS, "recency index runs (R)"),
        (keys::FIFO_RUNS, "FIFO index runs (F)"),
        (keys::JOB_COUNT, "job counters (c)"),
        (b"m", "metadata (m)"),
    ];
    named
        .iter()
        .find(|(p, _)| p[0] == prefix)
        .map_or("other", |(_, name)| name)
}

fn main() {
    let (mut benching, mut items, mut dir, mut emits) = (false, None, None::<PathBuf>, None);
    let mut json = None::<PathBuf>;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => benching = true,
            "--items" => items = Some(args.next().expect("--items N").parse::<u64>().unwrap()),
            "--emits" => emits = Some(args.next().expect("--emits N").parse::<usize>().unwrap()),
            "--dir" => dir = Some(args.next().expect("--dir DIR").into()),
            "--json" => json = Some(args.next().expect("--json PATH").into()),
            other => eprintln!("ignoring unknown argument {other:?}"),
        }
    }
    let nominal = items;
    let items = items.unwrap_or(if benching { 100_000 } else { 2_000 });
    let emits = emits.unwrap_or(if benching { 10_000 } else { 200 });
    let base = option_env!("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let data = dir.unwrap_or_else(|| tmp.path().join("data"));
    println!("# dlq sink_footprint benchmark\n");
    let reused = data.join("db").exists();
    if reused {
        println!(
            "- reusing the data set in `{}` (the emits below are added to it)",
            data.display()
        );
    } else {
        generate(&data, items);
    }
    let started = Instant::now();
    let mut rows = Vec::new();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let nominal = if reused { nominal } else { Some(items) };
    let (label, total) = runtime.block_on(emitter_rss(&data, emits, nominal, &mut rows));
    runtime.shutdown_timeout(Duration::from_secs(5));

    let (apparent, allocated) = dir_bytes(&data);
    let per_item = |bytes: u64| bytes as f64 / total.max(1) as f64;
    let scan = Instant::now();
    let sums = breakdown(&data);
    let scan_secs = scan.elapsed().as_secs_f64();
    let logical: u64 = sums.values().map(|s| s.1 + s.2).sum();
    println!(
        "Data directory `{}` ({}): {total} items.\n",
        data.display(),
        suite::filesystem_of(&data)
    );
    println!("| what | entries | key bytes | value bytes | bytes per item |");
    println!("|---|---:|---:|---:|---:|");
    let fig = |what: &str| format!("{label}: {what}");
    let du_note = format!(
        "{apparent} B in files ({:.0} MiB; {:.0} MiB allocated) over {total} items",
        apparent as f64 / 1048576.0,
        allocated as f64 / 1048576.0
    );
    rows.push(
        SuiteRow::new(
            SECTION,
            fig("disk bytes per item (data directory)"),
            per_item(apparent),
            "B/item",
        )
        .note(du_note),
    );
    for (&prefix, &(count, key, value)) in &sums {
        let name = prefix_name(prefix);
        let avg = |b: u64| b as f64 / count.max(1) as f64;
        println!(
            "| {name} | {count} | {key} | {value} | {:.0} |",
            per_item(key + value)
        );
        let note = format!(
            "{count} entries, {:.0} B key + {:.0} B value on average",
            avg(key),
            avg(value)
        );
        rows.push(
            SuiteRow::new(
                SECTION,
                fig(&format!("logical bytes per item: {name}")),
                per_item(key + value),
                "B/item",
            )
            .note(note),
        );
    }
    let overhead = apparent.saturating_sub(logical);
    println!("| all keys and values | | | | {:.0} |", per_item(logical));
    println!(
        "| sled overhead (files − keys and values) | | | | {:.0} |",
        per_item(overhead)
    );
    println!(
        "| data directory (files) | | | | {:.0} |\n",
        per_item(apparent)
    );
    println!("Keys read back in {scan_secs:.1} s.");
    rows.push(
        SuiteRow::new(
            SECTION,
            fig("logical bytes per item: all keys and values"),
            per_item(logical),
            "B/item",
        )
        .note("sum of key + value lengths of every entry"),
    );
    rows.push(
        SuiteRow::new(
            SECTION,
            fig("sled overhead per item (files − keys and values)"),
            per_item(overhead),
            "B/item",
        )
        .note("old versions not yet reclaimed, page and segment headers, free space in segments"),
    );
    if let Some(path) = json {
        let mut machine = suite::machine();
        machine.push(("data directory".into(), suite::filesystem_of(&data)));
        let mode = if benching { "full" } else { "smoke" };
        suite::write(
            &path,
            "sink_footprint",
            mode,
            machine,
            started.elapsed().as_secs_f64(),
            &rows,
        );
    }
}
