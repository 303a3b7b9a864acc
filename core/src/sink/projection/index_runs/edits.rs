//! Changes to the runs of one sled batch: inserts and removes of logical index keys, applied
//! to the runs they land in, read once and written once per batch.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::run::Run;
use super::{codec, run_kind, RUN_MAX};
use crate::sink::{show_key, SinkError};

/// A run read during the batch, with where the next run of its kind begins.
struct Loaded {
    entries: Run,
    /// The key of the tree's next run of the same kind (`None`: this run is the last), as read
    /// when loaded: the run takes every entry below it, so later edits of the batch find their
    /// run here without seeking in sled again.
    next: Option<Vec<u8>>,
}

/// Runs read and changed during one batch: run key → entries (empty: delete the run).
pub(crate) struct RunEdits<'t> {
    tree: &'t sled::Tree,
    runs: BTreeMap<Vec<u8>, Loaded>,
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
        match run.search(entry) {
            Ok(at) if !present => run.remove(at),
            Err(at) if present => run.insert(at, entry),
            _ => {}
        }
        Ok(true)
    }

    /// Writes every changed run into `batch`: runs longer than [`RUN_MAX`] split, empty
    /// ones deleted. A split's new keys fall strictly between the run's key and the next
    /// run's (its entries do), so they never meet another run's key.
    pub(crate) fn write_into(self, batch: &mut sled::Batch) {
        for (key, loaded) in self.runs {
            let entries = loaded.entries;
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
            for piece in 0..pieces {
                let first = piece * per_piece;
                let last = (first + per_piece).min(entries.len());
                let run_key = match piece {
                    0 => key.clone(),
                    _ => [&[kind][..], entries.get(first)].concat(),
                };
                batch.insert(
                    run_key,
                    codec::encode((first..last).map(|n| entries.get(n))),
                );
            }
        }
    }

    /// The run `entry` of `kind` belongs in, loaded: the last run keyed at or below it, or
    /// the sentinel (created empty when there is none).
    fn run_for(&mut self, kind: u8, entry: &[u8]) -> Result<&mut Run, SinkError> {
        let target = [&[kind][..], entry].concat();
        // New runs appear only when the batch is written, so the tree's runs are the batch's
        // (an emptied run stays until then). A loaded run answers when no run of the tree
        // starts between it and the entry.
        let known = self
            .runs
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(target.as_slice())))
            .next_back()
            .filter(|(key, loaded)| {
                key.first() == Some(&kind) && loaded.next.as_ref().is_none_or(|next| target < *next)
            })
            .map(|(key, _)| key.clone());
        let key = match known {
            Some(key) => key,
            None => self.load(kind, &target)?,
        };
        match self.runs.get_mut(&key) {
            Some(loaded) => Ok(&mut loaded.entries),
            // Cannot happen: `load` keeps the run it returns the key of.
            None => Err(SinkError::Corrupt {
                key: show_key(&key),
                reason: "index run vanished from the batch".into(),
                source: None,
            }),
        }
    }

    /// Reads the run of the tree that holds `target` (or the sentinel) unless the batch has it
    /// already, and the key of the run after it; returns its key.
    fn load(&mut self, kind: u8, target: &[u8]) -> Result<Vec<u8>, SinkError> {
        let (key, value) = match self.tree.range(vec![kind]..=target.to_vec()).next_back() {
            Some(found) => {
                let (key, value) = found?;
                (key.to_vec(), Some(value))
            }
            None => (vec![kind], None),
        };
        if self.runs.contains_key(&key) {
            return Ok(key);
        }
        let entries = match value {
            Some(value) => codec::decode(&value).ok_or_else(|| SinkError::Corrupt {
                key: show_key(&key),
                reason: "malformed index run".into(),
                source: None,
            })?,
            None => Run::default(),
        };
        let after = (
            Bound::Excluded(key.clone()),
            Bound::Excluded(vec![kind + 1]),
        );
        let next = match self.tree.range(after).next() {
            Some(found) => Some(found?.0.to_vec()),
            None => None,
        };
        self.runs.insert(key.clone(), Loaded { entries, next });
        Ok(key)
    }
}
