#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Builds the suite's one results table from the benches' `--json` files:
//! `cargo bench --bench suite_table -- --in DIR --md PATH --json PATH [--note TEXT]...`.
//!
//! Reads every `*.json` in DIR (each a `SuiteFile` of `dlq_testkit::bench::suite`), orders the
//! rows by section, and writes one Markdown table (this machine's figure beside its limit or
//! baseline, the ratio, the target and whether it was met) and the merged JSON. `--note` lines
//! go under the title (the suite script passes the commit, the date and the command). Run by
//! `benches/suite.sh`; without `--in` (under `cargo test --all-targets`) it renders a built-in
//! sample to stdout and writes nothing.

use std::fmt::Write;
use std::path::PathBuf;

use dlq_testkit::bench::suite;
use suite::{SuiteFile, SuiteRow};

/// Section titles, in the order.
const SECTIONS: [(&str, &str); 10] = [
    ("1 durable emit", "1. Durable emit (events/s made durable; ratio = share of its ceiling measured in the same run: the bus alone at the same K for `dead_letter` with the bus up, the serial ceiling 1/(1/plain + 1/bus) at K = 1, the plain-file group commit at batch = K otherwise)"),
    ("1b CPU per durable event", "1b. CPU per durable event (µs of this process's user + system time per event over the calls; lower is better)"),
    ("2 physical limit", "2. Physical limit of this disk (plain file, one fdatasync per batch; sled probes)"),
    ("3 baselines", "3. Baselines in the same run (ratio = ours / baseline)"),
    ("4 reconciler drain", "4. Reconciler drain"),
    ("5 queries", "5. Operator queries (whole `dlq` processes)"),
    ("6 memory and disk", "6. Memory and disk"),
    ("7 consumers", "7. Consumers (the consumer targets)"),
    ("8 job runner", "8. Job runner overhead (the runner targets)"),
    ("peers, one at a time", "9. Peers, one failed item at a time (K = 1; ratio = share of the plain file, of the serial ceiling, or of the better peer)"),
];

/// Three significant digits, thousands separated from 1,000 up.
fn number(v: f64) -> String {
    match v.abs() {
        a if a >= 1000.0 => {
            let s = suite::thousands(v.abs().round() as u64);
            if v < 0.0 {
                format!("-{s}")
            } else {
                s
            }
        }
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        a if a >= 0.01 => format!("{v:.3}"),
        0.0 => "0".into(),
        _ => format!("{v:.2e}"),
    }
}

/// The ratio as shown: `value / reference`, with "N× faster/smaller" for lower-is-better units.
fn ratio(row: &SuiteRow) -> String {
    let Some(r) = row.ratio else {
        return "-".into();
    };
    // A share of a ceiling (the plain file, the bus alone, the serial ceiling) reads as %.
    let ceilings = ["plain file", "bus alone", "serial ceiling"];
    if row
        .against
        .as_deref()
        .is_some_and(|a| ceilings.iter().any(|c| a.starts_with(c)))
    {
        return format!("{:.1} %", r * 100.0);
    }
    let plain = format!("{}×", number(r));
    match (row.higher_is_better, r > 0.0) {
        (false, true) if r < 1.0 => format!("{plain} ({}× less)", number(1.0 / r)),
        (false, true) if r > 1.0 => format!("{plain} ({}× more)", number(r)),
        _ => plain,
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn render(files: &[SuiteFile], notes: &[String]) -> String {
    let mut md = String::from("# dlq benchmark suite\n\n");
    for note in notes {
        writeln!(md, "- {note}").unwrap();
    }
    if let Some(first) = files.first() {
        let facts: Vec<String> = first
            .machine
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        writeln!(md, "- machine: {}", facts.join("; ")).unwrap();
    }
    md += "\nEach bench, the command that ran it, its mode and its time:\n\n";
    for f in files {
        let extra: Vec<String> = f
            .machine
            .iter()
            .filter(|(k, _)| k.contains("dir"))
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        writeln!(
            md,
            "- `{}` ({}, {:.0} s){}",
            f.command.trim(),
            f.mode,
            f.elapsed_secs,
            if extra.is_empty() {
                String::new()
            } else {
                format!("; {}", extra.join("; "))
            }
        )
        .unwrap();
    }
    let rows: Vec<&SuiteRow> = files.iter().flat_map(|f| &f.rows).collect();
    // One line per target: how many rows met it, and the rows on the shorter side.
    let mut targets: Vec<&str> = Vec::new();
    for r in &rows {
        if let Some(t) = r.target.as_deref() {
            if !targets.contains(&t) {
                targets.push(t);
            }
        }
    }
    if !targets.is_empty() {
        md += "\n## Targets\n\n| target | met in | rows not meeting it (or, if fewer, those meeting it) |\n|---|---:|---|\n";
        for t in targets {
            let with: Vec<&&SuiteRow> = rows
                .iter()
                .filter(|r| r.target.as_deref() == Some(t))
                .collect();
            let (met, not): (Vec<&&SuiteRow>, Vec<&&SuiteRow>) =
                with.iter().partition(|r| r.met == Some(true));
            // Rows whose own ceiling, measured in the same run, is short of the target.
            let (above, not): (Vec<&&SuiteRow>, Vec<&&SuiteRow>) =
                not.into_iter().partition(|r| r.above_ceiling);
            let shown = |list: &[&&SuiteRow], word: &str| {
                let items: Vec<String> = list
                    .iter()
                    .map(|r| {
                        format!(
                            "{} ({}{})",
                            r.figure,
                            number(r.value),
                            if r.ratio.is_some() {
                                format!(", {}", ratio(r))
                            } else {
                                format!(" {}", r.unit)
                            }
                        )
                    })
                    .collect();
                format!("{word}: {}", items.join("; "))
            };
            let mut detail = match (met.len(), not.len()) {
                (_, 0) if above.is_empty() => "all met".to_string(),
                (_, 0) => String::new(),
                (m, n) if m < n && m > 0 => shown(&met, "met"),
                _ => shown(&not, "**NOT met**"),
            };
            if !above.is_empty() {
                let sep = if detail.is_empty() { "" } else { "; " };
                detail += sep;
                detail += &shown(&above, "above the ceiling measured in the same run");
            }
            writeln!(
                md,
                "| {} | {} of {} | {} |",
                cell(t),
                met.len(),
                with.len(),
                cell(&detail)
            )
            .unwrap();
        }
    }
    for (key, title) in SECTIONS
        .iter()
        .copied()
        .chain(std::iter::once(("", "Other")))
    {
        let known = |s: &str| SECTIONS.iter().any(|(k, _)| *k == s);
        let section: Vec<&&SuiteRow> = rows
            .iter()
            .filter(|r| {
                if key.is_empty() {
                    !known(&r.section)
                } else {
                    r.section == key
                }
            })
            .collect();
        if section.is_empty() {
            continue;
        }
        writeln!(md, "\n## {title}\n").unwrap();
        md += "| figure | this machine | p50 / p99 / p999 ms | limit or baseline | ratio | target | notes |\n|---|---:|---:|---:|---:|---|---|\n";
        for r in section {
            let latency = r
                .latency_ms
                .map_or("-".into(), |l| l.map(number).join(" / "));
            let reference = match (r.limit_or_baseline, &r.against) {
                (Some(v), Some(a)) => format!("{} {} ({})", number(v), r.unit, cell(a)),
                _ => "-".into(),
            };
            let target = match (&r.target, r.met) {
                (Some(t), Some(true)) => format!("{}: met", cell(t)),
                (Some(t), _) if r.above_ceiling => {
                    format!("{}: not met, above the ceiling (same run)", cell(t))
                }
                (Some(t), _) => format!("{}: **NOT met**", cell(t)),
                _ => "-".into(),
            };
            writeln!(
                md,
                "| {} | {} {} | {latency} | {reference} | {} | {target} | {} |",
                cell(&r.figure),
                number(r.value),
                r.unit,
                ratio(r),
                cell(&r.note)
            )
            .unwrap();
        }
    }
    md
}

fn sample() -> Vec<SuiteFile> {
    let rows = vec![
        SuiteRow::new("1 durable emit", "bus up, 1 KiB, K=64", 8426.0, "events/s")
            .against(239_087.0, "plain file, batch 64, 1.9 KB records")
            .latency_us(7139, 15255, 20575)
            .target(">= 50 % of the plain-file limit", false),
        SuiteRow::new("5 queries", "1,000,000 items, via serve: stats", 22.0, "ms")
            .target("< 100 ms", true),
        SuiteRow::new("5 queries", "1,000,000 items, cold: stats", 158.0, "ms")
            .against(131.0, "sled alone: open the database, read one key")
            .target("< 100 ms", false)
            .above_ceiling(true),
        SuiteRow::new("3 baselines", "stats, 100000 items", 0.0231, "ms")
            .against(967.0, "legacy layout (one JSON file per item)"),
    ];
    vec![SuiteFile {
        bench: "sample".into(),
        command: "sample".into(),
        mode: "smoke".into(),
        machine: suite::machine(),
        elapsed_secs: 0.0,
        rows,
    }]
}

fn main() {
    let (mut input, mut md_path, mut json_path, mut notes) = (
        None::<PathBuf>,
        None::<PathBuf>,
        None::<PathBuf>,
        Vec::new(),
    );
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--in" => input = Some(args.next().expect("--in DIR").into()),
            "--md" => md_path = Some(args.next().expect("--md PATH").into()),
            "--json" => json_path = Some(args.next().expect("--json PATH").into()),
            "--note" => notes.push(args.next().expect("--note TEXT")),
            "--bench" => {}
            other => eprintln!("ignoring unknown argument {other:?}"),
        }
    }
    let Some(input) = input else {
        println!("{}", render(&sample(), &["sample (no --in given)".into()]));
        return;
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&input)
        .expect("read --in dir")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    let files: Vec<SuiteFile> = paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).expect("read json");
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
        .collect();
    let md = render(&files, &notes);
    match md_path {
        Some(path) => std::fs::write(&path, &md).expect("write md"),
        None => println!("{md}"),
    }
    if let Some(path) = json_path {
        let doc = serde_json::json!({ "notes": notes, "benches": files });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("write json");
    }
    eprintln!(
        "{} rows from {} files",
        files.iter().map(|f| f.rows.len()).sum::<usize>(),
        files.len()
    );
}
