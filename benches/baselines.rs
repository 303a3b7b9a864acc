#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Baselines in the same run: `cargo bench --bench baselines -- [--quick] [--dir DIR]`.
//!
//! 1. **Reference-000 layout**: one pretty JSON file per item plus an `index.json` regenerated on
//!    every add (re-implemented in [`reference`]), against our sled sink: adds/s at 1,000, 10,000
//!    and 100,000 items, a newest-first page of 50 and the statistics at those sizes.
//! 2. **Publish-only**: JetStream publish with PubAck of the same event bytes, no local sink,
//!    against our durable emit (sink, then publish) at 1 and 64 in flight.
//!
//! Prints a Markdown table (ours, baseline, ratio ours/baseline, target) and writes it to
//! `benches/results/baselines.md` (`baselines-quick.md` with `--quick`). Without `--bench`
//! (under `cargo test --all-targets`) it is a seconds-long smoke run that writes no file.
//! It reports and never asserts a timing; see `benches/README.md`, "baselines".

#[path = "../tests/common/mod.rs"]
mod common;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::NatsServer;
use dlq::bus::{Bus, BusConfig, NatsBus};
use dlq::decide::Command;
use dlq::emitter::{EmitterBuilder, TopicPolicies};
use dlq::event::{Event, EventKind};
use dlq::failure::dead_lettered_item;
use dlq::model::{DeadLetteredItem, FailureDetail};
use dlq::query::list::{in_listing_order, page_in_order, ListRequest};
use dlq::query::stats::stats;
use dlq::query::Filter;
use dlq::reconciler::ReconcilerConfig;
use dlq::sink::{Sink, SinkConfig, SledSink};
use hdrhistogram::Histogram;

/// Every item of the store benches goes to this one job: reference 000 keeps one directory
/// and one `index.json` per job, so a job of n items is where its per-add cost is O(n).
const JOB: &str = "job-0";
const TOPIC: &str = "bench";
const PAGE: usize = 50;
const FILL_IN_FLIGHT: usize = 256;
const IN_FLIGHT: [usize; 2] = [1, 64];
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// Issue 7: ours ≥ 1000× the reference-000 layout's add throughput at 100,000 items.
const TARGET_SIZE: usize = 100_000;
const TARGET_FACTOR: f64 = 1000.0;

/// What one run measures.
struct Mode {
    name: &'static str,
    /// Queue sizes of the store comparison.
    sizes: &'static [usize],
    /// Adds timed at each size: those taking the queue from `size - window` to `size`.
    window: usize,
    /// Calls per in-flight level in the publish comparison.
    emits: usize,
    /// Repetitions of each list / stats (the median is reported).
    reps: usize,
    /// Results file under `benches/results/`.
    file: Option<&'static str>,
}

const FULL: Mode = Mode {
    name: "full",
    sizes: &[1_000, 10_000, 100_000],
    window: 1_000,
    emits: 20_000,
    reps: 5,
    file: Some("baselines.md"),
};
const QUICK: Mode = Mode {
    name: "quick (stops at 10,000 items)",
    sizes: &[1_000, 10_000],
    window: 1_000,
    emits: 3_000,
    reps: 3,
    file: Some("baselines-quick.md"),
};
/// Without `--bench`: every section once, in seconds, so CI proves the bench still works.
const SMOKE: Mode = Mode {
    name: "smoke (run by cargo test; use cargo bench for figures)",
    sizes: &[100, 300],
    window: 100,
    emits: 200,
    reps: 1,
    file: None,
};

// ---------------------------------------------------------------- items

/// The payload of every store bench: ~1 KiB of `item_data`, one `CommandFailed` failure (as
/// in `durable_emit`). Item `i` gets id `item-{i}` and failure time `base + i ms`, so the
/// newest-first order is the insertion order reversed and both stores hold identical items.
struct Items {
    template: DeadLetteredItem,
    base: DateTime<Utc>,
}

impl Items {
    fn new() -> Items {
        let letter = |i: u32| char::from(b'a' + (i * 7 % 26) as u8);
        let blob: String = (0..1024u32).map(letter).collect();
        let data = serde_json::json!({ "file": "src/lib.rs", "priority": 5, "blob": blob });
        let base = Utc::now() - chrono::Duration::days(1);
        let failure: FailureDetail = serde_json::from_value(serde_json::json!({
            "attempt_number": 1, "timestamp": base, "error_type": {"CommandFailed": {"exit_code": 101}},
            "error_message": "cargo test failed with exit code 101", "agent_id": "agent-1",
            "step_failed": "shell: cargo test", "duration_ms": 45_000 }))
        .expect("failure detail");
        let template =
            dead_lettered_item(JOB, "item-0", data, vec![failure], None).expect("one failure");
        Items { template, base }
    }

    fn nth(&self, i: usize) -> DeadLetteredItem {
        let mut item = self.template.clone();
        item.item_id = format!("item-{i}");
        let at = self.base + chrono::Duration::milliseconds(i as i64);
        (item.first_attempt, item.last_attempt) = (at, at);
        for failure in &mut item.failure_history {
            failure.timestamp = at;
        }
        item
    }
}

// ---------------------------------------------------------------- the reference-000 layout

/// Reference 000's storage, re-implemented for this bench from its description (layout, file
/// names, index fields) and, for what the guide leaves open, from the behaviour of the system's
/// `DLQStorage` (`persist`, `update_index`, `load_all`) and `DeadLetterQueue` (`add`,
/// `list_items`, `get_stats`), which the guide cites as `src/cook/execution/dlq.rs`:
///
/// * layout `{base}/mapreduce/dlq/{job_id}/items/{item_id}.json` + `{job_id}/index.json`;
/// * **add** = write the item as pretty-printed JSON (no trailing newline) to its own file,
///   then regenerate `index.json`: list the `items/` directory, take every `*.json` stem as an
///   id, and write `{job_id, item_count, item_ids, updated_at}` pretty-printed over the old
///   index. Both are plain whole-file writes: **no fsync, no temp file + rename** (so neither
///   the item nor the index is durable when `add` returns, and a crash can tear the index);
///   then the item goes into an in-memory map. The index is rebuilt from a directory listing,
///   not read and modified: either way every add costs O(items in the job);
/// * the system has no lock around the disk writes (concurrent adds race on `index.json`), so
///   its adds are measured one at a time;
/// * **list** and **stats** answer from the in-memory map, which a new process (an operator
///   command) first fills with `load_all`: list the directory, read and parse every item file.
///   `list_items` then clones every item and sorts them all newest first; the page is the first
///   50. The index is never read by either: its order is the directory's (hash) order, so it
///   cannot give "newest first" anyway.
///
/// Deliberate differences, all in the baseline's favour: synchronous `std::fs` instead of the
/// system's `tokio::fs` (one blocking-pool hop per call and per 32 directory entries); no
/// capacity check or eviction (the system evicts 10 % of a job's items once it reaches its
/// `max_items`); no event logger. The item JSON is our `DeadLetteredItem` (it also carries `job_id` and
/// `error_pattern`), so both stores write the same bytes of payload.
mod reference {
    use std::collections::HashMap;
    use std::io;
    use std::path::{Path, PathBuf};

    use chrono::{DateTime, Utc};
    use dlq::model::DeadLetteredItem;

    pub struct RefDlq {
        job_id: String,
        job_dir: PathBuf,
        items: HashMap<String, DeadLetteredItem>,
    }

    /// What `get_stats` reports.
    pub struct RefStats {
        pub total_items: usize,
        pub eligible_for_reprocess: usize,
        pub requiring_manual_review: usize,
        pub oldest_item: Option<DateTime<Utc>>,
        pub newest_item: Option<DateTime<Utc>>,
    }

    fn bad_json(err: serde_json::Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, err)
    }

    impl RefDlq {
        /// A queue for `job_id` under `base`, loading what is on disk (as the system does).
        pub fn open(base: &Path, job_id: &str) -> io::Result<RefDlq> {
            let job_dir = base.join("mapreduce").join("dlq").join(job_id);
            let items = load_all(&job_dir)?;
            let job_id = job_id.to_owned();
            Ok(RefDlq {
                job_id,
                job_dir,
                items,
            })
        }

        pub fn job_dir(&self) -> &Path {
            &self.job_dir
        }

        fn item_path(&self, item_id: &str) -> PathBuf {
            self.job_dir.join("items").join(format!("{item_id}.json"))
        }

        /// The add path: item file, index regeneration, in-memory map.
        pub fn add(&mut self, item: DeadLetteredItem) -> io::Result<()> {
            self.write_item(&item)?;
            self.update_index()?;
            self.items.insert(item.item_id.clone(), item);
            Ok(())
        }

        /// Writes only the item file. The bench pre-fills the queue with this and then calls
        /// [`RefDlq::update_index`] once: since every add regenerates the index from the
        /// directory listing, the files left behind are exactly those n faithful adds leave.
        pub fn write_item(&self, item: &DeadLetteredItem) -> io::Result<()> {
            let path = self.item_path(&item.item_id);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let json = serde_json::to_string_pretty(item).map_err(bad_json)?;
            std::fs::write(&path, json) // no fsync
        }

        /// Lists `items/` and rewrites `index.json` whole, pretty-printed, without fsync.
        pub fn update_index(&self) -> io::Result<()> {
            let items_dir = self.job_dir.join("items");
            let mut item_ids = Vec::new();
            if items_dir.exists() {
                for entry in std::fs::read_dir(&items_dir)? {
                    let name = entry?.file_name();
                    if let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".json")) {
                        item_ids.push(id.to_owned());
                    }
                }
            }
            let index = serde_json::json!({
                "job_id": self.job_id,
                "item_count": item_ids.len(),
                "item_ids": item_ids,
                "updated_at": Utc::now(),
            });
            std::fs::create_dir_all(&self.job_dir)?;
            let json = serde_json::to_string_pretty(&index).map_err(bad_json)?;
            std::fs::write(self.job_dir.join("index.json"), json) // no fsync
        }
    }

    /// Lists the directory, reads and parses every item file.
    pub fn load_all(job_dir: &Path) -> io::Result<HashMap<String, DeadLetteredItem>> {
        let items_dir = job_dir.join("items");
        let mut items = HashMap::new();
        if !items_dir.exists() {
            return Ok(items);
        }
        for entry in std::fs::read_dir(&items_dir)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) == Some("json") {
                let text = std::fs::read_to_string(&path)?;
                let item: DeadLetteredItem = serde_json::from_str(&text).map_err(bad_json)?;
                items.insert(item.item_id.clone(), item);
            }
        }
        Ok(items)
    }

    /// `dlq list --limit` in a new process: load everything, clone and sort all newest first,
    /// keep the first `limit`.
    pub fn list(job_dir: &Path, limit: usize) -> io::Result<Vec<DeadLetteredItem>> {
        let items = load_all(job_dir)?;
        let mut all: Vec<DeadLetteredItem> = items.values().cloned().collect();
        all.sort_by_key(|item| std::cmp::Reverse(item.last_attempt)); // newest first
        all.truncate(limit);
        Ok(all)
    }

    /// `dlq stats` in a new process: load everything, count.
    pub fn stats(job_dir: &Path) -> io::Result<RefStats> {
        let items = load_all(job_dir)?;
        Ok(RefStats {
            total_items: items.len(),
            eligible_for_reprocess: items.values().filter(|i| i.reprocess_eligible).count(),
            requiring_manual_review: items.values().filter(|i| i.manual_review_required).count(),
            oldest_item: items.values().map(|i| i.first_attempt).min(),
            newest_item: items.values().map(|i| i.last_attempt).max(),
        })
    }
}

// ---------------------------------------------------------------- helpers

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

/// Calls of a concurrent run: per-call latency (µs), seconds, errors.
struct Run {
    hist: Histogram<u64>,
    secs: f64,
    errors: Vec<String>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.hist.len() as f64 / self.secs
    }
    fn p99_ms(&self) -> f64 {
        self.hist.value_at_quantile(0.99) as f64 / 1e3
    }
    fn p50_p99(&self) -> String {
        let ms = |q| self.hist.value_at_quantile(q) as f64 / 1e3;
        format!("{:.2}/{:.2} ms", ms(0.5), ms(0.99))
    }
}

/// `total` calls of `call()` spread over `k` concurrent tasks; each call's synchronous part
/// (building its item) runs before its clock starts.
async fn run_concurrent<F, Fut>(k: usize, total: usize, call: F) -> Run
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..k)
        .map(|task| {
            let call = call.clone();
            let calls = total / k + usize::from(task < total % k);
            tokio::spawn(async move {
                let (mut hist, mut errors) = (histogram(), Vec::new());
                for _ in 0..calls {
                    let pending = call();
                    let t = Instant::now();
                    let result = pending.await;
                    hist.saturating_record(t.elapsed().as_micros().max(1) as u64);
                    errors.extend(result.err());
                }
                (hist, errors)
            })
        })
        .collect();
    let mut run = Run {
        hist: histogram(),
        secs: 0.0,
        errors: Vec::new(),
    };
    for task in tasks {
        let (hist, errors) = task.await.expect("bench task");
        run.hist.add(&hist).unwrap();
        run.errors.extend(errors);
    }
    run.secs = started.elapsed().as_secs_f64();
    if let Some(first) = run.errors.first() {
        eprintln!("  {} calls failed; the first: {first}", run.errors.len());
    }
    run
}

/// Median wall time in ms of `reps` calls of `f`.
fn median_ms<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        last = Some(f());
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], last.expect("at least one rep"))
}

fn open_sink(dir: &Path) -> SledSink {
    let mut config = SinkConfig::new(dir);
    config.capacity_per_job = 10_000_000; // no FIFO eviction: the queue grows to every size
    SledSink::open(config).expect("open sink")
}

fn bus_config(url: &str, name: &str) -> BusConfig {
    let mut config = BusConfig::default();
    (config.url, config.publish_timeout) = (url.into(), PUBLISH_TIMEOUT);
    // A stream per scenario, so none publishes into a stream another one filled.
    (config.stream, config.subject) = (name.to_uppercase(), format!("bench.{name}"));
    config
}

/// Messages stored in the bus's stream (JetStream's own count: proof the PubAcks were real).
async fn stream_messages(bus: &NatsBus) -> u64 {
    let js = async_nats::jetstream::new(bus.client().clone());
    let mut stream = js.get_stream(&bus.config().stream).await.expect("stream");
    stream.info().await.expect("stream info").state.messages
}

async fn wait_healthy<B: Bus>(bus: &B) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !bus.is_healthy() {
        assert!(Instant::now() < deadline, "bus not connected within 20 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn filesystem_of(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best = (0, "unknown".to_string());
    for f in mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
    {
        if f.len() > 2 && path.starts_with(f[1]) && f[1].len() >= best.0 {
            best = (f[1].len(), format!("{} on {} ({})", f[2], f[0], f[1]));
        }
    }
    best.1
}

fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------- table

/// One line of the table. `higher_is_better`: a rate (ratio > 1 is ours ahead) or a time
/// (ratio < 1 is ours ahead).
struct Line {
    what: String,
    unit: &'static str,
    ours: f64,
    baseline: f64,
    higher_is_better: bool,
    target: Option<(String, bool)>,
    note: String,
}

fn number(v: f64) -> String {
    if v >= 1000.0 {
        let digits = format!("{:.0}", v);
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// A ratio with three significant digits (thousands separated from 1,000 up).
fn ratio(v: f64) -> String {
    if v >= 100.0 {
        format!("{}×", number(v))
    } else if v > 0.0 {
        let decimals = (2 - v.log10().floor() as i32).max(0) as usize;
        format!("{v:.decimals$}×")
    } else {
        format!("{v}×")
    }
}

fn table(lines: &[Line]) -> String {
    let mut out = String::from(
        "| measurement | unit | ours | baseline | ours/baseline | ours ahead by | target |\n\
         |---|---|---:|---:|---:|---:|---|\n",
    );
    for l in lines {
        let r = l.ours / l.baseline;
        let ahead = if l.higher_is_better { r } else { 1.0 / r };
        let target = match &l.target {
            Some((text, true)) => format!("{text}: met"),
            Some((text, false)) => format!("{text}: **NOT met**"),
            None => "-".into(),
        };
        let (what, unit, note) = (&l.what, l.unit, &l.note);
        let note = if note.is_empty() {
            String::new()
        } else {
            format!("<br>{note}")
        };
        out += &format!(
            "| {what}{note} | {unit} | {} | {} | {} | {} | {target} |\n",
            number(l.ours),
            number(l.baseline),
            ratio(r),
            ratio(ahead)
        );
    }
    out
}

// ---------------------------------------------------------------- 1-2. store: adds, list, stats

/// Adds/s of the reference layout over the adds `size - window .. size`, after pre-filling the
/// rest; then list and stats at `size`. Leaves the directory in place for nothing: removed.
fn reference_at(base: &Path, items: &Items, size: usize, mode: &Mode) -> RefFigures {
    let window = mode.window.min(size);
    let dir = base.join(format!("ref-{size}"));
    let mut dlq = reference::RefDlq::open(&dir, JOB).expect("open reference dlq");
    let t = Instant::now();
    for i in 0..size - window {
        dlq.write_item(&items.nth(i)).expect("prefill item");
    }
    if size > window {
        dlq.update_index().expect("prefill index");
    }
    let prefill_secs = t.elapsed().as_secs_f64();
    let (mut hist, mut busy) = (histogram(), Duration::ZERO);
    for i in size - window..size {
        let item = items.nth(i);
        let t = Instant::now();
        dlq.add(item).expect("reference add");
        let took = t.elapsed();
        busy += took;
        hist.saturating_record(took.as_micros().max(1) as u64);
    }
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dlq.job_dir().join("index.json")).expect("read index"),
    )
    .expect("index json");
    assert_eq!(index["item_count"], size, "reference index after the adds");
    let job_dir = dlq.job_dir().to_path_buf();
    let (list_ms, page) = median_ms(mode.reps, || reference::list(&job_dir, PAGE).expect("list"));
    assert_eq!(page.len(), PAGE.min(size));
    assert_eq!(
        page[0].item_id,
        format!("item-{}", size - 1),
        "newest first"
    );
    let (stats_ms, s) = median_ms(mode.reps, || reference::stats(&job_dir).expect("stats"));
    assert_eq!(s.total_items, size);
    assert!(s.oldest_item.is_some() && s.newest_item.is_some());
    assert!(s.eligible_for_reprocess <= size && s.requiring_manual_review <= size);
    let index_bytes = std::fs::metadata(job_dir.join("index.json")).map_or(0, |m| m.len());
    let item_bytes = std::fs::metadata(job_dir.join("items/item-0.json")).map_or(0, |m| m.len());
    std::fs::remove_dir_all(&dir).expect("remove reference dir");
    RefFigures {
        adds_per_sec: window as f64 / busy.as_secs_f64(),
        p99_ms: hist.value_at_quantile(0.99) as f64 / 1e3,
        list_ms,
        stats_ms,
        prefill_secs,
        index_bytes,
        item_bytes,
    }
}

struct RefFigures {
    adds_per_sec: f64,
    p99_ms: f64,
    list_ms: f64,
    stats_ms: f64,
    prefill_secs: f64,
    index_bytes: u64,
    item_bytes: u64,
}

struct OurFigures {
    /// Adds/s and p99 per entry of [`IN_FLIGHT`].
    adds: Vec<(usize, f64, f64)>,
    open_ms: f64,
    list_ms: f64,
    stats_ms: f64,
}

/// `Sink::append(Command::DeadLetter)` of items `from..to` at `k` in flight.
async fn append_items(
    sink: &SledSink,
    items: &Arc<Items>,
    k: usize,
    from: usize,
    to: usize,
) -> Run {
    let (sink, items) = (sink.clone(), items.clone());
    let next = Arc::new(AtomicUsize::new(from));
    run_concurrent(k, to - from, move || {
        let item = Box::new(items.nth(next.fetch_add(1, Ordering::Relaxed)));
        let sink = sink.clone();
        async move {
            let command = Command::DeadLetter {
                topic: TOPIC.into(),
                item,
            };
            sink.append(command)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await
}

/// Our adds at `size` for each in-flight level (a fresh sink each, pre-filled at 256 in flight),
/// then open / list / stats on the last one.
async fn ours_at(base: &Path, items: &Arc<Items>, size: usize, mode: &Mode) -> OurFigures {
    let window = mode.window.min(size);
    let mut adds = Vec::new();
    let mut last_dir = None;
    for k in IN_FLIGHT {
        let dir = base.join(format!("ours-{size}-k{k}"));
        let sink = open_sink(&dir);
        if size > window {
            let fill = append_items(&sink, items, FILL_IN_FLIGHT, 0, size - window).await;
            assert!(fill.errors.is_empty(), "pre-fill failed");
        }
        let run = append_items(&sink, items, k, size - window, size).await;
        assert!(run.errors.is_empty(), "adds failed");
        assert_eq!(sink.job_len(JOB).expect("job len"), size as u64);
        adds.push((k, run.rate(), run.p99_ms()));
        sink.close().await.expect("close sink");
        drop(sink);
        if let Some(previous) = last_dir.replace(dir) {
            std::fs::remove_dir_all(previous).expect("remove sink dir");
        }
    }
    let dir = last_dir.expect("a sink");
    let t = Instant::now();
    let sink = open_sink(&dir); // what a fresh `dlq list` / `dlq stats` process does first
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let filter = Filter::default();
    let request = ListRequest {
        filter: filter.clone(),
        limit: PAGE,
        offset: 0,
        after: None,
        count: false,
    };
    let (list_ms, page) = median_ms(mode.reps, || {
        let walk = in_listing_order(&sink, &filter, None).expect("listing walk");
        page_in_order(walk, &request).expect("page")
    });
    assert_eq!(page.items.len(), PAGE.min(size));
    assert_eq!(
        page.items[0].item_id,
        format!("item-{}", size - 1),
        "newest first"
    );
    let (stats_ms, s) = median_ms(mode.reps, || stats(&sink, None).expect("stats"));
    assert_eq!(s.total_items, size as u64);
    sink.close().await.expect("close sink");
    drop(sink);
    std::fs::remove_dir_all(&dir).expect("remove sink dir");
    OurFigures {
        adds,
        open_ms,
        list_ms,
        stats_ms,
    }
}

async fn store_section(base: &Path, mode: &Mode, lines: &mut Vec<Line>) {
    let items = Arc::new(Items::new());
    for &size in mode.sizes {
        let window = mode.window.min(size);
        eprintln!("  {size} items: reference-000 layout ...");
        let r = reference_at(base, &items, size, mode);
        eprintln!(
            "    {:.0} adds/s (p99 {:.2} ms); list {:.1} ms; stats {:.1} ms",
            r.adds_per_sec, r.p99_ms, r.list_ms, r.stats_ms
        );
        eprintln!("  {size} items: ours ...");
        let o = ours_at(base, &items, size, mode).await;
        let span = if window == size {
            format!("the first {window} adds")
        } else {
            format!("adds {} → {size}", size - window)
        };
        for (k, rate, p99) in &o.adds {
            eprintln!("    K={k}: {rate:.0} adds/s (p99 {p99:.2} ms)");
            let mut note = format!(
                "{span}; ours p99 {p99:.2} ms, fsynced per group; baseline p99 {:.2} ms, \
                 one at a time, never fsynced; index.json {} B, item file {} B",
                r.p99_ms, r.index_bytes, r.item_bytes
            );
            if size > window {
                note += &format!("; baseline pre-fill {:.1} s (not timed)", r.prefill_secs);
            }
            let target = (size == TARGET_SIZE).then(|| {
                let met = *rate >= TARGET_FACTOR * r.adds_per_sec;
                ("ours ≥ 1000× baseline".to_string(), met)
            });
            lines.push(Line {
                what: format!("add, {size} items, ours {k} in flight"),
                unit: "adds/s",
                ours: *rate,
                baseline: r.adds_per_sec,
                higher_is_better: true,
                target,
                note,
            });
        }
        lines.push(Line {
            what: format!("list, newest {PAGE}, {size} items"),
            unit: "ms",
            ours: o.list_ms,
            baseline: r.list_ms,
            higher_is_better: false,
            target: None,
            note: format!(
                "median of {}; ours: recency index walk on an open sink; baseline: load every item file, sort all",
                mode.reps
            ),
        });
        lines.push(Line {
            what: format!("list incl. opening the store, {size} items"),
            unit: "ms",
            ours: o.open_ms + o.list_ms,
            baseline: r.list_ms,
            higher_is_better: false,
            target: None,
            note: format!(
                "ours: SledSink::open {:.1} ms (one reopen right after writing: page cache warm) + list; what a fresh `dlq list` process pays",
                o.open_ms
            ),
        });
        lines.push(Line {
            what: format!("stats, {size} items"),
            unit: "ms",
            ours: o.stats_ms,
            baseline: r.stats_ms,
            higher_is_better: false,
            target: None,
            note: format!(
                "median of {}; ours: per-job counters + age/recency index ends; baseline: load every item file, count",
                mode.reps
            ),
        });
    }
}

// ---------------------------------------------------------------- 3. publish-only

/// The event our sink writes for `item`, with a unique id (JetStream drops repeated ids).
fn event_of(item: DeadLetteredItem, seq: u64) -> Event {
    Event {
        event_id: Event::stored_id("bench-publish-only", seq),
        node_id: "bench-publish-only".into(),
        seq,
        prev_seq: None,
        timestamp: Utc::now(),
        job_id: item.job_id.clone(),
        topic: TOPIC.into(),
        kind: EventKind::DeadLettered { item },
    }
}

async fn publish_section(base: &Path, mode: &Mode, lines: &mut Vec<Line>) {
    let server = NatsServer::start();
    let items = Arc::new(Items::new());
    let total = mode.emits;
    let warmup = (total / 10).clamp(1, 500);
    for k in IN_FLIGHT {
        // Baseline: NatsBus::publish (JetStream publish, wait for the PubAck), no sink.
        let bus = Arc::new(
            NatsBus::connect(bus_config(&server.url(), &format!("pub{k}")))
                .await
                .expect("bus"),
        );
        wait_healthy(bus.as_ref()).await;
        bus.prepare().await.expect("stream");
        let next = Arc::new(AtomicUsize::new(0));
        let (b, it, n) = (bus.clone(), items.clone(), next.clone());
        let publish = move || {
            let i = n.fetch_add(1, Ordering::Relaxed);
            let (bus, event) = (b.clone(), event_of(it.nth(i), i as u64 + 1));
            async move {
                bus.publish(&event)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        };
        run_concurrent(k.max(1), warmup.max(k), publish.clone()).await;
        let base_run = run_concurrent(k, total, publish).await;
        let stored = stream_messages(&bus).await;
        assert_eq!(
            stored,
            (warmup.max(k) + total) as u64,
            "publish-only: every event stored once"
        );
        let bytes = event_of(items.nth(0), 1).to_json().map_or(0, |j| j.len());

        // Ours: the emitter's dead_letter (durable sink append, then the same publish).
        let sink = open_sink(&base.join(format!("emit-k{k}")));
        let bus = NatsBus::connect(bus_config(&server.url(), &format!("emit{k}")))
            .await
            .expect("bus");
        let mut policies = TopicPolicies::default();
        policies.default.retry_attempts = 1;
        let emitter = EmitterBuilder::new(sink, bus)
            .policies(policies)
            .publish_timeout(PUBLISH_TIMEOUT)
            .reconciler(Some(ReconcilerConfig::default()))
            .build();
        wait_healthy(emitter.bus()).await;
        let next = Arc::new(AtomicUsize::new(0));
        let (em, it) = (emitter.clone(), items.clone());
        let emit = move || {
            let (emitter, item) = (em.clone(), it.nth(next.fetch_add(1, Ordering::Relaxed)));
            async move {
                let receipt = emitter
                    .dead_letter(TOPIC, item)
                    .await
                    .map_err(|e| e.to_string())?;
                match receipt.published {
                    true => Ok(()),
                    false => Err("not published".to_string()),
                }
            }
        };
        run_concurrent(k.max(1), warmup.max(k), emit.clone()).await;
        let ours_run = run_concurrent(k, total, emit).await;
        let emitted = stream_messages(emitter.bus()).await;
        emitter.shutdown().await.expect("shutdown");
        eprintln!(
            "  K={k}: publish-only {:.0}/s, durable emit {:.0}/s",
            base_run.rate(),
            ours_run.rate()
        );
        lines.push(Line {
            what: format!("durable emit vs publish-only, {k} in flight"),
            unit: "calls/s",
            ours: ours_run.rate(),
            baseline: base_run.rate(),
            higher_is_better: true,
            target: None,
            note: format!(
                "{total} calls, event {bytes} B; p50/p99 ours {}, publish-only {}; \
                 messages in the streams (incl. warm-up) {emitted} and {stored}; errors {}+{}",
                ours_run.p50_p99(),
                base_run.p50_p99(),
                ours_run.errors.len(),
                base_run.errors.len()
            ),
        });
    }
    drop(server);
}

// ---------------------------------------------------------------- main

fn main() {
    let (mut quick, mut dir, mut benching) = (false, None::<PathBuf>, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--dir" => dir = Some(args.next().expect("--dir needs a directory").into()),
            "--bench" => benching = true, // added by `cargo bench` for `harness = false` targets
            other => eprintln!("ignoring unknown argument {other:?}"),
        }
    }
    let mode = match (benching, quick) {
        (false, _) => SMOKE,
        (true, true) => QUICK,
        (true, false) => FULL,
    };
    let base = match (dir, option_env!("CARGO_TARGET_TMPDIR")) {
        (Some(dir), _) => dir,
        (None, Some(tmp)) => PathBuf::from(tmp),
        (None, None) => std::env::temp_dir(),
    };
    std::fs::create_dir_all(&base).expect("create bench base dir");
    let tmp = tempfile::tempdir_in(&base).expect("temp dir"); // removed at exit
    let dir = tmp.path();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_before = load_average();

    let started = Instant::now();
    let mut lines = Vec::new();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        eprintln!("1/2 store: reference-000 layout vs sled sink ...");
        store_section(dir, &mode, &mut lines).await;
        eprintln!("2/2 publish-only vs durable emit ...");
        publish_section(dir, &mode, &mut lines).await;
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    let elapsed = started.elapsed().as_secs_f64();

    let mut doc = format!("# dlq baselines ({})\n\n", mode.name);
    doc += &format!(
        "- store: `{}` ({}); {cores} cores; load average {load_before} at start, {} at end; {elapsed:.0} s in all\n",
        dir.display(),
        filesystem_of(dir),
        load_average()
    );
    doc += &format!(
        "- items: ~1 KiB `item_data`, one job; adds/s at n items = the last {} adds up to n (all of them when n ≤ {}), the rest pre-filled untimed\n",
        mode.window, mode.window
    );
    doc += "- baseline = reference 000's layout (pretty item file + index.json regenerated per add, no fsync, serial); ours = `SledSink` (group commit, fsync per group) and `dlq::query`\n";
    doc += "- publish-only = `NatsBus::publish` with PubAck into a private nats-server stream, no sink; ours = `Emitter::dead_letter` (sink, then the same publish)\n\n";
    doc += &table(&lines);
    doc += "\n`ours/baseline` is the plain ratio (rates: above 1 is ours ahead; times: below 1 is ours ahead); `ours ahead by` turns both into \"above 1 is better\". See `benches/README.md`, \"baselines\".\n";
    println!("{doc}");
    if let Some(name) = mode.file {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("benches/results")
            .join(name);
        std::fs::write(&path, &doc).expect("write results");
        eprintln!("written to {}", path.display());
    }
}
