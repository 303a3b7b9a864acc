//! Sets `DLQ_VERSION` for `dlq --version`: the package version and, in a git checkout, the
//! commit it was built from (`0.1.0 (commit 1a2b3c4)`). Outside a checkout, or without git,
//! the version alone.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let line = match git(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) => format!("{version} (commit {commit})"),
        None => version,
    };
    println!("cargo:rustc-env=DLQ_VERSION={line}");
    println!("cargo:rerun-if-changed=build.rs");
    // Build again when HEAD moves: HEAD itself (a checkout), the branch it points at (a
    // commit) and packed-refs. Only files that exist: a missing one would run this every build.
    for path in head_files() {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// The trimmed output of a successful `git ARGS`, if any.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}

/// The files whose change means another commit is checked out.
fn head_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        files.push(Path::new(&dir).join("HEAD"));
    }
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        let common = Path::new(&common);
        files.push(common.join("packed-refs"));
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            files.push(common.join(branch));
        }
    }
    files
}
