//! Replays every input the fuzz targets ever crashed on (`fuzz/regressions/<target>/`) and the
//! committed seed corpus (`fuzz/corpus/<target>/`) through the same `dlq_ops::fuzzing` functions
//! the cargo-fuzz targets call, under a plain `cargo test`: a fixed crash stays fixed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every input of `kind` (regressions or corpus); returns how many ran.
fn replay(kind: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind);
    let mut ran = 0;
    let mut failed = Vec::new();
    for (target, run) in dlq_ops::fuzzing::TARGETS {
        for file in inputs(&root.join(target)) {
            let data = std::fs::read(&file).unwrap();
            ran += 1;
            match std::panic::catch_unwind(|| run(&data)) {
                Ok(Ok(())) => {}
                Ok(Err(broken)) => failed.push(format!("{}: {broken}", file.display())),
                Err(_) => failed.push(format!("{}: panicked", file.display())),
            }
        }
    }
    assert!(
        failed.is_empty(),
        "fuzz inputs that fail:\n{}",
        failed.join("\n")
    );
    ran
}

#[test]
fn every_fuzz_finding_stays_fixed() {
    assert!(replay("regressions") > 0, "no regression inputs found");
}

#[test]
fn the_seed_corpus_runs_clean() {
    let ran = replay("corpus");
    assert!(
        ran >= dlq_ops::fuzzing::TARGETS.len(),
        "only {ran} seeds found"
    );
}
