//! Entry points into every decoder of outside data, for the cargo-fuzz targets in `fuzz/` and
//! the regression test `tests/fuzz_regressions.rs`. Not an API: built only with the `fuzzing`
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
//! | [`import_file`] | a `dlq import` source: JSON Lines, JSON array or a job directory |
//! | [`workflow_yaml`] | a `dlq run` workflow file |
//! | [`cel_filter`] | a CEL filter, compiled and evaluated against an item |
//! | [`api_query`] | an admin API query string, per route |
//! | [`api_body`] | an admin API JSON body (retry, purge) |
//! | [`api_response`] | an admin API answer, as the forwarding CLI reads it |

use std::fmt;

mod api;
mod events;
mod journal;
mod log_segment;
mod operator;

pub use api::{api_body, api_query, api_response};
pub use events::{consumer_fold, event_json};
pub use journal::journal_segment;
pub use log_segment::log_segment;
pub use operator::{cel_filter, import_file, workflow_yaml};

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

/// Every target by name, for the regression test and the fuzz crate.
pub const TARGETS: &[(&str, Target)] = &[
    ("event_json", event_json),
    ("consumer_fold", consumer_fold),
    ("journal_segment", journal_segment),
    ("log_segment", log_segment),
    ("import_file", import_file),
    ("workflow_yaml", workflow_yaml),
    ("cel_filter", cel_filter),
    ("api_query", api_query),
    ("api_body", api_body),
    ("api_response", api_response),
];

/// Fails with `what` unless `holds`.
fn check(holds: bool, what: impl FnOnce() -> String) -> Outcome {
    if holds {
        Ok(())
    } else {
        Err(Broken(what()))
    }
}

/// A scratch directory for targets that must read files, one per process, under the system's
/// temporary directory (`None` if it cannot be created: the target then does nothing).
fn scratch(name: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("dlq-fuzz-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}
