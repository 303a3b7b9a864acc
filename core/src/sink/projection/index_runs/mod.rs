//! The age, recency and FIFO indexes, stored as sorted **runs** of entries in few sled keys.
//!
//! Logically an index is the set of keys [`keys::by_age`], [`keys::by_recency`] and
//! [`keys::fifo`] build (kind byte, job, NUL, sort key, item): the projection stages them as
//! such, and readers walk them in order ([`range`]). Physically, projection format 5 keeps
//! each kind as runs: one sled key per run of up to [`RUN_MAX`] entries, whose key is the
//! run's kind ([`keys::INDEX_RUNS`]) followed by an entry at or below all of its entries, and
//! whose value is the entries front-coded ([`codec`]). One sled key per item (its record)
//! plus a few per run, instead of four per item: sled opens a 1M-item projection in a
//! fraction of the time (docs/benchmarks.md).
//!
//! Invariants, for each kind: run keys are distinct; every entry of a run sorts at or after
//! the run's key and before the next run's key; the kind byte alone (the **sentinel**) keys
//! the first run whenever an entry sorts before every other run. An entry therefore lives in
//! the last run whose key is at or below it, and only a split moves entries, always forward to
//! a new key, so a reader that walks runs while the applier rewrites them sees every entry
//! (once: it drops entries at or below the last one it returned).

mod codec;
mod edits;
mod range;
mod run;

pub(crate) use edits::{RunCache, RunEdits};
pub(crate) use range::{range, RunRange};

use super::keys;

/// Most entries a run holds after a batch. A longer run splits (`RunEdits::write_into`): a job's
/// last run into full runs and one with the rest, so appends (the age and FIFO indexes of new
/// items) rewrite a short tail in the next batches while full runs stay put; any other run
/// evenly, so entries that keep landing in one place (the recency index, newest first) never
/// leave a trail of one-entry runs. 32 wrote 1.9-2.4 KiB per event where 128 with even splits
/// wrote 3.0-4.5 KiB, at the same CPU per event, and sled's files after `dlq generate` are
/// 40-45 % smaller (docs/benchmarks.md, issue 37's fourth round).
pub(crate) const RUN_MAX: usize = 32;

/// The run kind (`A`, `R`, `F`) of a logical index key (`a`, `r`, `f` first), or `None` for any
/// other key.
pub(crate) fn run_kind(logical_key: &[u8]) -> Option<u8> {
    let kind = *logical_key.first()?;
    keys::INDEX_KINDS
        .iter()
        .zip(keys::INDEX_RUNS)
        .find(|(logical, _)| logical.first() == Some(&kind))
        .and_then(|(_, runs)| runs.first().copied())
}

/// The logical key of the entry `entry` of a run of kind `run_kind`.
fn logical_key(run_kind: u8, entry: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(entry.len() + 1);
    key.push(run_kind.to_ascii_lowercase());
    key.extend_from_slice(entry);
    key
}

/// What breaks the invariants above in `tree`'s runs, one line each (nothing: they hold).
#[cfg(test)]
pub(crate) fn violations(tree: &sled::Tree) -> Vec<String> {
    let mut found = Vec::new();
    for kind in keys::INDEX_RUNS {
        let mut previous_last: Option<Vec<u8>> = None;
        for entry in tree.scan_prefix(kind) {
            let Ok((key, value)) = entry else {
                found.push("sled refused the scan".into());
                break;
            };
            let shown = crate::sink::show_key(&key);
            let Some(run) = codec::decode(&value) else {
                found.push(format!("run {shown} does not decode"));
                continue;
            };
            let (Some(first), Some(last)) = (run.iter().next(), run.iter().last()) else {
                found.push(format!("run {shown} is empty"));
                continue;
            };
            if first < &key[1..] {
                found.push(format!("run {shown} holds an entry below its key"));
            }
            if previous_last
                .as_deref()
                .is_some_and(|before| before >= &key[1..])
            {
                found.push(format!(
                    "the run before {shown} holds entries at or after its key"
                ));
            }
            previous_last = Some(last.to_vec());
        }
    }
    found
}

#[cfg(test)]
mod tests;
