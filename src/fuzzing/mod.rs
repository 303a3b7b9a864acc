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

pub use dlq::fuzzing::{
    check, consumer_fold, event_json, journal_segment, log_segment, scratch, Broken, Outcome,
    Target,
};

mod api;
mod operator;

pub use api::{api_body, api_query, api_response};
pub use operator::{cel_filter, import_file, workflow_yaml};

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
