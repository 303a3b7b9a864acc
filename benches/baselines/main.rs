#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Baselines in the same run: `cargo bench --bench baselines -- [--quick] [--dir DIR] [--json PATH]`.
//!
//! 1. **legacy layout (one JSON file per item)**: one pretty JSON file per item plus an `index.json` regenerated on
//!    every add (re-implemented in [`reference`]), against our sled sink: adds/s at 1,000, 10,000
//!    and 100,000 items, a newest-first page of 50 and the statistics at those sizes.
//! 2. **Publish-only**: JetStream publish with PubAck of the same event bytes, no local sink,
//!    against our durable emit (sink, then publish) at 1 and 64 in flight.
//!
//! Prints a Markdown table (ours, baseline, ratio ours/baseline, target) and writes it to
//! `benches/results/baselines.md` (`baselines-quick.md` with `--quick`). Without `--bench`
//! (under `cargo test --all-targets`) it is a seconds-long smoke run that writes no file.
//! It reports and never asserts a timing; see `benches/README.md`, "baselines". `--json PATH`
//! also writes the lines in the suite's shape (`dlq_testkit::bench::suite`).

/// The allocator the `dlq` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod publish;
mod reference;
mod run;
mod store;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dlq_testkit::bench::suite;
use run::load_average;
use suite::filesystem_of;

/// Every item of the store benches goes to this one job: the legacy layout keeps one directory
/// and one `index.json` per job, so a job of n items is where its per-add cost is O(n).
const JOB: &str = "job-0";
const TOPIC: &str = "bench";
const PAGE: usize = 50;
const FILL_IN_FLIGHT: usize = 256;
const IN_FLIGHT: [usize; 2] = [1, 64];
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// Target: ours ≥ 1000× the legacy layout (one JSON file per item)'s add throughput at 100,000 items.
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
        suite::thousands(v.round() as u64)
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

// ---------------------------------------------------------------- main

fn main() {
    let (mut quick, mut dir, mut benching) = (false, None::<PathBuf>, false);
    let mut json = None::<PathBuf>;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--dir" => dir = Some(args.next().expect("--dir needs a directory").into()),
            "--json" => json = Some(args.next().expect("--json needs a path").into()),
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
        eprintln!("1/2 store: legacy layout (one JSON file per item) vs sled sink ...");
        store::store_section(dir, &mode, &mut lines).await;
        eprintln!("2/2 publish-only vs durable emit ...");
        publish::publish_section(dir, &mode, &mut lines).await;
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
    doc += "- baseline = the legacy layout (one JSON file per item) (pretty item file + index.json regenerated per add, no fsync, serial); ours = `LocalSink` (group commit, fsync per group) and `dlq_ops::query`\n";
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
    if let Some(path) = json {
        let mut machine = suite::machine();
        machine.push(("baselines dir".into(), filesystem_of(dir)));
        machine.push(("load average at start".into(), load_before));
        let rows: Vec<_> = lines.iter().map(suite_row).collect();
        suite::write(&path, "baselines", mode.name, machine, elapsed, &rows);
    }
}

/// A line in the suite's shape: ours against the baseline.
fn suite_row(l: &Line) -> suite::SuiteRow {
    let against = if l.what.contains("publish-only") {
        "publish-only JetStream (PubAck, no sink)"
    } else {
        "legacy layout (one JSON file per item)"
    };
    let mut row = suite::SuiteRow::new("3 baselines", l.what.clone(), l.ours, l.unit);
    row.higher_is_better = l.higher_is_better;
    let mut row = row.against(l.baseline, against).note(l.note.clone());
    if let Some((text, met)) = &l.target {
        row = row.target(text.clone(), *met);
    }
    row
}
