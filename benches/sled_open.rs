//! How long sled 0.34 takes to open a database of many small keys, in a new process (issue 16:
//! cold queries at 1M items).
//!
//! `cargo bench --bench sled_open -- [--items N] [--keys-per-item K,K] [--opens N]`
//!
//! For each K (default 1 and 4, what projection format 4 writes: item, age, recency, FIFO):
//! fills a sled database in a temporary directory under `$CARGO_TARGET_DIR` with N items
//! (default 1,000,000) over 100 jobs, K keys per item (a 60-byte value on the first, empty
//! values on the rest, like the item pointer and the index keys), in batches of 1,000, then
//! flushes and closes it; then opens it `--opens` times (default 4), each in a new process
//! (this binary with `--open DIR`), and prints the open times. sled writes its snapshot only
//! while opening, so the first open replays what the fill wrote; the later ones show what a
//! cold query pays once the snapshot is current. Figures are reported, never asserted. Under
//! `cargo test` (no `--bench`) it is a smoke run of 2,000 items.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

/// The allocator the `dlq` binary ships with (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

const JOBS: u64 = 100;
const BATCH: u64 = 1_000;

fn fill(dir: &Path, items: u64, keys_per_item: u8) {
    let db = sled::Config::new().path(dir).open().unwrap();
    let mut batch = sled::Batch::default();
    for i in 0..items {
        for k in 0..keys_per_item {
            let key = format!("{}job-{:04}\0item-{i:012}", char::from(b'a' + k), i % JOBS);
            let value = if k == 0 { vec![7u8; 60] } else { Vec::new() };
            batch.insert(key.as_bytes(), value);
        }
        if i % BATCH == BATCH - 1 {
            db.apply_batch(std::mem::take(&mut batch)).unwrap();
        }
    }
    db.apply_batch(batch).unwrap();
    db.flush().unwrap();
}

/// The child: open, read one key, print the milliseconds the open took.
fn open(dir: &Path) {
    let start = Instant::now();
    let db = sled::Config::new().path(dir).open().unwrap();
    let ms = start.elapsed().as_secs_f64() * 1e3;
    assert!(db.get(b"ajob-0000\0item-000000000000").unwrap().is_some());
    println!("{ms:.1}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--open") {
        open(Path::new(&args[i + 1]));
        return;
    }
    let benching = args.iter().any(|a| a == "--bench");
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| args[i + 1].clone())
    };
    let items: u64 = value_of("--items")
        .map(|v| v.parse().expect("--items N"))
        .unwrap_or(if benching { 1_000_000 } else { 2_000 });
    let ks: Vec<u8> = value_of("--keys-per-item")
        .map(|v| {
            v.split(',')
                .map(|k| k.parse().expect("--keys-per-item K,K"))
                .collect()
        })
        .unwrap_or_else(|| vec![1, 4]);
    let opens: usize = value_of("--opens")
        .map(|v| v.parse().expect("--opens N"))
        .unwrap_or(if benching { 4 } else { 2 });
    let base = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        Into::into,
    );
    std::fs::create_dir_all(&base).unwrap();
    let me = std::env::current_exe().unwrap();
    println!("| items | keys per item | fill s | open ms, each in a new process (the first replays the fill) |");
    println!("|---:|---:|---:|---|");
    for k in ks {
        assert!((1..=26).contains(&k), "--keys-per-item takes 1 to 26");
        let dir = tempfile::tempdir_in(&base).unwrap();
        let start = Instant::now();
        fill(dir.path(), items, k);
        let fill_s = start.elapsed().as_secs_f64();
        let times: Vec<String> = (0..opens)
            .map(|_| {
                let out = Command::new(&me)
                    .arg("--open")
                    .arg(dir.path())
                    .output()
                    .unwrap();
                assert!(out.status.success(), "the open failed: {out:?}");
                String::from_utf8(out.stdout).unwrap().trim().to_owned()
            })
            .collect();
        println!("| {items} | {k} | {fill_s:.1} | {} |", times.join(" / "));
    }
}
