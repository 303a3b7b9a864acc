//! Point reads of the sled projection: items and job counts. The scans that decisions
//! need live in [`crate::sink::projection::staged`], where they see a group's staged changes too.
//!
//! Reads need no lock: sled gives every reader a consistent view of each key, and the writer
//! thread is the only one that changes projections. An item's value points at its events in
//! the log ([`ItemRecord`]): reading it reads them and folds them.

use crate::domain::event::Event;
use crate::domain::projection::{apply_owned, Change, StoredItem};
use crate::error_class::Cause;
use crate::sink::log::LogError;
use crate::sink::log_fs::Reader;
use crate::sink::projection::counters::JobCounters;
use crate::sink::projection::index_runs;
use crate::sink::projection::item_record::ItemRecord;
use crate::sink::projection::keys;
use crate::sink::{show_key, SinkError};

/// Current state as stored in one sled tree and the log its items point into.
pub(crate) struct TreeView<'a> {
    pub(crate) tree: &'a sled::Tree,
    pub(crate) log: &'a Reader,
}

impl TreeView<'_> {
    /// Reads a stored item and its record, or says which key is corrupt.
    pub(crate) fn load_item(
        &self,
        key: &[u8],
        value: &[u8],
    ) -> Result<(StoredItem, ItemRecord), SinkError> {
        let corrupt = |(reason, source): Unfolded| SinkError::Corrupt {
            key: show_key(key),
            reason,
            source,
        };
        let record = ItemRecord::decode(value)
            .map_err(|err| corrupt((err.to_string(), Some(err.into()))))?;
        let stored = match &record {
            ItemRecord::Inline(json) => serde_json::from_slice(json)
                .map_err(|err| corrupt((err.to_string(), Some(err.into()))))?,
            ItemRecord::Events(seqs) => fold_events(self.log, seqs).map_err(corrupt)?,
        };
        Ok((stored, record))
    }

    /// The current state of one item.
    pub(crate) fn item(
        &self,
        job_id: &str,
        item_id: &str,
    ) -> Result<Option<StoredItem>, SinkError> {
        Ok(self.entry(job_id, item_id)?.map(|(stored, _)| stored))
    }

    /// The current state of one item and its record.
    pub(crate) fn entry(
        &self,
        job_id: &str,
        item_id: &str,
    ) -> Result<Option<(StoredItem, ItemRecord)>, SinkError> {
        let key = keys::item(job_id, item_id);
        match self.tree.get(&key)? {
            None => Ok(None),
            Some(value) => self.load_live(&key, &value),
        }
    }

    /// [`load_item`](Self::load_item) for a value read a moment ago: an item removed since
    /// (whose segments a checkpoint may have deleted meanwhile) is `None`, not an error.
    pub(crate) fn load_live(
        &self,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<(StoredItem, ItemRecord)>, SinkError> {
        match self.load_item(key, value) {
            Ok(entry) => Ok(Some(entry)),
            Err(err) => match self.tree.get(key)? {
                None => Ok(None),
                Some(now) if now.as_ref() != value => self.load_item(key, &now).map(Some),
                Some(_) => Err(err),
            },
        }
    }

    /// The lowest `created_seq` above `floor` of any item; `None` when there is none.
    pub(crate) fn oldest_created_seq_above(&self, floor: u64) -> Result<Option<u64>, SinkError> {
        let mut oldest: Option<u64> = None;
        for job in self.job_ids() {
            let job = job?;
            let prefix = keys::fifo_of_job(&job);
            let from = keys::fifo(&job, floor.saturating_add(1), "");
            let end = keys::prefix_end(&prefix);
            let Some(key) = index_runs::range(self.tree, &from, Some(&end)).next() else {
                continue;
            };
            let key = key?;
            let seq = key
                .get(prefix.len()..prefix.len() + 8)
                .and_then(keys::decode_u64)
                .ok_or_else(|| SinkError::Corrupt {
                    key: show_key(&key),
                    reason: "malformed FIFO index key".into(),
                    source: None,
                })?;
            oldest = Some(oldest.map_or(seq, |o| o.min(seq)));
        }
        Ok(oldest)
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
                source: None,
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
                source: None,
            };
            let job = keys::job_of_count(&key).ok_or_else(|| corrupt("malformed job key"))?;
            let counters =
                JobCounters::decode(&value).ok_or_else(|| corrupt("malformed job counters"))?;
            Ok((job, counters))
        })
    }

    /// Every job holding at least one item, in job-id order, by its counter key alone (an
    /// older layout's counter values may not decode).
    pub(crate) fn job_ids(&self) -> impl Iterator<Item = Result<String, SinkError>> + '_ {
        self.tree.scan_prefix(keys::JOB_COUNT).map(|entry| {
            let (key, _) = entry?;
            keys::job_of_count(&key).ok_or_else(|| SinkError::Corrupt {
                key: show_key(&key),
                reason: "malformed job key".into(),
                source: None,
            })
        })
    }

    /// Every job holding at least one item, in job-id order.
    pub(crate) fn jobs(&self) -> impl Iterator<Item = Result<String, SinkError>> + '_ {
        self.jobs_with_counters()
            .map(|entry| entry.map(|(job, _)| job))
    }
}

/// Why an item record cannot be read: the text, and the error behind it if there is one.
type Unfolded = (String, Option<Cause>);

/// The item that the logged events `seqs` make, folded from nothing; or why it cannot be read.
fn fold_events(log: &Reader, seqs: &[u64]) -> Result<StoredItem, Unfolded> {
    let mut item: Option<StoredItem> = None;
    let reads = log.read_many(seqs);
    let unreadable = |seq, err: LogError| {
        (
            format!("its event {seq} cannot be read from the log: {err}"),
            Some(err.into()),
        )
    };
    if reads.len() != seqs.len() {
        if let Some((seq, Err(err))) = reads.into_iter().next() {
            return Err(unreadable(seq, err));
        }
        return Err(("its events cannot be read from the log".to_owned(), None));
    }
    for (seq, read) in reads {
        let bytes = read
            .map_err(|err| unreadable(seq, err))?
            .ok_or_else(|| (format!("its event {seq} is not in the log"), None))?;
        let event = Event::from_json(&bytes).map_err(|err| {
            (
                format!("its event {seq} in the log does not decode: {err}"),
                Some(err.into()),
            )
        })?;
        match apply_owned(item.as_ref(), event) {
            Change::Put { item: next, .. } => item = Some(*next),
            Change::Delete { .. } | Change::Unchanged => {
                return Err((
                    format!("its event {seq} does not change the item as the record says"),
                    None,
                ))
            }
        }
    }
    item.ok_or_else(|| ("the record names no event".to_owned(), None))
}
