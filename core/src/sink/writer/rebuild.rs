//! A rebuild of the projection (`dlq rebuild`, [`crate::sink::LocalSink::rebuild_projection`],
//! and the one an open starts for a projection of another layout): from the log **and** the
//! items kept whole in sled.
//!
//! Retention deletes done log segments once the live items created in them are kept whole in
//! sled (`crate::sink::projection::inline_items`): for those items sled is this node's only copy. A
//! rebuild from the log alone dropped them (issue 33: after retention, `dlq rebuild` left 5
//! items of 10 and exited 0). So a rebuild keeps them. A kept item is its item's state as of
//! the projection's applied mark `K` (an item and the mark change in one sled batch, and a
//! later event keeps a kept item whole); the rebuild clears the projection, puts every kept
//! item back (value, indexes, counters), then applies the log from its start, skipping the
//! events at or below `K` of kept items (they are in them already) and applying everything else.
//!
//! **Crash safety.** Before anything is cleared, the kept items are copied under
//! [`KEPT`] and the mark [`REBUILD_KEPT_THROUGH`] `= K` is stored with the projection format
//! key removed, and a checkpoint that deletes no segment makes them durable. A crash from
//! then on leaves the mark: the next open finds no projection format, rebuilds again, and takes
//! the kept items from the copy, never from the half-built projection. The batch that ends the
//! rebuild removes the mark; the copy is deleted after it.
//!
//! **Refused, changing nothing:** an item pointing at a log sequence below the log's first
//! segment (its first events were deleted by an older dlq's retention, or by hand), and a
//! kept item that cannot be read (nothing on this node could rebuild it).

use std::collections::{HashMap, HashSet};

use tracing::{info, warn};

use super::Writer;
use crate::domain::projection::StoredItem;
use crate::sink::projection::counters::JobCounters;
use crate::sink::projection::inline_items;
use crate::sink::projection::item_record::ItemRecord;
use crate::sink::projection::keys;
use crate::sink::projection::projector;
use crate::sink::projection::staged::index;
use crate::sink::projection::Write;
use crate::sink::{show_key, SinkError};

/// Prefix of the kept items' copy during a rebuild: `k` + job + NUL + item → the item's JSON.
pub(crate) const KEPT: &[u8] = b"k";
/// While a rebuild runs: the applied mark its kept items are the state as of.
pub(crate) const REBUILD_KEPT_THROUGH: &[u8] = b"m/rebuild_kept_through";

/// Keys changed per sled batch.
const PER_BATCH: usize = 2048;

impl Writer {
    /// Rebuilds the projection from the log and the items kept whole, durably (see the module
    /// doc); returns how many logged events were applied.
    pub(crate) fn rebuild_durably(&mut self) -> Result<u64, SinkError> {
        // The rebuild puts items in the tree that no group of this writer staged.
        self.known.forget();
        let kept_through = match mark(&self.tree, REBUILD_KEPT_THROUGH)? {
            // An interrupted rebuild: its copy is whole, the projection is not.
            Some(mark) => mark,
            None => {
                // Whatever retention deletes goes now, before the kept items are taken.
                self.checkpoint().map_err(SinkError::from)?;
                self.refuse_lossy_rebuild()?;
                self.copy_kept_items()?
            }
        };
        self.checkpoint_keeping_log().map_err(SinkError::from)?;
        let inlined = inline_items::inlined_through(&self.tree)?;
        projector::clear(&self.tree)?;
        let kept = restore_kept_items(&self.tree)?;
        let reader = self.log.reader();
        let skip = |event: &crate::domain::event::Event| {
            event.seq <= kept_through
                && event
                    .kind
                    .item_id()
                    .is_some_and(|item| kept.contains(&kept_key(&event.job_id, item)))
        };
        let (through, applied) = projector::catch_up_skipping(&self.tree, &reader, 0, skip)?;
        let through = through.max(kept_through);
        self.applied.recovered(through);
        let mut done = sled::Batch::default();
        done.insert(
            keys::PROJECTION_FORMAT,
            &keys::CURRENT_PROJECTION_FORMAT.to_be_bytes(),
        );
        done.insert(keys::APPLIED_THROUGH, &through.to_be_bytes());
        if inlined > 0 {
            done.insert(keys::INLINED_THROUGH, &inlined.to_be_bytes());
        }
        done.remove(REBUILD_KEPT_THROUGH);
        self.tree.apply_batch(done)?;
        self.checkpoint().map_err(SinkError::from)?;
        if let Err(err) = remove_prefix(&self.tree, KEPT) {
            warn!(error = %err, "cannot delete the rebuild's copy of the items kept whole; the next rebuild deletes it");
        }
        if !kept.is_empty() {
            info!(
                kept = kept.len(),
                applied, "rebuilt the projection from the log and the items kept whole in sled"
            );
        }
        Ok(applied)
    }

    /// Refuses a rebuild that would lose items: one that points into the log below its first
    /// segment, or one kept whole that cannot be read. Reads only.
    fn refuse_lossy_rebuild(&self) -> Result<(), SinkError> {
        let log_from = self.log.segments().first().copied();
        for entry in self.tree.scan_prefix(keys::ITEM) {
            let (key, value) = entry?;
            match ItemRecord::decode(&value) {
                Ok(ItemRecord::Events(seqs)) => {
                    let first = seqs.first().copied().unwrap_or(0);
                    if log_from.is_none_or(|from| first < from) {
                        let from = log_from.map_or("holds no segment".into(), |from| {
                            format!("starts at sequence {from}")
                        });
                        return Err(SinkError::Rejected(format!(
                            "item {} was created at sequence {first} but the log {from}: a rebuild would lose it (its first events were in log segments deleted by hand, or by an older dlq's retention). Nothing was changed; export the items first (`dlq export`) if you must rebuild",
                            show_key(&key)
                        )));
                    }
                }
                Ok(ItemRecord::Inline(json)) => {
                    if let Err(err) = serde_json::from_slice::<StoredItem>(&json) {
                        return Err(SinkError::Rejected(format!(
                            "item {} is kept whole in sled (its events are older than the log) but cannot be read ({err}): a rebuild cannot make it again. Nothing was changed; the NATS stream holds its events (a consumer rebuilds it), and `dlq export` saves the readable items",
                            show_key(&key)
                        )));
                    }
                }
                // A damaged pointer record: its item is made again from the log.
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Copies every item kept whole under [`KEPT`], then stores the mark and removes the
    /// projection format key in one batch; returns the mark.
    fn copy_kept_items(&self) -> Result<u64, SinkError> {
        // A copy left by a rebuild that ended before deleting it.
        remove_prefix(&self.tree, KEPT)?;
        let kept_through = projector::applied_through(&self.tree)?;
        let mut batch = sled::Batch::default();
        let mut in_batch = 0;
        for entry in self.tree.scan_prefix(keys::ITEM) {
            let (key, value) = entry?;
            if !matches!(ItemRecord::decode(&value), Ok(ItemRecord::Inline(_))) {
                continue;
            }
            let mut kept = KEPT.to_vec();
            kept.extend_from_slice(key.get(keys::ITEM.len()..).unwrap_or_default());
            batch.insert(kept, value);
            in_batch += 1;
            if in_batch == PER_BATCH {
                self.tree.apply_batch(std::mem::take(&mut batch))?;
                in_batch = 0;
            }
        }
        batch.insert(REBUILD_KEPT_THROUGH, &kept_through.to_be_bytes());
        batch.remove(keys::PROJECTION_FORMAT);
        self.tree.apply_batch(batch)?;
        Ok(kept_through)
    }
}

/// The key of an item in the kept set.
fn kept_key(job_id: &str, item_id: &str) -> String {
    format!("{job_id}\0{item_id}")
}

/// Puts every item of the copy back into the cleared projection: its value, its index
/// entries, its job's counters. Returns the items put back.
fn restore_kept_items(tree: &sled::Tree) -> Result<HashSet<String>, SinkError> {
    let mut kept = HashSet::new();
    let mut counts: HashMap<String, JobCounters> = HashMap::new();
    let mut writes: Vec<Write> = Vec::new();
    for entry in tree.scan_prefix(KEPT) {
        let (key, value) = entry?;
        let stored: StoredItem = match serde_json::from_slice(&value) {
            Ok(stored) => stored,
            Err(err) => {
                // Read before it was copied: only a damaged disk gets here.
                warn!(key = %show_key(&key), error = %err, "an item kept whole cannot be read back from the rebuild's copy; it is left out");
                continue;
            }
        };
        let item = &stored.item;
        let mut item_key = keys::ITEM.to_vec();
        item_key.extend_from_slice(key.get(KEPT.len()..).unwrap_or_default());
        let mut idx = std::collections::BTreeMap::new();
        index(&mut idx, &stored);
        writes.extend(idx);
        writes.push((item_key, Some(value.to_vec())));
        counts.entry(item.job_id.clone()).or_default().add(item);
        kept.insert(kept_key(&item.job_id, &item.item_id));
        if writes.len() >= PER_BATCH {
            projector::apply(tree, std::mem::take(&mut writes), 0)?;
        }
    }
    for (job, count) in counts {
        writes.push((keys::job_count(&job), Some(count.encode())));
    }
    projector::apply(tree, writes, 0)?;
    Ok(kept)
}

/// A `u64` mark stored under `key`, if any.
fn mark(tree: &sled::Tree, key: &[u8]) -> Result<Option<u64>, SinkError> {
    Ok(tree.get(key)?.and_then(|bytes| keys::decode_u64(&bytes)))
}

/// Removes every key under `prefix`, a batch at a time.
fn remove_prefix(tree: &sled::Tree, prefix: &[u8]) -> Result<(), SinkError> {
    loop {
        let mut batch = sled::Batch::default();
        let mut count = 0;
        for entry in tree.scan_prefix(prefix).take(PER_BATCH) {
            batch.remove(entry?.0);
            count += 1;
        }
        if count == 0 {
            return Ok(());
        }
        tree.apply_batch(batch)?;
    }
}
