//! Changes to the runs of one sled batch: inserts and removes of logical index keys, applied
//! to the runs they land in, read once and written once per batch.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use super::{codec, run_kind, RUN_MAX};
use crate::sink::{show_key, SinkError};

/// Runs read and changed during one batch: run key → entries (empty: delete the run).
pub(crate) struct RunEdits<'t> {
    tree: &'t sled::Tree,
    runs: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
}

impl<'t> RunEdits<'t> {
    /// Starts the edits of one batch over `tree`.
    pub(crate) fn new(tree: &'t sled::Tree) -> Self {
        RunEdits {
            tree,
            runs: BTreeMap::new(),
        }
    }

    /// Sets (`present`) or clears the logical index key `key`; `false` if `key` is not an
    /// index key (nothing done).
    pub(crate) fn set(&mut self, key: &[u8], present: bool) -> Result<bool, SinkError> {
        let Some(kind) = run_kind(key) else {
            return Ok(false);
        };
        let entry = &key[1..];
        let run = self.run_for(kind, entry)?;
        match run.binary_search_by(|e| e.as_slice().cmp(entry)) {
            Ok(at) if !present => {
                run.remove(at);
            }
            Err(at) if present => run.insert(at, entry.to_vec()),
            _ => {}
        }
        Ok(true)
    }

    /// Writes every changed run into `batch`: runs longer than [`RUN_MAX`] split, empty
    /// ones deleted. A split's new keys fall strictly between the run's key and the next
    /// run's (its entries do), so they never meet another run's key.
    pub(crate) fn write_into(self, batch: &mut sled::Batch) {
        for (key, entries) in self.runs {
            if entries.is_empty() {
                batch.remove(key);
                continue;
            }
            let Some(&kind) = key.first() else { continue };
            let pieces = match entries.len() {
                n if n > RUN_MAX => n.div_ceil(RUN_MAX),
                _ => 1,
            };
            let per_piece = entries.len().div_ceil(pieces);
            for (n, piece) in entries.chunks(per_piece).enumerate() {
                let run_key = match n {
                    0 => key.clone(),
                    _ => [&[kind][..], &piece[0]].concat(),
                };
                batch.insert(run_key, codec::encode(piece));
            }
        }
    }

    /// The run `entry` of `kind` belongs in, loaded: the last run keyed at or below it, or
    /// the sentinel (created empty when there is none).
    fn run_for(&mut self, kind: u8, entry: &[u8]) -> Result<&mut Vec<Vec<u8>>, SinkError> {
        let target = [&[kind][..], entry].concat();
        // New runs appear only when the batch is written, so the tree's runs are the batch's
        // (an emptied run stays until then); none at or below the entry: the sentinel.
        let key = match self.tree.range(vec![kind]..=target).next_back() {
            Some(found) => found?.0.to_vec(),
            None => vec![kind],
        };
        match self.runs.entry(key) {
            Entry::Occupied(run) => Ok(run.into_mut()),
            Entry::Vacant(run) => {
                let entries = match self.tree.get(run.key())? {
                    Some(value) => codec::decode(&value).ok_or_else(|| SinkError::Corrupt {
                        key: show_key(run.key()),
                        reason: "malformed index run".into(),
                    })?,
                    None => Vec::new(),
                };
                Ok(run.insert(entries))
            }
        }
    }
}
