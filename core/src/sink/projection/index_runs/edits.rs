//! Changes to the runs of one sled batch: inserts and removes of logical index keys, applied
//! to the runs they land in, read once and written once per batch.
//!
//! The applier keeps the runs it wrote decoded between its batches ([`RunCache`]): new items
//! land in the same few runs (the newest of each job and index) batch after batch, and reading
//! each of them back from sled (two range seeks and a decode per run) cost the applier more
//! than editing them (issue 37, docs/benchmarks.md).

use std::collections::BTreeMap;
use std::ops::Bound;

use super::run::Run;
use super::{codec, run_kind, RUN_MAX};
use crate::sink::{show_key, SinkError};

/// Most runs a [`RunCache`] keeps: the newest run of each job in each of the three indexes
/// for a few hundred busy jobs, a few hundred KiB.
const CACHE_MAX_RUNS: usize = 1024;

/// Runs as an applier's earlier batches left them in sled, decoded, each with the key of the
/// next run of its kind. Valid only while nobody else writes the runs: the applier drops it
/// when the writer applied the projection itself (`Applied::generation`), and a batch sled
/// refused leaves it empty (its runs were taken out for the batch).
#[derive(Default)]
pub(crate) struct RunCache {
    runs: BTreeMap<Vec<u8>, Loaded>,
}

/// A cached run as tests see it: its key, its entries and the key of the next run of its kind.
#[cfg(test)]
pub(crate) type CachedRun = (Vec<u8>, Vec<Vec<u8>>, Option<Vec<u8>>);

impl RunCache {
    /// Each run held.
    #[cfg(test)]
    pub(crate) fn runs(&self) -> Vec<CachedRun> {
        let runs = self.runs.iter();
        runs.map(|(key, loaded)| {
            let entries = loaded.entries.iter().map(<[u8]>::to_vec).collect();
            (key.clone(), entries, loaded.next.clone())
        })
        .collect()
    }
}

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
    /// Runs as the tree holds them, decoded by earlier batches: taken from here before sled.
    cache: RunCache,
    /// The run key an entry would have (kind byte, entry), built here for each edit without
    /// an allocation.
    target: Vec<u8>,
}

impl<'t> RunEdits<'t> {
    /// Starts the edits of one batch over `tree`.
    pub(crate) fn new(tree: &'t sled::Tree) -> Self {
        Self::cached(tree, RunCache::default())
    }

    /// Starts the edits of one batch over `tree`, whose runs `cache` holds as they are now.
    pub(crate) fn cached(tree: &'t sled::Tree, cache: RunCache) -> Self {
        RunEdits {
            tree,
            runs: BTreeMap::new(),
            cache,
            target: Vec::new(),
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

    /// Writes every changed run into `batch`: runs longer than [`RUN_MAX`] split (a job's last
    /// run into full runs and one with the rest, any other evenly), empty ones deleted. A
    /// split's new keys fall strictly between the run's key and the next
    /// run's (its entries do), so they never meet another run's key.
    ///
    /// Returns the runs as the tree holds them once `batch` is applied: the cache for the next
    /// batch, to be kept only if sled took this one. It is empty when a run was deleted (the
    /// run before it, if cached, would name a next run that is gone).
    pub(crate) fn write_into(self, batch: &mut sled::Batch) -> RunCache {
        let RunEdits { runs, cache, .. } = self;
        let mut written = BTreeMap::new();
        let mut deleted = false;
        for (key, loaded) in runs {
            let Loaded { entries, next } = loaded;
            if entries.is_empty() {
                batch.remove(key);
                deleted = true;
                continue;
            }
            let Some(&kind) = key.first() else { continue };
            if entries.len() <= RUN_MAX {
                batch.insert(key.as_slice(), codec::encode(entries.iter()));
                written.insert(key, Loaded { entries, next });
                continue;
            }
            let pieces = entries.len().div_ceil(RUN_MAX);
            // A job's last run grows by appends: full runs and a short tail, so the next
            // batches rewrite only the tail. Any other run splits evenly, so inserts in one
            // place (newest first, say) never leave a trail of one-entry runs.
            let per_piece = match entries.last() {
                Some(last) if is_jobs_last_run(last, next.as_deref()) => RUN_MAX,
                _ => entries.len().div_ceil(pieces),
            };
            let starts: Vec<usize> = (0..pieces).map(|piece| piece * per_piece).collect();
            let keys: Vec<Vec<u8>> = starts
                .iter()
                .map(|&first| match first {
                    0 => key.clone(),
                    _ => [&[kind][..], entries.get(first)].concat(),
                })
                .collect();
            let nexts = keys.iter().skip(1).map(Some).chain([next.as_ref()]);
            for ((&first, run_key), next) in starts.iter().zip(&keys).zip(nexts) {
                let last = (first + per_piece).min(entries.len());
                let part = entries.slice(first..last);
                batch.insert(run_key.as_slice(), codec::encode(part.iter()));
                let (run_key, next) = (run_key.clone(), next.cloned());
                written.insert(
                    run_key,
                    Loaded {
                        entries: part,
                        next,
                    },
                );
            }
        }
        if deleted || written.len() > CACHE_MAX_RUNS {
            return RunCache::default();
        }
        let mut kept = cache;
        if kept.runs.len() + written.len() > CACHE_MAX_RUNS {
            // The runs this batch wrote are the likeliest to be written next.
            kept.runs.clear();
        }
        kept.runs.extend(written);
        kept
    }

    /// The run `entry` of `kind` belongs in, loaded: the last run keyed at or below it, or
    /// the sentinel (created empty when there is none).
    fn run_for(&mut self, kind: u8, entry: &[u8]) -> Result<&mut Run, SinkError> {
        let mut target = std::mem::take(&mut self.target);
        target.clear();
        target.push(kind);
        target.extend_from_slice(entry);
        // New runs appear only when the batch is written, so the tree's runs are the batch's
        // (an emptied run stays until then), and the cache's are the tree's.
        // (An error drops the buffer: the next edit allocates a new one.)
        if covering(&self.runs, kind, &target).is_none() {
            match covering(&self.cache.runs, kind, &target).map(<[u8]>::to_vec) {
                Some(key) => self.take_cached(key),
                None => self.load(kind, &target)?,
            }
        }
        let found = self
            .runs
            .range_mut::<[u8], _>((Bound::Unbounded, Bound::Included(target.as_slice())))
            .next_back();
        self.target = target;
        match found {
            Some((_, loaded)) => Ok(&mut loaded.entries),
            // Cannot happen: `load` keeps the run that holds `target`.
            None => Err(SinkError::Corrupt {
                key: show_key(&self.target),
                reason: "index run vanished from the batch".into(),
                source: None,
            }),
        }
    }

    /// Moves a cached run into the batch.
    fn take_cached(&mut self, key: Vec<u8>) {
        if let Some((key, loaded)) = self.cache.runs.remove_entry(&key) {
            self.runs.insert(key, loaded);
        }
    }

    /// Reads the run of the tree that holds `target` (or the sentinel) unless the batch has it
    /// already, and the key of the run after it.
    fn load(&mut self, kind: u8, target: &[u8]) -> Result<(), SinkError> {
        let (key, value) = match self.tree.range(vec![kind]..=target.to_vec()).next_back() {
            Some(found) => {
                let (key, value) = found?;
                (key.to_vec(), Some(value))
            }
            None => (vec![kind], None),
        };
        if self.runs.contains_key(&key) {
            return Ok(());
        }
        if self.cache.runs.contains_key(&key) {
            self.take_cached(key);
            return Ok(());
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
        self.runs.insert(key, Loaded { entries, next });
        Ok(())
    }
}

/// The key of the run of `runs` that holds `target` (a run key of `kind`): the last one keyed
/// at or below it, when no run of the tree starts between the two.
fn covering<'r>(runs: &'r BTreeMap<Vec<u8>, Loaded>, kind: u8, target: &[u8]) -> Option<&'r [u8]> {
    runs.range::<[u8], _>((Bound::Unbounded, Bound::Included(target)))
        .next_back()
        .filter(|(key, loaded)| {
            key.first() == Some(&kind) && loaded.next.as_deref().is_none_or(|next| target < next)
        })
        .map(|(key, _)| key.as_slice())
}

/// Whether the run whose last entry is `last_entry` is its job's last: the next run (its key
/// is the kind byte, then an entry) is another job's, or there is none. An entry starts with
/// its job and a NUL.
fn is_jobs_last_run(last_entry: &[u8], next_run_key: Option<&[u8]>) -> bool {
    match next_run_key.and_then(|key| key.get(1..)) {
        None => true,
        Some(next_entry) => job(last_entry).is_none() || job(next_entry) != job(last_entry),
    }
}

/// The job part of an index entry: its bytes up to and including the first NUL.
fn job(entry: &[u8]) -> Option<&[u8]> {
    let nul = entry.iter().position(|&byte| byte == 0)?;
    entry.get(..=nul)
}
