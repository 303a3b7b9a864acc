//! `dlq retry`: re-runs a job's dead-lettered items with the job's own agent template.
//!
//! Items are selected by streaming the job's items from the sink (only their ids are kept):
//! `reprocess_eligible` ones unless `force`, and those matching the CEL `filter`. Each selected
//! item is attempted up to `max_retries` times with the workflow's backoff. Success removes it
//! from the DLQ with a `resolved` removal event naming the operator who asked (`removed_by`);
//! failure appends the new attempts to its
//! history (so `failure_count` grows). At most `parallel` items run at once, and with `rate`
//! at most that many start per second.
//!
//! Interruption: when `stop` fires, no new item starts and in-flight items finish their
//! current attempt and are recorded; `kill` kills in-flight agents (their items stay as they
//! were). Running retry again only sees what is still in the DLQ, so a resolved item is never
//! run again. Within one process (e.g. two API requests to `dlq serve`) an item being retried
//! is claimed, so two concurrent retries never run the same item; two processes cannot open
//! the same data directory at all.
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::context::{JobContext, RunOptions};
use super::error::RunError;
use super::job_store::{JobRecord, JobStore};
use super::progress::{Progress, ProgressMode};
use super::workflow::Workflow;
use crate::query::cel::CelFilter;
use dlq::bus::Bus;
use dlq::domain::event::RemovedBy;
use dlq::emitter::Emitter;
use dlq::sink::LocalSink;

mod item;

use item::{retry_item, ItemEnd};

/// How many item ids a dry run lists.
const DRY_RUN_LISTED: usize = 1000;

/// What to retry and how.
#[derive(Debug, Clone)]
pub(crate) struct RetryOptions {
    /// Items retried at once.
    pub parallel: usize,
    /// Attempts per item.
    pub max_retries: u32,
    /// Only items matching this filter.
    pub filter: Option<CelFilter>,
    /// Retry items that are not `reprocess_eligible` too.
    pub force: bool,
    /// At most this many items start per second.
    pub rate: Option<f64>,
    /// Only say what would be retried.
    pub dry_run: bool,
}

impl Default for RetryOptions {
    fn default() -> Self {
        RetryOptions {
            parallel: 10,
            max_retries: 3,
            filter: None,
            force: false,
            rate: None,
            dry_run: false,
        }
    }
}

/// What a retry did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct RetryReport {
    /// The job.
    pub job_id: String,
    /// Nothing ran.
    pub dry_run: bool,
    /// Items selected for retry.
    pub selected: u64,
    /// Items that succeeded and left the DLQ.
    pub resolved: u64,
    /// Items that failed every attempt again (history appended).
    pub failed_again: u64,
    /// Items left out because they are not `reprocess_eligible` (use --force).
    pub skipped_ineligible: u64,
    /// Items left out by the filter.
    pub skipped_filtered: u64,
    /// Items another retry of this process was already running.
    pub skipped_busy: u64,
    /// Items whose result could not be written (they stay in the DLQ unchanged).
    pub not_recorded: u64,
    /// Items not started because the retry was interrupted.
    pub not_started: u64,
    /// The selected item ids (dry run only, at most 1,000).
    pub items: Vec<String>,
}

/// One retry to run: what to retry ([`RetryOptions`], the job, its template) and the handles it
/// runs with.
pub(crate) struct RetryJob<'a, B: Bus> {
    /// The emitter whose sink holds the items (resolved items leave through it).
    pub emitter: Emitter<LocalSink, B>,
    /// How agents run (data directory, agent command, topic).
    pub run: RunOptions,
    /// The job whose items to retry.
    pub job_id: &'a str,
    /// A workflow file whose agent template replaces the job's own (required when the job was
    /// not run by this data directory, e.g. imported).
    pub workflow: Option<&'a Path>,
    /// What to retry and how.
    pub options: RetryOptions,
    /// Fired: no new item starts; in-flight items finish their attempt and are recorded.
    pub stop: CancellationToken,
    /// Fired: in-flight agents are killed (their items stay as they were).
    pub kill: CancellationToken,
    /// How progress is shown.
    pub mode: ProgressMode,
    /// The operator who asked (API token name or `local`, and the reason), named on each
    /// resolved item's removal event.
    pub by: RemovedBy,
}

/// Retries the dead-lettered items of `job.job_id` (see the module doc).
pub(crate) async fn retry_job<B: Bus>(job: RetryJob<'_, B>) -> Result<RetryReport, RunError> {
    let RetryJob {
        emitter,
        run,
        job_id,
        workflow,
        options,
        stop,
        kill,
        mode,
        by,
    } = job;
    let (store, record) = match open_job(&run.data_dir, job_id, workflow) {
        Err(RunError::NoTemplate { job_id, data_dir })
            if emitter.sink().job_items(&job_id).next().is_none() =>
        {
            return Err(RunError::JobNotFound { job_id, data_dir });
        }
        other => other?,
    };
    let mut report = RetryReport {
        job_id: job_id.to_owned(),
        dry_run: options.dry_run,
        ..RetryReport::default()
    };
    let selected = select(emitter.sink(), job_id, &options, &mut report)?;
    report.selected = selected.len() as u64;
    if options.dry_run {
        report.items = selected.into_iter().take(DRY_RUN_LISTED).collect();
        return Ok(report);
    }
    let ctx = Arc::new(JobContext {
        emitter,
        store,
        record,
        options: run,
        cancel: kill,
        map_vars: Default::default(),
    });
    let mut progress = Progress::new(mode, selected.len() as u64);
    let mut ticker = options.rate.filter(|r| *r > 0.0).map(|rate| {
        let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker
    });
    let by = Arc::new(by);
    let mut running = JoinSet::new();
    let mut pending = selected.into_iter();
    let parallel = options.parallel.max(1);
    loop {
        while running.len() < parallel && !stop.is_cancelled() {
            let Some(item_id) = pending.next() else { break };
            if let Some(ticker) = ticker.as_mut() {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = stop.cancelled() => { report.not_started += 1; break; }
                }
            }
            running.spawn(retry_item(
                ctx.clone(),
                item_id.clone(),
                options.max_retries,
                stop.clone(),
                by.clone(),
            ));
            progress.in_flight(running.len());
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let Ok((item_id, end)) = joined else {
            report.not_recorded += 1;
            continue;
        };
        let (line, failed) = match end {
            ItemEnd::Resolved => {
                report.resolved += 1;
                (format!("{item_id} resolved"), false)
            }
            ItemEnd::FailedAgain => {
                report.failed_again += 1;
                (format!("{item_id} failed again"), true)
            }
            ItemEnd::Busy => {
                report.skipped_busy += 1;
                (
                    format!("{item_id} skipped: another retry is running it"),
                    false,
                )
            }
            ItemEnd::Gone => (format!("{item_id} no longer in the DLQ"), false),
            ItemEnd::NotRecorded => {
                report.not_recorded += 1;
                (
                    format!("{item_id}: result NOT recorded, item unchanged"),
                    true,
                )
            }
            ItemEnd::Interrupted => {
                report.not_started += 1;
                (format!("{item_id} interrupted, unchanged"), false)
            }
        };
        progress.finished(failed, running.len(), &line);
    }
    report.not_started += pending.count() as u64;
    progress.finish();
    Ok(report)
}

/// The job's record and store; with `workflow`, its template replaces the saved one (and a
/// job unknown here gets a record with no items of its own).
fn open_job(
    data_dir: &Path,
    job_id: &str,
    workflow_file: Option<&Path>,
) -> Result<(JobStore, JobRecord), RunError> {
    let loaded = workflow_file.map(Workflow::load).transpose()?;
    match (JobStore::open(data_dir, job_id), loaded, workflow_file) {
        (Ok((store, mut record)), Some(workflow), _) => {
            record.workflow = workflow;
            Ok((store, record))
        }
        (Ok(found), None, _) => Ok(found),
        (Err(RunError::JobNotFound { .. }), Some(workflow), Some(file)) => {
            let path = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
            let record = JobRecord {
                job_id: job_id.to_owned(),
                base_dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
                workflow_path: path,
                workflow,
                created_at: Utc::now(),
                items: Vec::new(),
            };
            Ok((JobStore::create(data_dir, &record)?, record))
        }
        (Err(RunError::JobNotFound { job_id, data_dir }), _, _) => {
            Err(RunError::NoTemplate { job_id, data_dir })
        }
        (Err(err), _, _) => Err(err),
    }
}

/// The ids of the job's items to retry, counting what is left out.
fn select(
    sink: &LocalSink,
    job_id: &str,
    options: &RetryOptions,
    report: &mut RetryReport,
) -> Result<Vec<String>, RunError> {
    let mut selected = Vec::new();
    for stored in sink.job_items(job_id) {
        let item = std::sync::Arc::unwrap_or_clone(stored?.item);
        if !item.reprocess_eligible && !options.force {
            report.skipped_ineligible += 1;
            continue;
        }
        if let Some(filter) = &options.filter {
            let matched = filter
                .matches_item(&item)
                .map_err(|source| RunError::Filter {
                    item_id: item.item_id.clone(),
                    source,
                })?;
            if !matched {
                report.skipped_filtered += 1;
                continue;
            }
        }
        selected.push(item.item_id);
    }
    Ok(selected)
}
