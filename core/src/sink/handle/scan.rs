//! Streaming read scans of the items, for operator queries (`dlq list`, `stats`, `analyze`,
//! `export`) and the admin API.
//!
//! Every scan is an iterator over sled's own iterators: it holds one item (or one index key per
//! job) at a time, never the whole queue. A job-scoped scan is one prefix seek. A record that
//! does not decode ends the scan with [`SinkError::Corrupt`] naming its key.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use chrono::{DateTime, Utc};

use crate::domain::projection::StoredItem;
use crate::sink::projection::index_runs::{self, RunRange};
use crate::sink::projection::keys;
use crate::sink::{show_key, LocalSink, SinkError};

/// An entry of the recency index: when the item last failed, its job and its id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Recent {
    /// Newest first.
    pub last_attempt: Reverse<DateTime<Utc>>,
    /// Then by job id.
    pub job_id: String,
    /// Then by item id.
    pub item_id: String,
}

/// One job's walk of the recency index.
struct JobWalk {
    prefix_len: usize,
    job_id: String,
    iter: RunRange,
}

impl JobWalk {
    fn next(&mut self) -> Option<Result<Recent, SinkError>> {
        let entry = self.iter.next()?;
        Some(entry.and_then(|key| {
            let (time, item_id) =
                keys::time_item_of_recency(&key, self.prefix_len).ok_or_else(|| {
                    SinkError::Corrupt {
                        key: show_key(&key),
                        reason: "malformed recency index key".into(),
                        source: None,
                    }
                })?;
            Ok(Recent {
                last_attempt: Reverse(time),
                job_id: self.job_id.clone(),
                item_id,
            })
        }))
    }
}

/// The merge of every job's recency walk: items most recently failed first, ties by job then
/// item id. Holds one pending entry per job.
pub struct NewestFirst {
    walks: Vec<JobWalk>,
    heads: BinaryHeap<Reverse<(Recent, usize)>>,
    pending_error: Option<SinkError>,
    started: bool,
}

impl NewestFirst {
    fn pull(&mut self, index: usize) {
        let Some(walk) = self.walks.get_mut(index) else {
            return;
        };
        match walk.next() {
            Some(Ok(recent)) => self.heads.push(Reverse((recent, index))),
            Some(Err(err)) => self.pending_error = Some(err),
            None => {}
        }
    }
}

impl Iterator for NewestFirst {
    type Item = Result<Recent, SinkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            for index in 0..self.walks.len() {
                self.pull(index);
            }
        }
        if let Some(err) = self.pending_error.take() {
            return Some(Err(err));
        }
        let Reverse((recent, index)) = self.heads.pop()?;
        self.pull(index);
        Some(Ok(recent))
    }
}

impl LocalSink {
    /// Every item, or only those of `job_id`, in key order (job id, then item id).
    pub fn scan_items<'a>(
        &'a self,
        job_id: Option<&'a str>,
    ) -> Box<dyn Iterator<Item = Result<StoredItem, SinkError>> + 'a> {
        match job_id {
            Some(job) => Box::new(self.job_items(job)),
            None => Box::new(self.items()),
        }
    }

    /// The recency index of every job (or of `job_id`): items most recently failed first, ties
    /// by job then item id, starting at items that last failed at `from` (inclusive) or earlier.
    pub fn newest_first(
        &self,
        job_id: Option<&str>,
        from: Option<DateTime<Utc>>,
    ) -> Result<NewestFirst, SinkError> {
        let jobs: Vec<String> = match job_id {
            Some(job) => vec![job.to_owned()],
            None => self.jobs()?.into_iter().map(|(job, _)| job).collect(),
        };
        let walks = jobs
            .into_iter()
            .map(|job| {
                let start = match from {
                    Some(time) => keys::recency_from(&job, time),
                    None => keys::recency_of_job(&job),
                };
                JobWalk {
                    prefix_len: keys::recency_of_job(&job).len(),
                    iter: index_runs::range(
                        self.tree(),
                        &start,
                        Some(&keys::prefix_end(&keys::recency_of_job(&job))),
                    ),
                    job_id: job,
                }
            })
            .collect();
        Ok(NewestFirst {
            walks,
            heads: BinaryHeap::new(),
            pending_error: None,
            started: false,
        })
    }

    /// The job's age index in order, as `(first_attempt_ms, item_id)`: oldest first.
    fn ages_of_job(&self, job_id: &str) -> impl Iterator<Item = Result<(i64, String), SinkError>> {
        let prefix = keys::ages_of_job(job_id);
        let end = keys::prefix_end(&prefix);
        index_runs::range(self.tree(), &prefix, Some(&end)).map(move |key| {
            let key = key?;
            keys::ms_item_of_age(&key, prefix.len()).ok_or_else(|| SinkError::Corrupt {
                key: show_key(&key),
                reason: "malformed age index key".into(),
                source: None,
            })
        })
    }

    /// The millisecond in which the job's oldest item first failed, from the age index alone
    /// (no item is read): an item of a job whose millisecond is later cannot be older.
    pub fn oldest_ms_of_job(&self, job_id: &str) -> Result<Option<i64>, SinkError> {
        self.ages_of_job(job_id)
            .next()
            .transpose()
            .map(|first| first.map(|(ms, _)| ms))
    }

    /// The job's item that first failed longest ago, as `(first_attempt, item_id)`; ties go to
    /// the smaller item id. Reads the age index's first millisecond only.
    pub fn oldest_of_job(
        &self,
        job_id: &str,
    ) -> Result<Option<(DateTime<Utc>, String)>, SinkError> {
        let mut bucket: Option<i64> = None;
        let mut best: Option<(DateTime<Utc>, String)> = None;
        for entry in self.ages_of_job(job_id) {
            let (ms, item_id) = entry?;
            if bucket.is_some_and(|first| first != ms) {
                break;
            }
            bucket = Some(ms);
            if let Some(stored) = self.item(job_id, &item_id)? {
                let candidate = (stored.item.first_attempt, item_id);
                if best.as_ref().is_none_or(|b| candidate < *b) {
                    best = Some(candidate);
                }
            }
        }
        Ok(best)
    }

    /// The job's most recently failed item, as `(last_attempt, item_id)`; ties go to the
    /// smaller item id.
    pub fn newest_of_job(
        &self,
        job_id: &str,
    ) -> Result<Option<(DateTime<Utc>, String)>, SinkError> {
        match self.newest_first(Some(job_id), None)?.next() {
            Some(recent) => {
                let recent = recent?;
                Ok(Some((recent.last_attempt.0, recent.item_id)))
            }
            None => Ok(None),
        }
    }

    /// The jobs that hold an item with id `item_id`, in job order (one entry per job): a point
    /// read per job.
    pub fn jobs_with_item(&self, item_id: &str) -> Result<Vec<String>, SinkError> {
        let mut jobs = Vec::new();
        for (job, _) in self.jobs()? {
            if self.item(&job, item_id)?.is_some() {
                jobs.push(job);
            }
        }
        Ok(jobs)
    }
}
