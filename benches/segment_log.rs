//! Group commit of the Sink v2 segment log (issue 16) against the plain-file limit.
//!
//! `cargo bench --bench segment_log -- [--quick]`
//!
//! For K = 1, 8, 64, 256 events per group and events of 1.9 KB and 64 KiB: how many events
//! per second `LogWriter::append` (frames, one write, one `fdatasync` per group, rotation at
//! 64 MiB) makes durable, beside the plain loop that appends the same bytes to one file and
//! `fdatasync`s it per group (the physical group-commit limit). One writer, groups back to back,
//! in a temporary directory under `$CARGO_TARGET_DIR` (a real disk, not tmpfs). Each figure is
//! the best of three runs of `N` groups. Figures are reported, never asserted. Under
//! `cargo test` (no `--bench`) it is a smoke run: a few groups, nothing written to the docs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// The allocator the `dlq` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use dlq::sink::test_support::log::io::RealFs;
use dlq::sink::test_support::log::{LogConfig, LogWriter};

fn event(size: usize, i: usize) -> Vec<u8> {
    let head = format!("{{\"event_id\":\"bench-{i}\",\"payload\":\"");
    let mut bytes = head.into_bytes();
    bytes.resize(size - 2, b'x');
    bytes.extend_from_slice(b"\"}");
    bytes
}

/// Events per second of the plain loop: append the group's bytes, fdatasync.
fn plain(dir: &Path, group: &[Vec<u8>], groups: usize) -> f64 {
    let path = dir.join("plain.dat");
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let bytes: Vec<u8> = group.concat();
    let start = Instant::now();
    for _ in 0..groups {
        file.write_all(&bytes).unwrap();
        file.sync_data().unwrap();
    }
    let rate = (groups * group.len()) as f64 / start.elapsed().as_secs_f64();
    std::fs::remove_file(path).unwrap();
    rate
}

/// Events per second of the segment log.
fn log(dir: &Path, group: &[Vec<u8>], groups: usize) -> f64 {
    let log_dir = dir.join("log");
    let fs = RealFs::open(&log_dir).unwrap();
    let (mut writer, _) = LogWriter::open(fs, LogConfig::default()).unwrap();
    let start = Instant::now();
    for _ in 0..groups {
        writer.append(group).unwrap();
    }
    let rate = (groups * group.len()) as f64 / start.elapsed().as_secs_f64();
    drop(writer);
    std::fs::remove_dir_all(log_dir).unwrap();
    rate
}

fn best_of(runs: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..runs).map(|_| f()).fold(0.0, f64::max)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let bench = args.iter().any(|a| a == "--bench");
    let quick = args.iter().any(|a| a == "--quick");
    let base = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_owned());
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let (runs, budget) = match (bench, quick) {
        (false, _) => (1, 20),
        (true, true) => (2, 300),
        (true, false) => (3, 1000),
    };
    println!(
        "| event | K | plain append + fdatasync (events/s) | segment log (events/s) | ratio |"
    );
    println!("|---|---|---|---|---|");
    for size in [1900, 64 << 10] {
        for k in [1, 8, 64, 256] {
            let group: Vec<Vec<u8>> = (0..k).map(|i| event(size, i)).collect();
            // Fewer groups when they are large: about the same bytes per run.
            let groups = (budget * 64 / k.max(8)).clamp(5, budget);
            let groups = if size > 4096 {
                (groups / 8).max(5)
            } else {
                groups
            };
            let plain_rate = best_of(runs, || plain(tmp.path(), &group, groups));
            let log_rate = best_of(runs, || log(tmp.path(), &group, groups));
            println!(
                "| {} | {k} | {plain_rate:.0} | {log_rate:.0} | {:.2} |",
                if size > 4096 { "64 KiB" } else { "1.9 KB" },
                log_rate / plain_rate
            );
        }
    }
}
