//! Which projection layouts (`m/projection_format`) a sink takes over as they are, and the
//! one change it makes to them when it does.
//!
//! - 5, current: pointer items, age / recency / FIFO indexes in sorted runs
//!   (`crate::sink::projection::index_runs`).
//! - 4: the same indexes with one sled key per entry. Taken over: the entries move into runs.
//! - 3: format 4 plus a signature index that nothing read. Taken over: the index is deleted,
//!   then as 4.
//! - 2: items kept whole as JSON, plus the signature index. Such items stay readable as they
//!   are (`crate::sink::projection::item_record`); taken over like 3.
//! - anything else (or none): the projection is rebuilt from the log.
//!
//! Taking over is repeatable: keys are deleted (or moved into runs, the deletes in the same
//! batch as the runs that receive the entries) in batches, and the format key is written after
//! the last one, so a crash part-way leaves the old format and the next open does the rest.
//! sled recovers a prefix of its operations, never the format key without the batches before
//! it.

use crate::sink::projection::index_runs::RunEdits;
use crate::sink::projection::keys;
use crate::sink::SinkError;

/// Keys deleted per sled batch while dropping an old index.
const DELETE_BATCH: usize = 4096;

/// What opening does with the projection found in the tree.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Takeover {
    /// Current, or brought to current: catch up from its `applied_through`.
    Current,
    /// Another layout: rebuild it from the log.
    Rebuild,
}

/// What taking over changed, for the log.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TakenOver {
    /// Keys of the dropped signature index deleted.
    pub(crate) signature_keys: usize,
    /// Index entries moved from their own keys into runs.
    pub(crate) index_entries: usize,
}

/// Brings a projection of format 2, 3 or 4 to the current format; says which projections must
/// be rebuilt.
pub(crate) fn take_over(
    tree: &sled::Tree,
    format: Option<u64>,
) -> Result<(Takeover, TakenOver), SinkError> {
    let mut done = TakenOver::default();
    match format {
        Some(keys::CURRENT_PROJECTION_FORMAT) => return Ok((Takeover::Current, done)),
        Some(keys::POINTER_ITEMS_PROJECTION_FORMAT | keys::INLINE_ITEMS_PROJECTION_FORMAT) => {
            done.signature_keys = delete_prefix(tree, keys::BY_SIGNATURE)?;
        }
        Some(keys::KEYED_INDEXES_PROJECTION_FORMAT) => {}
        _ => return Ok((Takeover::Rebuild, done)),
    }
    for kind in keys::INDEX_KINDS {
        done.index_entries += move_into_runs(tree, kind)?;
    }
    tree.insert(
        keys::PROJECTION_FORMAT,
        &keys::CURRENT_PROJECTION_FORMAT.to_be_bytes(),
    )?;
    Ok((Takeover::Current, done))
}

/// Moves every index entry kept as its own key under `prefix` into the runs,
/// [`DELETE_BATCH`] entries per sled batch (each batch deletes the keys it moves).
fn move_into_runs(tree: &sled::Tree, prefix: &[u8]) -> Result<usize, SinkError> {
    let mut moved = 0;
    loop {
        let mut batch = sled::Batch::default();
        let mut runs = RunEdits::new(tree);
        let mut in_batch = 0;
        for entry in tree.scan_prefix(prefix).take(DELETE_BATCH) {
            let (key, _) = entry?;
            runs.set(&key, true)?;
            batch.remove(key);
            in_batch += 1;
        }
        if in_batch == 0 {
            return Ok(moved);
        }
        runs.write_into(&mut batch);
        tree.apply_batch(batch)?;
        moved += in_batch;
    }
}

/// Deletes every key under `prefix`, [`DELETE_BATCH`] keys per sled batch.
fn delete_prefix(tree: &sled::Tree, prefix: &[u8]) -> Result<usize, SinkError> {
    let mut deleted = 0;
    loop {
        let mut batch = sled::Batch::default();
        let mut in_batch = 0;
        for entry in tree.scan_prefix(prefix).take(DELETE_BATCH) {
            batch.remove(entry?.0);
            in_batch += 1;
        }
        if in_batch == 0 {
            return Ok(deleted);
        }
        tree.apply_batch(batch)?;
        deleted += in_batch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::projection::index_runs;

    fn tree_with(format: Option<u64>, signature_keys: usize, index_keys: usize) -> sled::Tree {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree: sled::Tree = (*db).clone();
        if let Some(format) = format {
            tree.insert(keys::PROJECTION_FORMAT, &format.to_be_bytes())
                .unwrap();
        }
        for n in 0..signature_keys {
            tree.insert(format!("ssig-{}\0job\0item-{n}", n % 7), b"")
                .unwrap();
        }
        for n in 0..index_keys {
            let job = format!("job-{}", n % 3);
            let item = format!("item-{n}");
            tree.insert(keys::by_age(&job, n as i64, &item), b"")
                .unwrap();
            tree.insert(keys::fifo(&job, n as u64, &item), b"").unwrap();
        }
        tree.insert(b"ijob\0item-1", b"\x01\x05").unwrap();
        tree
    }

    fn format_of(tree: &sled::Tree) -> Option<u64> {
        tree.get(keys::PROJECTION_FORMAT)
            .unwrap()
            .and_then(|bytes| keys::decode_u64(&bytes))
    }

    fn index(tree: &sled::Tree, kind: &[u8]) -> Vec<Vec<u8>> {
        index_runs::range(tree, kind, None)
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn formats_2_and_3_lose_the_signature_index_and_keep_their_entries_in_runs() {
        for format in [2, 3] {
            let tree = tree_with(Some(format), DELETE_BATCH * 2 + 3, 10);
            let ages: Vec<Vec<u8>> = tree
                .scan_prefix(keys::BY_AGE)
                .keys()
                .map(|k| k.unwrap().to_vec())
                .collect();
            let (takeover, done) = take_over(&tree, Some(format)).unwrap();
            assert_eq!(takeover, Takeover::Current);
            assert_eq!(done.signature_keys, DELETE_BATCH * 2 + 3);
            assert_eq!(done.index_entries, 20);
            assert_eq!(tree.scan_prefix(keys::BY_SIGNATURE).count(), 0);
            assert_eq!(index(&tree, keys::BY_AGE), ages);
            assert!(tree.get(b"ijob\0item-1").unwrap().is_some());
            assert_eq!(format_of(&tree), Some(keys::CURRENT_PROJECTION_FORMAT));
        }
    }

    #[test]
    fn format_4_moves_every_entry_into_runs() {
        let tree = tree_with(
            Some(keys::KEYED_INDEXES_PROJECTION_FORMAT),
            0,
            DELETE_BATCH + 5,
        );
        let ages: Vec<Vec<u8>> = tree
            .scan_prefix(keys::BY_AGE)
            .keys()
            .map(|k| k.unwrap().to_vec())
            .collect();
        let fifo: Vec<Vec<u8>> = tree
            .scan_prefix(keys::FIFO)
            .keys()
            .map(|k| k.unwrap().to_vec())
            .collect();
        let (takeover, done) = take_over(&tree, Some(4)).unwrap();
        assert_eq!(takeover, Takeover::Current);
        assert_eq!(done.index_entries, 2 * (DELETE_BATCH + 5));
        assert_eq!(tree.scan_prefix(keys::BY_AGE).count(), 0);
        assert_eq!(tree.scan_prefix(keys::FIFO).count(), 0);
        assert_eq!(index(&tree, keys::BY_AGE), ages);
        assert_eq!(index(&tree, keys::FIFO), fifo);
        assert!(index(&tree, keys::BY_RECENCY).is_empty());
        assert_eq!(format_of(&tree), Some(keys::CURRENT_PROJECTION_FORMAT));
        // One key per run of entries, the runs full but the last.
        let runs = tree.scan_prefix(keys::AGE_RUNS).count();
        let most = ages
            .len()
            .div_ceil(crate::sink::projection::index_runs::RUN_MAX);
        assert!(runs <= most, "{runs} runs for {} entries", ages.len());
    }

    #[test]
    fn the_current_format_is_left_alone_and_others_are_rebuilt() {
        let tree = tree_with(Some(keys::CURRENT_PROJECTION_FORMAT), 3, 0);
        assert_eq!(
            take_over(&tree, Some(keys::CURRENT_PROJECTION_FORMAT)).unwrap(),
            (Takeover::Current, TakenOver::default())
        );
        assert_eq!(tree.scan_prefix(keys::BY_SIGNATURE).count(), 3);
        for format in [None, Some(1), Some(keys::CURRENT_PROJECTION_FORMAT + 1)] {
            let tree = tree_with(format, 3, 3);
            assert_eq!(
                take_over(&tree, format).unwrap(),
                (Takeover::Rebuild, TakenOver::default())
            );
            assert_eq!(tree.scan_prefix(keys::BY_SIGNATURE).count(), 3);
            assert_eq!(tree.scan_prefix(keys::BY_AGE).count(), 3);
            assert_eq!(format_of(&tree), format);
        }
    }
}
