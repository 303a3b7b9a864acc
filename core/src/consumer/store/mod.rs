//! A durable consumer's own sled store: its projection, per-node cursors and checkpoint.
//!
//! After each fetched batch the consumer saves what the batch changed (the fold's
//! [`Touched`](super::fold::Touched) record) together with the stream sequence it reached, as one
//! sled batch, and flushes it durably: sled's own flush is not durable (see
//! `crate::sink::checkpoint`), so the store flushes through the sink's [`SledFlusher`], which
//! fdatasyncs sled's log and fsyncs its new blob files. A save is prepared on the consumer's task (the changed items copied
//! out of the fold) and encoded and written on a blocking thread while the next batch is fetched
//! and folded ([`ConsumerStore::prepare`], [`PendingSave::commit`]); saves are written one at a
//! time, in order, so the stored state is always the state at its stored checkpoint. The items
//! go in chunks of changes ([`super::item_log`]), a few sled values per save; a save reserves
//! one chunk number per change when prepared, so the next save can be prepared before this one
//! is encoded. The store is a cache of the stream: deleting it only costs a rebuild.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use thiserror::Error;

use super::fold::{AcceptedGap, Chain, Fold, FoldStats, HeldItem};
use super::item_log::{self, Change, ChangeRef, Chunks, COMPACT_SLACK};
use crate::domain::projection::StoredItem;
use crate::sink::checkpoint::{flush_shared, SharedFlusher, SledFlusher};
use crate::sink::sled_open::{open_waiting_for_lock, LOCK_WAIT};
use crate::Cause;

/// An item as one key (`i` + job + NUL + item → StoredItem JSON): how stores before the chunks
/// kept items. Loaded, and deleted by the first save, which writes every item in chunks.
const ITEM: &[u8] = b"i";
/// A chunk of item changes: `c` + chunk number (8 bytes, big-endian) → [`item_log`] chunk.
const CHUNK: &[u8] = b"c";
/// Where the chunks are ([`Chunks`] JSON).
const CHUNKS: &[u8] = b"m/chunks";
/// A node's chain of events without an epoch: `n` + node → [`Chain`] JSON (before epochs, the
/// node's whole cursor, in the same form).
const NODE: &[u8] = b"n";
/// A node's chain of one epoch: `e` + node + NUL + epoch → [`Chain`] JSON. One key per chain,
/// so a save rewrites only the chains it changed, however often the node restarted.
const EPOCH: &[u8] = b"e";
const VOLATILE: &[u8] = b"v";
const CHECKPOINT: &[u8] = b"m/checkpoint";
const STATS: &[u8] = b"m/stats";
/// Gaps an operator accepted, by time: the audit trail of `--accept-gap`.
const ACCEPTED_GAP: &[u8] = b"g";
/// An item held back until its full event comes: `h` + job + NUL + item → [`HeldItem`] JSON.
const HELD: &[u8] = b"h";

/// The store could not be used.
#[derive(Debug, Error)]
pub enum StoreError {
    /// sled failed or the directory is unusable.
    #[error("consumer store {path}: {reason} (it can be deleted: `dlq consume --from-start` rebuilds it)")]
    Io {
        /// The store directory.
        path: PathBuf,
        /// What failed (the cause's text included).
        reason: String,
        /// The error behind `reason` (sled, I/O, JSON), if there is one.
        #[source]
        source: Option<Cause>,
    },
}

impl StoreError {
    /// The error of the store at `path` that `err` caused.
    fn caused<E: std::error::Error + Send + Sync + 'static>(path: &Path, err: E) -> Self {
        StoreError::Io {
            path: path.to_owned(),
            reason: err.to_string(),
            source: Some(err.into()),
        }
    }
}

/// One save, prepared, not yet written: see [`ConsumerStore::prepare`].
#[must_use = "a prepared save is written only by commit"]
pub struct PendingSave {
    db: sled::Db,
    flusher: SharedFlusher,
    path: PathBuf,
    batch: sled::Batch,
    items: ItemWrite,
}

/// What a prepared save writes of the items.
struct ItemWrite {
    /// The changes, to go in chunks numbered from `first_chunk`.
    changes: ItemChanges,
    first_chunk: u64,
    /// Chunk numbers whose chunks this save deletes (a compaction), once the saves before it
    /// are written.
    delete_chunks: Option<std::ops::Range<u64>>,
}

/// The item changes of a prepared save.
enum ItemChanges {
    /// Encoded already: a compaction writes every live item, encoded on the consumer's task
    /// rather than copied.
    Encoded(Vec<Vec<u8>>),
    /// Copied out of the fold, encoded by [`PendingSave::commit`].
    Copied(Vec<Change>),
}

impl PendingSave {
    /// Encodes the items' changes, applies the batch atomically and flushes (blocking).
    pub fn commit(self) -> Result<(), StoreError> {
        let PendingSave {
            db,
            flusher,
            path,
            mut batch,
            items:
                ItemWrite {
                    changes,
                    first_chunk,
                    delete_chunks,
                },
        } = self;
        let chunks = match changes {
            ItemChanges::Encoded(chunks) => chunks,
            ItemChanges::Copied(changes) => {
                item_log::encode(changes.iter().map(Change::as_written))
                    .map_err(|err| StoreError::caused(&path, err))?
            }
        };
        for (number, chunk) in (first_chunk..).zip(chunks) {
            batch.insert(chunk_key(number), chunk);
        }
        if let Some(numbers) = delete_chunks {
            // Read here, not when prepared: the saves before this one are written by now.
            for key in db
                .range(chunk_key(numbers.start)..chunk_key(numbers.end))
                .keys()
            {
                batch.remove(key.map_err(|err| StoreError::caused(&path, err))?);
            }
        }
        db.apply_batch(batch)
            .map_err(|err| StoreError::caused(&path, err))?;
        flush_shared(&flusher).map_err(|err| StoreError::caused(&path, err))?;
        Ok(())
    }
}

/// A consumer's persisted state.
pub struct ConsumerStore {
    path: PathBuf,
    db: sled::Db,
    /// Makes a save durable.
    flusher: SharedFlusher,
    /// What the saves prepared so far leave (ahead of sled while one is written).
    saved: Mutex<Saved>,
    /// Stale entries tolerated before a save compacts ([`COMPACT_SLACK`]; smaller in tests).
    slack: u64,
}

/// The store as the saves prepared so far leave it.
#[derive(Debug, Default)]
struct Saved {
    chunks: Chunks,
    /// Items are still kept one key each (until a save moves them into chunks).
    items_per_key: bool,
}

fn chunk_key(number: u64) -> Vec<u8> {
    [CHUNK, &number.to_be_bytes()].concat()
}

fn key(prefix: &[u8], parts: &[&str]) -> Vec<u8> {
    let mut key = prefix.to_vec();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            key.push(0);
        }
        key.extend_from_slice(part.as_bytes());
    }
    key
}

impl ConsumerStore {
    /// Opens (or creates) the store in `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with_slack(path, COMPACT_SLACK)
    }

    fn open_with_slack(path: &Path, slack: u64) -> Result<Self, StoreError> {
        let config = sled::Config::new().path(path).flush_every_ms(None);
        let db = open_waiting_for_lock(&config, LOCK_WAIT)
            .map_err(|err| StoreError::caused(path, err))?;
        let flusher = SledFlusher::open(db.clone(), path).map_err(|err| StoreError::Io {
            path: path.to_owned(),
            reason: format!("cannot open sled's log file for fsync: {err}"),
            source: Some(err.into()),
        })?;
        let store = ConsumerStore {
            path: path.to_owned(),
            db,
            flusher: Arc::new(Mutex::new(flusher)),
            saved: Mutex::new(Saved::default()),
            slack,
        };
        *store.saved()? = store.stored()?;
        Ok(store)
    }

    fn saved(&self) -> Result<MutexGuard<'_, Saved>, StoreError> {
        self.saved
            .lock()
            .map_err(|_| self.broken("a save panicked while preparing; reopen the store".into()))
    }

    /// The store as sled holds it.
    fn stored(&self) -> Result<Saved, StoreError> {
        let chunks = match self.db.get(CHUNKS).map_err(|e| self.io(e))? {
            Some(value) => serde_json::from_slice(&value).map_err(|e| self.io(e))?,
            None => Chunks::default(),
        };
        let items_per_key = self.db.scan_prefix(ITEM).next().is_some();
        Ok(Saved {
            chunks,
            items_per_key,
        })
    }

    /// The error `err` caused, kept as its source.
    fn io<E: std::error::Error + Send + Sync + 'static>(&self, err: E) -> StoreError {
        StoreError::caused(&self.path, err)
    }

    /// An error with no other error behind it (a malformed key, a poisoned lock).
    fn broken(&self, reason: String) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            reason,
            source: None,
        }
    }

    /// The stream sequence the saved state reflects (0: nothing saved).
    pub fn checkpoint(&self) -> Result<u64, StoreError> {
        let value = self.db.get(CHECKPOINT).map_err(|e| self.io(e))?;
        Ok(value
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }

    /// Loads the saved fold.
    pub fn load(&self) -> Result<Fold, StoreError> {
        let mut fold = Fold::default();
        let items = &mut fold.projection.items;
        for entry in self.db.scan_prefix(ITEM) {
            let (_, value) = entry.map_err(|e| self.io(e))?;
            let stored: StoredItem = serde_json::from_slice(&value).map_err(|e| self.io(e))?;
            let key = (stored.item.job_id.clone(), stored.item.item_id.clone());
            items.insert(key, stored);
        }
        for entry in self.db.scan_prefix(CHUNK) {
            let (key, chunk) = entry.map_err(|e| self.io(e))?;
            for change in item_log::decode(&chunk) {
                let change = change.map_err(|e| StoreError::Io {
                    path: self.path.clone(),
                    reason: format!("chunk {}: {e}", String::from_utf8_lossy(&key)),
                    source: Some(e.into()),
                })?;
                match change {
                    Change::Put(stored) => {
                        let key = (stored.item.job_id.clone(), stored.item.item_id.clone());
                        items.insert(key, *stored);
                    }
                    Change::Removed { job_id, item_id } => {
                        items.remove(&(job_id, item_id));
                    }
                }
            }
        }
        *self.saved()? = self.stored()?;
        for entry in self.db.scan_prefix(NODE) {
            let (key, value) = entry.map_err(|e| self.io(e))?;
            let node = String::from_utf8_lossy(key.get(NODE.len()..).unwrap_or_default());
            let chain: Chain = serde_json::from_slice(&value).map_err(|e| self.io(e))?;
            let cursor = fold.nodes.entry(node.into_owned()).or_default();
            cursor.set_chain(None, chain);
        }
        for entry in self.db.scan_prefix(EPOCH) {
            let (key, value) = entry.map_err(|e| self.io(e))?;
            let rest = key.get(EPOCH.len()..).unwrap_or_default();
            let Some(split) = rest.iter().position(|&b| b == 0) else {
                return Err(self.broken(format!(
                    "malformed epoch key {:?}",
                    String::from_utf8_lossy(&key)
                )));
            };
            let node = String::from_utf8_lossy(&rest[..split]).into_owned();
            let epoch = String::from_utf8_lossy(&rest[split + 1..]).into_owned();
            let chain: Chain = serde_json::from_slice(&value).map_err(|e| self.io(e))?;
            fold.nodes
                .entry(node)
                .or_default()
                .set_chain(Some(epoch), chain);
        }
        for entry in self.db.scan_prefix(VOLATILE) {
            let (key, _) = entry.map_err(|e| self.io(e))?;
            let id = String::from_utf8_lossy(key.get(VOLATILE.len()..).unwrap_or_default());
            fold.volatile_seen.insert(id.into_owned());
        }
        for entry in self.db.scan_prefix(HELD) {
            let (key, value) = entry.map_err(|e| self.io(e))?;
            let rest = key.get(HELD.len()..).unwrap_or_default();
            let Some(split) = rest.iter().position(|&b| b == 0) else {
                let shown = String::from_utf8_lossy(&key);
                return Err(self.broken(format!("malformed held key {shown:?}")));
            };
            let job = String::from_utf8_lossy(&rest[..split]).into_owned();
            let item = String::from_utf8_lossy(&rest[split + 1..]).into_owned();
            let held: HeldItem = serde_json::from_slice(&value).map_err(|e| self.io(e))?;
            fold.held.insert((job, item), held);
        }
        if let Some(stats) = self.db.get(STATS).map_err(|e| self.io(e))? {
            fold.stats = serde_json::from_slice::<FoldStats>(&stats).map_err(|e| self.io(e))?;
        }
        Ok(fold)
    }

    /// Records an accepted gap in the store's audit trail, durably.
    pub(crate) fn record_accepted_gap(&self, gap: &AcceptedGap) -> Result<(), StoreError> {
        let at = gap.at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let value = serde_json::to_vec(gap).map_err(|e| self.io(e))?;
        self.db
            .insert(key(ACCEPTED_GAP, &[&at, &gap.node]), value)
            .map_err(|e| self.io(e))?;
        self.flush()
    }

    /// Makes everything written so far durable.
    fn flush(&self) -> Result<(), StoreError> {
        flush_shared(&self.flusher).map_err(|e| self.io(e))
    }

    /// Runs `hook` on every file a save makes durable (power-cut tests).
    #[cfg(test)]
    pub(crate) fn on_sync(&self, hook: crate::sink::checkpoint::SyncHook) {
        self.flusher
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .on_sync = Some(hook);
    }

    /// Every gap accepted in this store, oldest first.
    pub fn accepted_gaps(&self) -> Result<Vec<AcceptedGap>, StoreError> {
        self.db
            .scan_prefix(ACCEPTED_GAP)
            .map(|entry| {
                let (_, value) = entry.map_err(|e| self.io(e))?;
                serde_json::from_slice(&value).map_err(|e| self.io(e))
            })
            .collect()
    }

    /// Saves what changed in `fold` since the last save, with the stream sequence reached,
    /// atomically, and flushes.
    pub fn save(&self, fold: &mut Fold, checkpoint: u64) -> Result<(), StoreError> {
        self.prepare(fold, checkpoint)?.commit()
    }

    /// Takes what changed in `fold` since the last save, with the stream sequence reached, as
    /// one save (the changed items copied out of the fold); [`PendingSave::commit`] encodes and
    /// writes it (on another thread if need be, while the fold moves on). Commit pending saves
    /// in the order they were prepared.
    pub fn prepare(&self, fold: &mut Fold, checkpoint: u64) -> Result<PendingSave, StoreError> {
        let touched = fold.take_touched();
        let mut batch = sled::Batch::default();
        let items = self.save_items(&mut batch, fold, &touched.items)?;
        for node in &touched.nodes {
            let cursor = fold.nodes.get(node);
            let legacy = cursor
                .and_then(|c| c.chain(None))
                .cloned()
                .unwrap_or_default();
            let value = serde_json::to_vec(&legacy).map_err(|e| self.io(e))?;
            batch.insert(key(NODE, &[node]), value);
        }
        for (node, epochs) in &touched.epochs {
            let cursor = fold.nodes.get(node);
            for epoch in epochs {
                let key = key(EPOCH, &[node, epoch]);
                match cursor.and_then(|c| c.chain(Some(epoch))) {
                    Some(chain) => {
                        let value = serde_json::to_vec(chain).map_err(|e| self.io(e))?;
                        batch.insert(key, value);
                    }
                    None => batch.remove(key),
                }
            }
        }
        for id in &touched.volatile {
            batch.insert(key(VOLATILE, &[id]), &[]);
        }
        for (job, item) in &touched.held {
            let key = key(HELD, &[job, item]);
            match fold.held.get(&(job.clone(), item.clone())) {
                Some(held) => batch.insert(key, serde_json::to_vec(held).map_err(|e| self.io(e))?),
                None => batch.remove(key),
            }
        }
        let stats = serde_json::to_vec(&fold.stats).map_err(|e| self.io(e))?;
        batch.insert(STATS, stats);
        batch.insert(CHECKPOINT, &checkpoint.to_be_bytes());
        Ok(PendingSave {
            db: self.db.clone(),
            flusher: self.flusher.clone(),
            path: self.path.clone(),
            batch,
            items,
        })
    }

    /// The changes of the `touched` items, for new chunks from the returned number on; or,
    /// when the chunks would hold more than twice the live items (plus the slack), or items are
    /// still kept one key each, every live item, with the old chunks to delete (and the old
    /// keys deleted in `batch`). Adds where the chunks will be to `batch`.
    fn save_items(
        &self,
        batch: &mut sled::Batch,
        fold: &Fold,
        touched: &std::collections::BTreeSet<(String, String)>,
    ) -> Result<ItemWrite, StoreError> {
        let items = &fold.projection.items;
        let mut saved = self.saved()?;
        let chunks = saved.chunks;
        let live = items.len() as u64;
        let compact =
            saved.items_per_key || chunks.needs_compaction(touched.len() as u64, live, self.slack);
        let (changes, reserved, entries) = if compact {
            let encoded =
                item_log::encode(items.values().map(ChangeRef::Put)).map_err(|e| self.io(e))?;
            let count = encoded.len() as u64;
            (ItemChanges::Encoded(encoded), count, live)
        } else {
            let copied: Vec<Change> = touched
                .iter()
                .map(|key| match items.get(key) {
                    Some(stored) => Change::Put(Box::new(stored.clone())),
                    None => Change::Removed {
                        job_id: key.0.clone(),
                        item_id: key.1.clone(),
                    },
                })
                .collect();
            // Each chunk holds at least one change: one number per change is enough.
            let reserved = copied.len() as u64;
            let entries = chunks.entries + reserved;
            (ItemChanges::Copied(copied), reserved, entries)
        };
        let mut updated = Chunks {
            first: chunks.first,
            next: chunks.next + reserved,
            entries,
        };
        let mut delete = None;
        if compact {
            delete = Some(chunks.first..chunks.next);
            if saved.items_per_key {
                // Read once: no save writes such keys, and the one that moves them is this one.
                for key in self.db.scan_prefix(ITEM).keys() {
                    batch.remove(key.map_err(|e| self.io(e))?);
                }
            }
            updated.first = chunks.next;
        }
        batch.insert(
            CHUNKS,
            serde_json::to_vec(&updated).map_err(|e| self.io(e))?,
        );
        *saved = Saved {
            chunks: updated,
            items_per_key: false,
        };
        Ok(ItemWrite {
            changes,
            first_chunk: chunks.next,
            delete_chunks: delete,
        })
    }

    /// Forgets everything (before a rebuild from the start).
    pub fn clear(&self) -> Result<(), StoreError> {
        self.db.clear().map_err(|e| self.io(e))?;
        self.flush()?;
        *self.saved()? = Saved::default();
        Ok(())
    }
}

#[cfg(test)]
mod power_cut;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::domain::event::Event;

    fn put(fold: &mut Fold, job: &str, id: &str, last_event_id: &str) {
        let stored = crate::testing::stored_item(job, id, last_event_id);
        let key = (job.to_owned(), id.to_owned());
        fold.projection.items.insert(key.clone(), stored);
        fold.touched.items.insert(key);
    }

    fn remove(fold: &mut Fold, job: &str, id: &str) {
        let key = (job.to_owned(), id.to_owned());
        fold.projection.items.remove(&key);
        fold.touched.items.insert(key);
    }

    fn chunk_count(store: &ConsumerStore) -> usize {
        store.db.scan_prefix(CHUNK).count()
    }

    /// Items go in chunks of changes: puts, updates and removals load back after each save,
    /// also when two saves are prepared before either is written (as the consumer does), and
    /// a save that finds more than twice the live items in the chunks rewrites them and deletes
    /// the old chunks.
    #[test]
    fn items_load_back_from_chunks_through_updates_removals_and_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let store = ConsumerStore::open_with_slack(dir.path(), 2).unwrap();
        let mut fold = store.load().unwrap();
        for id in ["a", "b", "c"] {
            put(&mut fold, "job", id, "n:1");
        }
        let first = store.prepare(&mut fold, 1).unwrap();
        put(&mut fold, "job", "a", "n:2");
        let second = store.prepare(&mut fold, 2).unwrap();
        first.commit().unwrap();
        second.commit().unwrap();
        assert_eq!(chunk_count(&store), 2, "one chunk per save");
        assert_eq!(
            store.load().unwrap().projection.items,
            fold.projection.items
        );
        assert_eq!(store.checkpoint().unwrap(), 2);

        // 4 entries + 1 removal <= 2 × 2 live items + 2: appended.
        remove(&mut fold, "job", "b");
        store.save(&mut fold, 3).unwrap();
        assert_eq!(chunk_count(&store), 3);
        assert_eq!(
            store.load().unwrap().projection.items,
            fold.projection.items
        );

        // 5 entries + 1 removal > 2 × 1 live item + 2: compacted into one chunk.
        remove(&mut fold, "job", "c");
        store.save(&mut fold, 4).unwrap();
        assert_eq!(chunk_count(&store), 1, "old chunks deleted");
        let loaded = store.load().unwrap().projection.items;
        assert_eq!(loaded, fold.projection.items);
        assert_eq!(loaded.len(), 1);
        assert_eq!(
            loaded[&("job".to_owned(), "a".to_owned())].last_event_id,
            "n:2"
        );

        // Reopened, the next chunk follows the last one.
        drop(store);
        let store = ConsumerStore::open_with_slack(dir.path(), 2).unwrap();
        let mut fold = store.load().unwrap();
        put(&mut fold, "job", "d", "n:3");
        store.save(&mut fold, 5).unwrap();
        assert_eq!(chunk_count(&store), 2);
        assert_eq!(
            store.load().unwrap().projection.items,
            fold.projection.items
        );
    }

    /// The consumer prepares a save before the one before it is written: a save of several
    /// chunks is not overwritten by the next one's, and a compaction prepared meanwhile deletes
    /// the chunks of the saves written after it was prepared.
    #[test]
    fn saves_prepared_ahead_neither_overwrite_chunks_nor_leave_them_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = ConsumerStore::open_with_slack(dir.path(), 2).unwrap();
        let mut fold = store.load().unwrap();
        for n in 0..1_000 {
            put(&mut fold, "job", &format!("item-{n}"), "n:1");
        }
        let first = store.prepare(&mut fold, 1).unwrap();
        put(&mut fold, "job", "late", "n:2");
        let second = store.prepare(&mut fold, 2).unwrap();
        let after_second = fold.projection.items.clone();
        for n in 1..1_000 {
            remove(&mut fold, "job", &format!("item-{n}"));
        }
        let third = store.prepare(&mut fold, 3).unwrap();

        first.commit().unwrap();
        assert!(
            chunk_count(&store) > 1,
            "the first save takes several chunks"
        );
        second.commit().unwrap();
        assert_eq!(store.load().unwrap().projection.items, after_second);
        third.commit().unwrap();
        assert_eq!(
            chunk_count(&store),
            1,
            "the compaction left only its own chunk"
        );
        let loaded = store.load().unwrap().projection.items;
        assert_eq!(loaded, fold.projection.items);
        assert_eq!(loaded.len(), 2);
    }

    /// A store that kept items one key each (before the chunks) loads them, and its first
    /// save moves every item into chunks and deletes those keys.
    #[test]
    fn items_kept_one_key_each_move_into_chunks_on_the_first_save() {
        let dir = tempfile::tempdir().unwrap();
        let store = ConsumerStore::open(dir.path()).unwrap();
        let old = crate::testing::stored_item("job", "old", "n:1");
        let value = serde_json::to_vec(&old).unwrap();
        store.db.insert(key(ITEM, &["job", "old"]), value).unwrap();
        let mut fold = store.load().unwrap();
        assert_eq!(fold.projection.items.len(), 1);
        put(&mut fold, "job", "new", "n:2");
        let first = store.prepare(&mut fold, 2).unwrap();
        // Prepared before the first is written, the next save only appends its change.
        put(&mut fold, "job", "newer", "n:3");
        let second = store.prepare(&mut fold, 3).unwrap();
        first.commit().unwrap();
        second.commit().unwrap();
        assert_eq!(store.db.scan_prefix(ITEM).count(), 0);
        assert_eq!(
            chunk_count(&store),
            2,
            "the items moved once, then one change"
        );
        assert_eq!(
            store.load().unwrap().projection.items,
            fold.projection.items
        );
        assert_eq!(fold.projection.items.len(), 3);
    }

    fn removed(epoch: Option<&str>, seq: u64, prev_seq: Option<u64>) -> Event {
        crate::testing::removal(epoch, seq, prev_seq, chrono::Utc::now())
    }

    /// A store written before epochs (a node's cursor as `{"applied", "waiting"}`) loads as the
    /// chain without an epoch, and keeps that form; each epoch's chain is saved under its own
    /// key and loads back, waiting events included.
    #[test]
    fn a_store_from_before_epochs_loads_and_epochs_are_saved_per_chain() {
        let dir = tempfile::tempdir().unwrap();
        let store = ConsumerStore::open(dir.path()).unwrap();
        let old = br#"{"applied":7,"waiting":{}}"#;
        store.db.insert(key(NODE, &["n"]), &old[..]).unwrap();
        let mut fold = store.load().unwrap();
        assert_eq!(fold.nodes["n"].applied_in(None), 7);

        let (a, b) = ("00000000000000aa", "00000000000000bb");
        fold.offer(removed(Some(a), 8, Some(7)));
        fold.offer(removed(Some(b), 12, None));
        store.save(&mut fold, 3).unwrap();
        let raw = store.db.get(key(NODE, &["n"])).unwrap().unwrap();
        assert_eq!(
            &raw[..],
            &old[..],
            "the chain without an epoch keeps its form"
        );

        let loaded = store.load().unwrap();
        assert_eq!(loaded.nodes["n"], fold.nodes["n"]);
        assert_eq!(loaded.nodes["n"].applied_in(Some(a)), 8);
        assert_eq!(loaded.waiting(), 1, "b:12 waits for b:11");
        assert_eq!(loaded.nodes["n"].epochs().len(), 2);
    }
}
