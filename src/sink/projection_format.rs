//! Which projection layouts (`m/projection_format`) a sink takes over as they are, and the
//! one change it makes to them when it does.
//!
//! - 4, current: pointer items, age / recency / FIFO indexes.
//! - 3: the same plus a signature index that nothing read. Taken over: the index is deleted.
//! - 2: items kept whole as JSON, plus the signature index. Such items stay readable as they
//!   are (`super::item_record`); taken over like 3.
//! - anything else (or none): the projection is rebuilt from the log.
//!
//! Taking over is repeatable: the index is deleted in batches and the format key is written
//! after the last one, so a crash part-way leaves format 2 or 3 and the next open deletes the
//! rest. sled recovers a prefix of its operations, never the format key without the deletes
//! before it.

use super::{keys, SinkError};

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

/// Brings a projection of format 2 or 3 to the current format; says which projections must be
/// rebuilt. Returns how many keys of the dropped signature index were deleted, for the log.
pub(crate) fn take_over(
    tree: &sled::Tree,
    format: Option<u64>,
) -> Result<(Takeover, usize), SinkError> {
    match format {
        Some(keys::CURRENT_PROJECTION_FORMAT) => Ok((Takeover::Current, 0)),
        Some(keys::POINTER_ITEMS_PROJECTION_FORMAT | keys::INLINE_ITEMS_PROJECTION_FORMAT) => {
            let deleted = delete_prefix(tree, keys::BY_SIGNATURE)?;
            tree.insert(
                keys::PROJECTION_FORMAT,
                &keys::CURRENT_PROJECTION_FORMAT.to_be_bytes(),
            )?;
            Ok((Takeover::Current, deleted))
        }
        _ => Ok((Takeover::Rebuild, 0)),
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

    fn tree_with(format: Option<u64>, signature_keys: usize) -> sled::Tree {
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
        tree.insert(b"ijob\0item-1", b"\x01\x05").unwrap();
        tree.insert(b"rjob\0x", b"").unwrap();
        tree
    }

    fn format_of(tree: &sled::Tree) -> Option<u64> {
        tree.get(keys::PROJECTION_FORMAT)
            .unwrap()
            .and_then(|bytes| keys::decode_u64(&bytes))
    }

    #[test]
    fn formats_2_and_3_lose_the_signature_index_and_nothing_else() {
        for format in [2, 3] {
            let tree = tree_with(Some(format), DELETE_BATCH * 2 + 3);
            let before = tree.len();
            let (takeover, deleted) = take_over(&tree, Some(format)).unwrap();
            assert_eq!(takeover, Takeover::Current);
            assert_eq!(deleted, DELETE_BATCH * 2 + 3);
            assert_eq!(tree.scan_prefix(keys::BY_SIGNATURE).count(), 0);
            assert_eq!(tree.len(), before - deleted);
            assert!(tree.get(b"ijob\0item-1").unwrap().is_some());
            assert!(tree.get(b"rjob\0x").unwrap().is_some());
            assert_eq!(format_of(&tree), Some(keys::CURRENT_PROJECTION_FORMAT));
        }
    }

    #[test]
    fn the_current_format_is_left_alone_and_others_are_rebuilt() {
        let tree = tree_with(Some(keys::CURRENT_PROJECTION_FORMAT), 3);
        assert_eq!(take_over(&tree, Some(4)).unwrap(), (Takeover::Current, 0));
        assert_eq!(tree.scan_prefix(keys::BY_SIGNATURE).count(), 3);
        for format in [None, Some(1), Some(5)] {
            let tree = tree_with(format, 3);
            assert_eq!(take_over(&tree, format).unwrap(), (Takeover::Rebuild, 0));
            assert_eq!(tree.scan_prefix(keys::BY_SIGNATURE).count(), 3);
            assert_eq!(format_of(&tree), format);
        }
    }
}
