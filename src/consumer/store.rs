//! A durable consumer's own sled store: its projection, per-node cursors and checkpoint.
//!
//! After each fetched batch the consumer saves what the batch changed (the fold's
//! [`Touched`](super::fold::Touched) record) together with the stream sequence it reached, as one
//! sled batch, and flushes. The batch is encoded on the consumer's task and written on a blocking
//! thread while the next batch is fetched and folded ([`ConsumerStore::prepare`],
//! [`PendingSave::commit`]); saves are written one at a time, in order, so the stored state is
//! always the state at its stored checkpoint. The store is a cache of the stream: deleting it
//! only costs a rebuild.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::fold::{AcceptedGap, Chain, Fold, FoldStats};
use crate::domain::projection::StoredItem;

const ITEM: &[u8] = b"i";
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

/// The store could not be used.
#[derive(Debug, Error)]
pub enum StoreError {
    /// sled failed or the directory is unusable.
    #[error("consumer store {path}: {reason} (it can be deleted: `dlq consume --from-start` rebuilds it)")]
    Io {
        /// The store directory.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// One save, encoded, not yet written: see [`ConsumerStore::prepare`].
#[must_use = "a prepared save is written only by commit"]
pub struct PendingSave {
    db: sled::Db,
    path: PathBuf,
    batch: sled::Batch,
}

impl PendingSave {
    /// Applies the batch atomically and flushes (blocking).
    pub fn commit(self) -> Result<(), StoreError> {
        let io = |err: sled::Error| StoreError::Io {
            path: self.path.clone(),
            reason: err.to_string(),
        };
        self.db.apply_batch(self.batch).map_err(io)?;
        self.db.flush().map_err(io)?;
        Ok(())
    }
}

/// A consumer's persisted state.
pub struct ConsumerStore {
    path: PathBuf,
    db: sled::Db,
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
        let db = sled::Config::new()
            .path(path)
            .flush_every_ms(None)
            .open()
            .map_err(|err| StoreError::Io {
                path: path.to_owned(),
                reason: err.to_string(),
            })?;
        Ok(ConsumerStore {
            path: path.to_owned(),
            db,
        })
    }

    fn io(&self, reason: impl ToString) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            reason: reason.to_string(),
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
        for entry in self.db.scan_prefix(ITEM) {
            let (_, value) = entry.map_err(|e| self.io(e))?;
            let stored: StoredItem = serde_json::from_slice(&value).map_err(|e| self.io(e))?;
            let key = (stored.item.job_id.clone(), stored.item.item_id.clone());
            fold.projection.items.insert(key, stored);
        }
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
                return Err(self.io(format!(
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
        if let Some(stats) = self.db.get(STATS).map_err(|e| self.io(e))? {
            fold.stats = serde_json::from_slice::<FoldStats>(&stats).map_err(|e| self.io(e))?;
        }
        Ok(fold)
    }

    /// Records an accepted gap in the store's audit trail, durably.
    pub fn record_accepted_gap(&self, gap: &AcceptedGap) -> Result<(), StoreError> {
        let at = gap.at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let value = serde_json::to_vec(gap).map_err(|e| self.io(e))?;
        self.db
            .insert(key(ACCEPTED_GAP, &[&at, &gap.node]), value)
            .map_err(|e| self.io(e))?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(())
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

    /// Encodes what changed in `fold` since the last save, with the stream sequence reached, as
    /// one batch; [`PendingSave::commit`] writes it (on another thread if need be, while the
    /// fold moves on). Commit pending saves in the order they were prepared.
    pub fn prepare(&self, fold: &mut Fold, checkpoint: u64) -> Result<PendingSave, StoreError> {
        let touched = fold.take_touched();
        let mut batch = sled::Batch::default();
        for (job, item) in &touched.items {
            let key = key(ITEM, &[job, item]);
            match fold.projection.items.get(&(job.clone(), item.clone())) {
                Some(stored) => {
                    let value = serde_json::to_vec(stored).map_err(|e| self.io(e))?;
                    batch.insert(key, value);
                }
                None => batch.remove(key),
            }
        }
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
        let stats = serde_json::to_vec(&fold.stats).map_err(|e| self.io(e))?;
        batch.insert(STATS, stats);
        batch.insert(CHECKPOINT, &checkpoint.to_be_bytes());
        Ok(PendingSave {
            db: self.db.clone(),
            path: self.path.clone(),
            batch,
        })
    }

    /// Forgets everything (before a rebuild from the start).
    pub fn clear(&self) -> Result<(), StoreError> {
        self.db.clear().map_err(|e| self.io(e))?;
        self.db.flush().map_err(|e| self.io(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::domain::event::Event;

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
