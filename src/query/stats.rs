//! `dlq stats`: totals, by error type, average failure count, eligibility, oldest and newest
//! item, and the unpublished backlog, from the sink's per-job counters and indexes.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{ItemRef, QueryError};
use dlq::domain::model::{DeadLetteredItem, ErrorType};
use dlq::sink::{JobCounters, LocalSink, Sink};

/// An item and one of its times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemAt {
    /// The item.
    #[serde(flatten)]
    pub item: ItemRef,
    /// The time (first failure for the oldest, last failure for the newest).
    pub at: DateTime<Utc>,
}

/// The statistics of the items of one job, or of all.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// The job, when restricted to one.
    pub job_id: Option<String>,
    /// Items in the queue.
    pub total_items: u64,
    /// Items per job.
    pub jobs: BTreeMap<String, u64>,
    /// Items by the error type of their most recent failure.
    pub by_error_type: BTreeMap<String, u64>,
    /// Failed attempts over all items (sum of `failure_count`).
    pub total_failures: u64,
    /// `total_failures / total_items` (0 when empty).
    pub average_failure_count: f64,
    /// Items that may be retried automatically.
    pub reprocess_eligible: u64,
    /// Items that need a person first.
    pub manual_review_required: u64,
    /// The item that first failed longest ago (`at` = its `first_attempt`).
    pub oldest: Option<ItemAt>,
    /// The item that failed most recently (`at` = its `last_attempt`).
    pub newest: Option<ItemAt>,
    /// Events of the whole data directory not yet acknowledged by the bus.
    pub unpublished: u64,
    /// When the oldest unpublished event was written.
    pub oldest_unpublished: Option<DateTime<Utc>>,
}

/// Folds items into [`Stats`]; pure.
#[derive(Debug, Default)]
pub struct StatsAccumulator {
    total_items: u64,
    jobs: BTreeMap<String, u64>,
    by_error_type: BTreeMap<String, u64>,
    total_failures: u64,
    reprocess_eligible: u64,
    manual_review_required: u64,
    oldest: Option<ItemAt>,
    newest: Option<ItemAt>,
}

impl StatsAccumulator {
    /// Counts one item.
    pub fn add(&mut self, item: &DeadLetteredItem) {
        self.total_items += 1;
        *self.jobs.entry(item.job_id.clone()).or_default() += 1;
        *self
            .by_error_type
            .entry(item.last_error_type_name().to_owned())
            .or_default() += 1;
        self.total_failures += u64::from(item.failure_count);
        self.reprocess_eligible += u64::from(item.reprocess_eligible);
        self.manual_review_required += u64::from(item.manual_review_required);
        if self
            .oldest
            .as_ref()
            .is_none_or(|o| item.first_attempt < o.at)
        {
            self.oldest = Some(ItemAt {
                item: ItemRef::of(item),
                at: item.first_attempt,
            });
        }
        if self
            .newest
            .as_ref()
            .is_none_or(|n| item.last_attempt > n.at)
        {
            self.newest = Some(ItemAt {
                item: ItemRef::of(item),
                at: item.last_attempt,
            });
        }
    }

    /// The statistics so far, without backlog figures.
    pub fn finish(self, job_id: Option<String>) -> Stats {
        Stats {
            job_id,
            total_items: self.total_items,
            jobs: self.jobs,
            by_error_type: self.by_error_type,
            total_failures: self.total_failures,
            average_failure_count: average(self.total_failures, self.total_items),
            reprocess_eligible: self.reprocess_eligible,
            manual_review_required: self.manual_review_required,
            oldest: self.oldest,
            newest: self.newest,
            unpublished: 0,
            oldest_unpublished: None,
        }
    }
}

/// The statistics of the sink's items (of `job_id` only, when given). A named job without items
/// is [`QueryError::JobNotFound`].
///
/// Reads no item bodies beyond two per job: the totals come from the per-job counters the sink
/// keeps in step with its items, the oldest and newest from the age and recency indexes. So it
/// costs O(jobs), whatever the number of items. [`StatsAccumulator`] computes the same answer
/// from a full scan (the tests compare the two).
pub fn stats(sink: &LocalSink, job_id: Option<&str>) -> Result<Stats, QueryError> {
    let jobs = match job_id {
        Some(job) => {
            let counters = sink.counters(job)?;
            if counters.items == 0 {
                return Err(QueryError::JobNotFound(job.to_owned()));
            }
            vec![(job.to_owned(), counters)]
        }
        None => sink.jobs()?,
    };
    let mut total = JobCounters::default();
    let mut newest: Option<ItemAt> = None;
    let mut per_job = BTreeMap::new();
    for (job, counters) in &jobs {
        total.merge(counters);
        per_job.insert(job.clone(), counters.items);
        let at = |(at, item_id): (DateTime<Utc>, String)| ItemAt {
            item: ItemRef {
                job_id: job.clone(),
                item_id,
            },
            at,
        };
        // Jobs come in id order: a strictly newer item replaces, a tie keeps the first.
        if let Some(candidate) = sink.newest_of_job(job)?.map(at) {
            if newest.as_ref().is_none_or(|n| candidate.at > n.at) {
                newest = Some(candidate);
            }
        }
    }
    let oldest = oldest_item(sink, jobs.iter().map(|(job, _)| job.as_str()))?;
    let by_error_type = ErrorType::NAMES
        .iter()
        .zip(total.by_error_type)
        .filter(|(_, count)| *count > 0)
        .map(|(name, count)| ((*name).to_owned(), count))
        .collect();
    let backlog = sink.backlog()?;
    Ok(Stats {
        job_id: job_id.map(str::to_owned),
        total_items: total.items,
        jobs: per_job,
        by_error_type,
        total_failures: total.failures,
        average_failure_count: average(total.failures, total.items),
        reprocess_eligible: total.eligible,
        manual_review_required: total.manual_review,
        oldest,
        newest,
        unpublished: backlog.count,
        oldest_unpublished: backlog.oldest,
    })
}

/// The item that first failed longest ago among `jobs` (given in id order; a tie keeps the
/// first job's). The age index orders each job by millisecond, so only the jobs whose oldest
/// item falls in the earliest millisecond need their items read for the exact time: one or two
/// item reads, not one per job.
fn oldest_item<'a>(
    sink: &LocalSink,
    jobs: impl Iterator<Item = &'a str>,
) -> Result<Option<ItemAt>, QueryError> {
    let mut earliest: Option<i64> = None;
    let mut in_earliest: Vec<&str> = Vec::new();
    for job in jobs {
        let Some(ms) = sink.oldest_ms_of_job(job)? else {
            continue;
        };
        if earliest.is_none_or(|first| ms < first) {
            earliest = Some(ms);
            in_earliest.clear();
        }
        if earliest == Some(ms) {
            in_earliest.push(job);
        }
    }
    let mut oldest: Option<ItemAt> = None;
    for job in in_earliest {
        if let Some((at, item_id)) = sink.oldest_of_job(job)? {
            if oldest.as_ref().is_none_or(|o| at < o.at) {
                oldest = Some(ItemAt {
                    item: ItemRef {
                        job_id: job.to_owned(),
                        item_id,
                    },
                    at,
                });
            }
        }
    }
    Ok(oldest)
}

/// `failures / items` rounded to two decimals (0 when empty).
fn average(failures: u64, items: u64) -> f64 {
    if items == 0 {
        return 0.0;
    }
    ((failures as f64 / items as f64) * 100.0).round() / 100.0
}
