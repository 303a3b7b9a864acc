//! Applies logged events to the sled projection behind the durable `applied_through` mark.
//!
//! The log is the source of truth; sled holds what operators query (items, indexes, per-job
//! counters). Each batch of projection changes carries the `applied_through` mark in the same
//! sled batch, so sled, as of any checkpoint, knows exactly which events it has: opening
//! applies the log from that mark on ([`catch_up`]), and a rebuild clears the projection and
//! applies the whole log.

use tracing::warn;

use crate::domain::event::Event;
use crate::sink::log_fs::Reader;
use crate::sink::projection::index_runs::{RunCache, RunEdits};
use crate::sink::projection::keys;
use crate::sink::projection::staged::Staged;
use crate::sink::projection::Write;
use crate::sink::SinkError;

/// Events applied per sled batch when catching up.
const CHUNK: usize = 10_000;

/// Applies `writes` (the projection changes of events up to `through`) and the mark, as one
/// sled batch. Index keys among them change the index runs they fall in ([`crate::sink::projection::index_runs`]).
pub(crate) fn apply(tree: &sled::Tree, writes: Vec<Write>, through: u64) -> Result<(), SinkError> {
    apply_cached(tree, writes, through, &mut RunCache::default())
}

/// [`apply`], editing the runs `cache` holds without reading them from sled; `cache` then
/// holds them as this batch left them (empty if sled refused it).
pub(crate) fn apply_cached(
    tree: &sled::Tree,
    writes: Vec<Write>,
    through: u64,
    cache: &mut RunCache,
) -> Result<(), SinkError> {
    let mut batch = sled::Batch::default();
    let mut runs = RunEdits::cached(tree, std::mem::take(cache));
    for (key, value) in writes {
        if runs.set(&key, value.is_some())? {
            continue;
        }
        match value {
            Some(value) => batch.insert(key, value),
            None => batch.remove(key),
        }
    }
    let after = runs.write_into(&mut batch);
    batch.insert(keys::APPLIED_THROUGH, &through.to_be_bytes());
    tree.apply_batch(batch)?;
    *cache = after;
    Ok(())
}

/// The mark stored in `tree` (0: nothing applied).
pub(crate) fn applied_through(tree: &sled::Tree) -> Result<u64, SinkError> {
    Ok(tree
        .get(keys::APPLIED_THROUGH)?
        .and_then(|bytes| keys::decode_u64(&bytes))
        .unwrap_or(0))
}

/// Applies every durable event after `applied` to the projection; returns the new mark and
/// how many events were applied. An event whose bytes are not an event (possible only in a
/// log migrated from sink format 2) is skipped with a warning: the reconciler parks it.
pub(crate) fn catch_up(
    tree: &sled::Tree,
    reader: &Reader,
    applied: u64,
) -> Result<(u64, u64), SinkError> {
    catch_up_skipping(tree, reader, applied, |_| false)
}

/// [`catch_up`], leaving out the events `skip` says the projection holds already (a
/// rebuild's items kept whole, `crate::sink::writer`); they count as applied for the mark.
pub(crate) fn catch_up_skipping(
    tree: &sled::Tree,
    reader: &Reader,
    applied: u64,
    skip: impl Fn(&Event) -> bool,
) -> Result<(u64, u64), SinkError> {
    let mut chunk: Vec<Event> = Vec::new();
    let (mut through, mut count) = (applied, 0);
    for record in reader.records(applied.saturating_add(1)) {
        let record = record?;
        match Event::from_json(&record.payload) {
            Ok(event) if skip(&event) => {}
            Ok(event) => chunk.push(event),
            Err(err) => warn!(
                seq = record.seq,
                error = %err,
                "a logged event cannot be decoded; the projection skips it"
            ),
        }
        through = record.seq;
        if chunk.len() == CHUNK {
            count += apply_events(tree, reader, &std::mem::take(&mut chunk), through)?;
        }
    }
    if through > applied {
        count += apply_events(tree, reader, &chunk, through)?;
    }
    Ok((through, count))
}

/// Removes every projection key and the mark, so that [`catch_up`] from 0 rebuilds it.
pub(crate) fn clear(tree: &sled::Tree) -> Result<(), SinkError> {
    for prefix in keys::PROJECTION_PREFIXES {
        let mut batch = sled::Batch::default();
        for entry in tree.scan_prefix(prefix) {
            batch.remove(entry?.0);
        }
        tree.apply_batch(batch)?;
    }
    tree.remove(keys::APPLIED_THROUGH)?;
    tree.remove(keys::INLINED_THROUGH)?;
    Ok(())
}

fn apply_events(
    tree: &sled::Tree,
    reader: &Reader,
    events: &[Event],
    through: u64,
) -> Result<u64, SinkError> {
    let first_seq = events.first().map_or(through, |e| e.seq);
    let mut staged = Staged::new(tree, reader, first_seq);
    for event in events {
        staged.stage_events(std::slice::from_ref(event))?;
    }
    apply(tree, staged.into_writes(), through)?;
    Ok(events.len() as u64)
}
