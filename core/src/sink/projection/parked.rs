//! The parked set: stored events the reconciler set aside so they do not block the rest.
//!
//! The reconciler publishes the unpublished events in sequence order. An event the bus refuses
//! for good (larger than the server's `max_payload`, say) or whose log entry cannot be read
//! would stop every pass at the same place, and every later event behind it. Such an event is
//! **parked**: it leaves the unpublished events of the publish state
//! ([`crate::sink::projection::publish_state`]) and gets a parked record `p/seq` (why, and when), so it is always
//! in exactly one of the two sets. The log entry stays (retention keeps its segment); nothing
//! is lost. `dlq status` lists the parked set and `dlq reconcile --retry-parked` moves it back.
//!
//! Like marking an event published, parking is made durable by the next checkpoint: after a
//! crash a parked event may be unpublished again, and the reconciler parks it once more.

use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::sink::log_fs::Reader;
use crate::sink::projection::keys;
use crate::sink::projection::publish_state::{PendingKey, PublishState};
use crate::sink::{show_key, SinkError};

/// One parked event, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parked {
    /// Its log sequence.
    pub seq: u64,
    /// Its event id, when it could be read.
    pub event_id: Option<String>,
    /// Why it was parked.
    pub reason: String,
    /// When it was parked.
    pub parked_at: DateTime<Utc>,
}

/// The value of a `p/seq` key.
#[derive(Debug, Serialize, Deserialize)]
pub(in crate::sink) struct ParkedRecord {
    event_id: Option<String>,
    reason: String,
    parked_at: DateTime<Utc>,
}

/// The parked set of one sink.
pub(in crate::sink) struct ParkedSet<'a> {
    pub(in crate::sink) tree: &'a sled::Tree,
    pub(in crate::sink) publish: &'a Mutex<PublishState>,
    pub(in crate::sink) log: &'a Reader,
}

impl ParkedSet<'_> {
    /// Parks the unpublished event `seq`; false when it was not unpublished.
    pub(in crate::sink) fn park(
        &self,
        seq: u64,
        event_id: Option<&str>,
        reason: &str,
    ) -> Result<bool, SinkError> {
        let record = ParkedRecord {
            event_id: event_id.map(str::to_owned),
            reason: reason.to_owned(),
            parked_at: Utc::now(),
        };
        let value = serde_json::to_vec(&record).map_err(|source| SinkError::Encode {
            what: format!("the parked marker of event {seq}"),
            source,
        })?;
        // The publish state first, then the index: the order every caller keeps.
        let mut state = self.state()?;
        let parked = state.park(seq, &self.log.index());
        let Some(pending) = parked else {
            return Ok(false);
        };
        let mut batch = sled::Batch::default();
        batch.insert(keys::parked(seq), value);
        if pending == PendingKey::Remove {
            batch.remove(keys::unpublished(seq));
        }
        self.tree.apply_batch(batch)?;
        Ok(true)
    }

    /// The parked events, in sequence order.
    pub(in crate::sink) fn list(&self) -> Result<Vec<Parked>, SinkError> {
        let mut parked = Vec::new();
        for entry in self.tree.scan_prefix(keys::PARKED) {
            let (key, value) = entry?;
            let seq = keys::seq_of(&key);
            let record = serde_json::from_slice::<ParkedRecord>(&value);
            let (Some(seq), Ok(record)) = (seq, record) else {
                return Err(SinkError::Corrupt {
                    key: show_key(&key),
                    reason: "unreadable parked marker".into(),
                    source: None,
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

    /// Moves every parked event back among the unpublished; returns how many.
    pub(in crate::sink) fn unpark_all(&self) -> Result<u64, SinkError> {
        let mut state = self.state()?;
        let mut batch = sled::Batch::default();
        let mut moved = 0;
        for entry in self.tree.scan_prefix(keys::PARKED) {
            let (key, _) = entry?;
            let Some(seq) = keys::seq_of(&key) else {
                continue;
            };
            batch.remove(key);
            if state.unpark(seq) == PendingKey::Insert {
                batch.insert(keys::unpublished(seq), Vec::new());
            }
            moved += 1;
        }
        self.tree.apply_batch(batch)?;
        Ok(moved)
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, PublishState>, SinkError> {
        self.publish
            .lock()
            .map_err(|_| SinkError::Unavailable("the publish state is unavailable"))
    }
}
