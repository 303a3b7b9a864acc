//! Formatting the results: rows, rates, verdicts and the machine they were measured on.

use std::path::Path;
use std::process::Command;

use crate::runs::Run;

/// A results-table row: name, items, run, note.
pub(crate) struct Row {
    pub(crate) name: String,
    pub(crate) items: usize,
    pub(crate) run: Run,
    pub(crate) note: String,
}

pub(crate) fn ms_per(d: f64, n: usize) -> f64 {
    d * 1000.0 / n as f64
}

/// Items per second: whole numbers, one decimal below 100.
pub(crate) fn rate(per_sec: f64) -> String {
    if per_sec < 100.0 {
        format!("{per_sec:.1}")
    } else {
        format!("{per_sec:.0}")
    }
}

pub(crate) fn verdict(value: f64, target: f64) -> String {
    if value < target {
        format!("< {target} ms: met")
    } else {
        format!("< {target} ms: **NOT met**")
    }
}

pub(crate) fn machine(base: &Path) -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split(':')
                .nth(1)
                .map(str::trim)
                .map(String::from)
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mounts = read("/proc/mounts");
    let base = base.canonicalize().unwrap_or_else(|_| base.to_path_buf());
    let fs = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() > 2 && base.starts_with(f[1]))
        .max_by_key(|f| f[1].len())
        .map_or("unknown".into(), |f| format!("{} on {}", f[2], f[0]));
    format!(
        "{cores} cores (nproc), {cpu}; Linux {}; temp dirs on {fs}",
        read("/proc/sys/kernel/osrelease").trim()
    )
}

pub(crate) fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn git_head() -> String {
    let out = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
        ])
        .output();
    out.ok()
        .filter(|o| o.status.success())
        .map_or("unknown".into(), |o| {
            String::from_utf8_lossy(&o.stdout).trim().to_owned()
        })
}
