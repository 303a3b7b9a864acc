//! The one row shape every bench writes with `--json PATH`, and `suite_table` reads back.
//!
//! Each row is one figure measured on this machine, with the limit or baseline it is read
//! against (if any), the ratio between the two and the target. `suite_table` merges
//! the files of one suite run into `benches/results/suite.md` and `suite.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// One figure of a bench run.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct SuiteRow {
    /// Which part of the issue it answers, e.g. "1 durable emit"; rows are grouped by it.
    pub section: String,
    /// What was measured, e.g. "bus up, 1 KiB, K=64".
    pub figure: String,
    /// This machine's figure.
    pub value: f64,
    /// Unit of `value` and `limit_or_baseline`, e.g. "events/s", "ms", "MiB", "B/item".
    pub unit: String,
    /// True for rates (more is better), false for times and sizes (less is better).
    pub higher_is_better: bool,
    /// The limit or baseline `value` is read against, in the same unit.
    pub limit_or_baseline: Option<f64>,
    /// What `limit_or_baseline` is, e.g. "plain file, batch 64, 1.9 KB records".
    pub against: Option<String>,
    /// `value / limit_or_baseline`.
    pub ratio: Option<f64>,
    /// Per-call latency p50, p99, p999 in ms, where the figure is a rate of calls.
    pub latency_ms: Option<[f64; 3]>,
    /// The target for this figure, in words.
    pub target: Option<String>,
    /// Whether this run met `target`.
    pub met: Option<bool>,
    /// The ceiling measured in the same run (`limit_or_baseline`) is itself short of
    /// `target`: no build of ours could have met it on this machine at that hour.
    #[serde(default)]
    pub above_ceiling: bool,
    /// Anything a reader needs to read the figure right.
    pub note: String,
}

impl SuiteRow {
    /// A row of `value` in `unit`; rates (`…/s`) count as higher-is-better.
    pub fn new(section: &str, figure: impl Into<String>, value: f64, unit: &str) -> SuiteRow {
        SuiteRow {
            section: section.into(),
            figure: figure.into(),
            value,
            unit: unit.into(),
            higher_is_better: unit.ends_with("/s"),
            ..SuiteRow::default()
        }
    }

    /// Reads the figure against `reference` (a limit or a baseline) described by `against`.
    pub fn against(mut self, reference: f64, against: impl Into<String>) -> SuiteRow {
        self.limit_or_baseline = Some(reference);
        self.against = Some(against.into());
        self.ratio = (reference > 0.0).then(|| self.value / reference);
        self
    }

    /// Per-call latency p50, p99, p999, given in µs.
    pub fn latency_us(mut self, p50: u64, p99: u64, p999: u64) -> SuiteRow {
        self.latency_ms = Some([p50, p99, p999].map(|us| us as f64 / 1e3));
        self
    }

    /// The target for this figure, and whether this run met it.
    pub fn target(mut self, text: impl Into<String>, met: bool) -> SuiteRow {
        (self.target, self.met) = (Some(text.into()), Some(met));
        self
    }

    /// Marks `target` as above the ceiling measured in the same run when `above` holds (the
    /// ceiling itself does not reach it): reported as such, not as a plain miss.
    pub fn above_ceiling(mut self, above: bool) -> SuiteRow {
        self.above_ceiling = above && self.met != Some(true);
        self
    }

    /// What a reader needs to read the figure right.
    pub fn note(mut self, note: impl Into<String>) -> SuiteRow {
        self.note = note.into();
        self
    }
}

/// One bench run's file: what ran, where, and its rows.
#[derive(Debug, Serialize, Deserialize)]
pub struct SuiteFile {
    /// The bench target, e.g. "durable_emit".
    pub bench: String,
    /// The command that produced it (arguments included).
    pub command: String,
    /// quick / full / smoke.
    pub mode: String,
    /// Cores, load average, filesystem of the measured directory, etc.
    pub machine: Vec<(String, String)>,
    /// How long the bench ran.
    pub elapsed_secs: f64,
    /// Its figures.
    pub rows: Vec<SuiteRow>,
}

/// Writes `rows` of bench `bench` to `path` as a [`SuiteFile`].
pub fn write(
    path: &Path,
    bench: &str,
    mode: &str,
    machine: Vec<(String, String)>,
    elapsed_secs: f64,
    rows: &[SuiteRow],
) {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let file = SuiteFile {
        bench: bench.into(),
        command: format!("cargo bench --bench {bench} -- {}", args.join(" ")),
        mode: mode.into(),
        machine,
        elapsed_secs,
        rows: rows.to_vec(),
    };
    let text = serde_json::to_string_pretty(&file).expect("suite json");
    std::fs::write(path, text).expect("write suite json");
    eprintln!("suite rows written to {}", path.display());
}

/// Writes a bench's Markdown report to `benches/results/{name}`, `{stem}-quick.md` in quick
/// mode and `{stem}.md` otherwise.
pub fn write_results(stem: &str, quick: bool, text: &str) {
    let name = if quick {
        format!("{stem}-quick.md")
    } else {
        format!("{stem}.md")
    };
    let path = crate::workspace_root().join("benches/results").join(name);
    std::fs::write(&path, text).expect("write the results file");
    eprintln!("results written to {}", path.display());
}

/// The machine facts every bench records: cores, memory, load average, kernel.
pub fn machine() -> Vec<(String, String)> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kb: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let load: Vec<String> = read("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .map(String::from)
        .collect();
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_string();
    vec![
        ("cores".into(), cores.to_string()),
        (
            "memory".into(),
            format!("{:.1} GiB", mem_kb as f64 / 1048576.0),
        ),
        ("load average at end".into(), load.join(" ")),
        ("kernel".into(), kernel),
    ]
}

/// The filesystem type and device of the mount holding `path`, from /proc/mounts.
pub fn filesystem_of(path: &Path) -> String {
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

/// 1000000 → "1,000,000".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The command line that reproduces a bench run: `cargo bench --bench NAME [-- --quick ARGS]`.
pub fn bench_command(name: &str, quick: bool, shown: &[String]) -> String {
    let mut command = format!("cargo bench --bench {name}");
    if quick || !shown.is_empty() {
        command.push_str(" --");
        if quick {
            command.push_str(" --quick");
        }
        for arg in shown {
            command.push(' ');
            command.push_str(arg);
        }
    }
    command
}

#[cfg(test)]
mod tests {
    use super::SuiteRow;

    #[test]
    fn only_a_missed_target_is_marked_above_its_ceiling() {
        let row = |value: f64| {
            SuiteRow::new("5 queries", "cold: stats", value, "ms")
                .against(139.0, "sled alone")
                .target("< 100 ms", value < 100.0)
                .above_ceiling(true)
        };
        assert!(row(156.0).above_ceiling, "missed, the ceiling misses too");
        assert!(!row(90.0).above_ceiling, "met: nothing to explain");
        let below = SuiteRow::new("7 consumers", "in memory", 40_000.0, "events/s")
            .target(">= 100000 events/s", false)
            .above_ceiling(false);
        assert!(
            !below.above_ceiling,
            "missed with the ceiling above the target"
        );
    }
}
