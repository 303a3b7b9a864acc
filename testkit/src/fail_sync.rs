//! Failing `fdatasync` calls of the real `dlq` binary: an `LD_PRELOAD` library
//! (`testkit/preload/fail_fdatasync.c`, built here with `cc` the first time a test asks) that
//! fails the chosen calls on the sink's log segments with `EIO`, as a failing device would.
//! Nothing of it is in dlq itself.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const SOURCE: &str = include_str!("../preload/fail_fdatasync.c");

/// Builds the library (once per version of its source, shared by every test process: one
/// directory under the system's temporary directory, no copy per process) and returns its path.
pub fn library() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(SOURCE, &mut hasher);
        let version = std::hash::Hasher::finish(&hasher);
        let dir = std::env::temp_dir().join(format!("dlq-fail-fdatasync-{version:016x}"));
        let library = dir.join("libfail_fdatasync.so");
        if library.exists() {
            return library;
        }
        std::fs::create_dir_all(&dir).unwrap();
        // Built under this process's own names, then renamed into place: concurrent test
        // processes never load a half-written library.
        let pid = std::process::id();
        let source = dir.join(format!("fail_fdatasync.{pid}.c"));
        std::fs::write(&source, SOURCE).unwrap();
        let building = dir.join(format!("libfail_fdatasync.{pid}.so"));
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&building)
            .arg(&source)
            .arg("-ldl")
            .status()
            .expect("run cc to build the fdatasync-failing preload library");
        assert!(status.success(), "cc failed to build {}", source.display());
        std::fs::remove_file(&source).unwrap();
        std::fs::rename(&building, &library).unwrap();
        library
    })
}

/// Makes `command` fail the `nth` calls (1-based, counted over the log's `*.seg` files only)
/// of `fdatasync` with `EIO`.
pub fn fail_segment_fdatasync<'a>(command: &'a mut Command, nth: &[u32]) -> &'a mut Command {
    let list = nth.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    command
        .env("LD_PRELOAD", library())
        .env("DLQ_FAIL_FDATASYNC_NTH", list)
}
