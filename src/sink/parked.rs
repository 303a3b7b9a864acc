//! The parked set: stored events the reconciler set aside so they do not block the rest.
//!
//! The reconciler publishes the unpublished set in sequence order. An event the bus refuses
//! for good (larger than the server's `max_payload`, say) or whose log entry cannot be read
//! would stop every pass at the same place, and every later event behind it. Such an event is
//! **parked**: its unpublished marker `u/seq` is replaced by a parked marker `p/seq` in one sled
//! transaction, so it is always in exactly one of the two sets. The log entry stays; nothing is
//! lost. `dlq status` lists the parked set and `dlq reconcile --retry-parked` moves it back.
//!
//! Like marking an event published, parking is not journaled: after a crash a parked event may
//! be unpublished again, and the reconciler parks it once more.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError};

use super::{keys, show_key, SinkError};

/// One parked event, as `dlq status` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    /// The event's log sequence.
    pub seq: u64,
    /// Its id, when its log entry could be read.
    pub event_id: Option<String>,
    /// Why it was parked (the bus's refusal or the decode error).
    pub reason: String,
    /// When it was parked.
    pub parked_at: DateTime<Utc>,
}

/// The value under `p/seq`.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ParkedRecord {
    event_id: Option<String>,
    reason: String,
    parked_at: DateTime<Utc>,
    /// The unpublished marker's value (the event's timestamp), restored on retry.
    marker: Vec<u8>,
}

/// The shared state parking changes: the tree, the unpublished count, the dirty flag.
pub(super) struct ParkedSet<'a> {
    pub(super) tree: &'a sled::Tree,
    pub(super) unpublished: &'a AtomicU64,
    pub(super) marks_dirty: &'a AtomicBool,
}

fn sled_error(err: TransactionError<SinkError>) -> SinkError {
    match err {
        TransactionError::Abort(err) => err,
        TransactionError::Storage(err) => err.into(),
    }
}

impl ParkedSet<'_> {
    /// Moves `seq` from the unpublished set to the parked set; false when it was not
    /// unpublished (published meanwhile, or parked already).
    pub(super) fn park(
        &self,
        seq: u64,
        event_id: Option<&str>,
        reason: &str,
    ) -> Result<bool, SinkError> {
        let moved = self
            .tree
            .transaction(|tx| {
                let Some(marker) = tx.remove(keys::unpublished(seq))? else {
                    return Ok(false);
                };
                let record = ParkedRecord {
                    event_id: event_id.map(str::to_owned),
                    reason: reason.to_owned(),
                    parked_at: Utc::now(),
                    marker: marker.to_vec(),
                };
                let value = serde_json::to_vec(&record).map_err(|err| {
                    ConflictableTransactionError::Abort(SinkError::Io(err.to_string()))
                })?;
                tx.insert(keys::parked(seq), value)?;
                Ok(true)
            })
            .map_err(sled_error)?;
        if moved {
            self.unpublished.fetch_sub(1, Ordering::SeqCst);
            self.marks_dirty.store(true, Ordering::SeqCst);
        }
        Ok(moved)
    }

    /// Every parked event, in sequence order.
    pub(super) fn list(&self) -> Result<Vec<Parked>, SinkError> {
        let mut parked = Vec::new();
        for entry in self.tree.scan_prefix(keys::PARKED) {
            let (key, value) = entry?;
            let seq = keys::seq_of(&key);
            let record = serde_json::from_slice::<ParkedRecord>(&value);
            let (Some(seq), Ok(record)) = (seq, record) else {
                return Err(SinkError::Corrupt {
                    key: show_key(&key),
                    reason: "unreadable parked marker".into(),
                });
            };
            parked.push(Parked {
                seq,
                event_id: record.event_id,
                reason: record.reason,
                parked_at: record.parked_at,
            });
        }
        Ok(parked)
    }

    /// Moves every parked event back into the unpublished set; returns how many.
    pub(super) fn unpark_all(&self) -> Result<u64, SinkError> {
        let mut moved = 0;
        for entry in self.tree.scan_prefix(keys::PARKED) {
            let (key, value) = entry?;
            let Some(seq) = keys::seq_of(&key) else {
                continue;
            };
            // A marker whose record cannot be read still goes back (with no timestamp).
            let marker = serde_json::from_slice::<ParkedRecord>(&value)
                .map(|record| record.marker)
                .unwrap_or_default();
            let back = self
                .tree
                .transaction(|tx| {
                    if tx.remove(keys::parked(seq))?.is_none() {
                        return Ok(false);
                    }
                    tx.insert(keys::unpublished(seq), marker.clone())?;
                    Ok(true)
                })
                .map_err(sled_error)?;
            if back {
                moved += 1;
                self.unpublished.fetch_add(1, Ordering::SeqCst);
                self.marks_dirty.store(true, Ordering::SeqCst);
            }
        }
        Ok(moved)
    }
}
