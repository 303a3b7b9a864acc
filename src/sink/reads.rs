//! Reads of the sled tree: current state for [`decide`](crate::decide::decide), and the log.
//!
//! Reads need no lock: sled gives every reader a consistent view of each key, and the writer
//! thread is the only one that changes projections.

use chrono::{DateTime, Utc};

use super::{keys, show_key, SinkError};
use crate::event::Event;
use crate::projection::{StateView, StoredItem};

/// Current state as stored in one sled tree.
pub(crate) struct TreeView<'a> {
    pub(crate) tree: &'a sled::Tree,
}

impl TreeView<'_> {
    /// Decodes a stored item, or says which key is corrupt.
    pub(crate) fn decode_item(key: &[u8], value: &[u8]) -> Result<StoredItem, SinkError> {
        serde_json::from_slice(value).map_err(|err| SinkError::Corrupt {
            key: show_key(key),
            reason: err.to_string(),
        })
    }

    /// The event stored at log sequence `seq`.
    pub(crate) fn event(&self, seq: u64) -> Result<Option<Event>, SinkError> {
        let key = keys::log(seq);
        match self.tree.get(&key)? {
            None => Ok(None),
            Some(bytes) => Event::from_json(&bytes)
                .map(Some)
                .map_err(|err| SinkError::Corrupt {
                    key: show_key(&key),
                    reason: err.to_string(),
                }),
        }
    }
}

impl StateView for TreeView<'_> {
    type Error = SinkError;

    fn item(&self, job_id: &str, item_id: &str) -> Result<Option<StoredItem>, SinkError> {
        let key = keys::item(job_id, item_id);
        match self.tree.get(&key)? {
            None => Ok(None),
            Some(value) => Self::decode_item(&key, &value).map(Some),
        }
    }

    fn job_len(&self, job_id: &str) -> Result<u64, SinkError> {
        Ok(self
            .tree
            .get(keys::job_count(job_id))?
            .and_then(|v| keys::decode_u64(&v))
            .unwrap_or(0))
    }

    fn oldest_in_job(&self, job_id: &str, limit: usize) -> Result<Vec<String>, SinkError> {
        let prefix = keys::fifo_of_job(job_id);
        let mut ids = Vec::new();
        for entry in self.tree.scan_prefix(&prefix).take(limit) {
            let (key, _) = entry?;
            let id = keys::item_of_fifo(&key, prefix.len()).ok_or_else(|| SinkError::Corrupt {
                key: show_key(&key),
                reason: "malformed FIFO index key".into(),
            })?;
            ids.push(id);
        }
        Ok(ids)
    }

    fn first_failed_before(
        &self,
        cutoff: DateTime<Utc>,
        job_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, String)>, SinkError> {
        let range = keys::BY_AGE.to_vec()..keys::age_bound(cutoff.timestamp_millis());
        let mut hits = Vec::new();
        for entry in self.tree.range(range) {
            if hits.len() >= limit {
                break;
            }
            let (key, _) = entry?;
            let (job, item) = keys::job_item_of_age(&key).ok_or_else(|| SinkError::Corrupt {
                key: show_key(&key),
                reason: "malformed age index key".into(),
            })?;
            if job_id.is_none_or(|wanted| wanted == job) {
                hits.push((job, item));
            }
        }
        Ok(hits)
    }
}
