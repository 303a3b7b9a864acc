//! Entry points into the core's decoders of outside data (the stream's events, the log's and the
//! legacy journal's segments), for the cargo-fuzz targets in `fuzz/` and the regression test
//! `tests/fuzz_regressions.rs`, through `dlq_ops::fuzzing`, which adds the operator side's. Not an API: built only with the `fuzzing`
//! feature, hidden from the documentation, and free to change.
//!
//! Each function takes arbitrary bytes, runs them through the same code the product runs on
//! them (rejecting them is fine) and checks what must hold for what it accepted. It must never
//! panic: a panic, an abort, a hang or runaway memory is a finding. An [`Err`] is a broken
//! invariant, also a finding: the fuzz targets panic with it.
//!
//! | function | what it decodes |
//! |---|---|
//! | [`event_json`] | an event from the stream or the log (full decode, header-only read, consumer classification) |
//! | [`consumer_fold`] | JSON Lines of messages fed to a consumer's fold, gaps accepted, then replayed |
//! | [`journal_segment`] | a journal segment of sink format 2 (migrated on open): records decoded and replayed into sled |
//! | [`log_segment`] | a segment of the sink's event log: scanned, then opened as a log and read back |

use std::fmt;

mod events;
mod journal;
mod log_segment;

pub use events::{consumer_fold, event_json};
pub use journal::journal_segment;
pub use log_segment::log_segment;

/// An invariant a decoder broke on some input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken(pub String);

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Broken {}

/// What each entry point returns: `Ok` whether the input was accepted or rejected.
pub type Outcome = Result<(), Broken>;

/// One entry point: arbitrary bytes in, a broken invariant out.
pub type Target = fn(&[u8]) -> Outcome;

/// The core's targets by name (`dlq_ops::fuzzing::TARGETS` lists every target).
pub const TARGETS: &[(&str, Target)] = &[
    ("event_json", event_json),
    ("consumer_fold", consumer_fold),
    ("journal_segment", journal_segment),
    ("log_segment", log_segment),
];

/// Fails with `what` unless `holds`.
pub fn check(holds: bool, what: impl FnOnce() -> String) -> Outcome {
    if holds {
        Ok(())
    } else {
        Err(Broken(what()))
    }
}

/// A scratch directory for targets that must read files, one per process, under the system's
/// temporary directory (`None` if it cannot be created: the target then does nothing).
pub fn scratch(name: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("dlq-fuzz-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}
