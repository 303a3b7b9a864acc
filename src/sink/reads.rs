//! Point reads of the sled projection: items and job counts. The scans that decisions
//! need live in [`super::staged`], where they see a group's staged changes too.
//!
//! Reads need no lock: sled gives every reader a consistent view of each key, and the writer
//! thread is the only one that changes projections.

use super::counters::JobCounters;
use super::{keys, show_key, SinkError};
use crate::domain::projection::StoredItem;

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

    /// The current state of one item.
    pub(crate) fn item(
        &self,
        job_id: &str,
        item_id: &str,
    ) -> Result<Option<StoredItem>, SinkError> {
        let key = keys::item(job_id, item_id);
        match self.tree.get(&key)? {
            None => Ok(None),
            Some(value) => Self::decode_item(&key, &value).map(Some),
        }
    }

    /// How many items the job holds.
    pub(crate) fn job_len(&self, job_id: &str) -> Result<u64, SinkError> {
        Ok(self.counters(job_id)?.items)
    }

    /// The job's running counters (all zero for a job without items).
    pub(crate) fn counters(&self, job_id: &str) -> Result<JobCounters, SinkError> {
        let key = keys::job_count(job_id);
        match self.tree.get(&key)? {
            None => Ok(JobCounters::default()),
            Some(bytes) => JobCounters::decode(&bytes).ok_or_else(|| SinkError::Corrupt {
                key: show_key(&key),
                reason: "malformed job counters".into(),
            }),
        }
    }

    /// Every job holding at least one item, in job-id order, with its counters.
    pub(crate) fn jobs_with_counters(
        &self,
    ) -> impl Iterator<Item = Result<(String, JobCounters), SinkError>> + '_ {
        self.tree.scan_prefix(keys::JOB_COUNT).map(|entry| {
            let (key, value) = entry?;
            let corrupt = |reason: &str| SinkError::Corrupt {
                key: show_key(&key),
                reason: reason.into(),
            };
            let job = keys::job_of_count(&key).ok_or_else(|| corrupt("malformed job key"))?;
            let counters =
                JobCounters::decode(&value).ok_or_else(|| corrupt("malformed job counters"))?;
            Ok((job, counters))
        })
    }

    /// Every job holding at least one item, in job-id order.
    pub(crate) fn jobs(&self) -> impl Iterator<Item = Result<String, SinkError>> + '_ {
        self.jobs_with_counters()
            .map(|entry| entry.map(|(job, _)| job))
    }
}
