//! What a job looks like now, read without opening it for writing (a running job may be
//! appending): its counts with every later outcome applied, for `dlq jobs` and the admin page,
//! and one item's job events.
//!
//! `summary.json` is written by `dlq run` and `dlq resume`; a `dlq retry` that resolves items
//! only appends `succeeded` outcomes. The counts here replay the outcomes over the summary's
//! total, so a resolved item counts as succeeded, not as dead-lettered.

use std::path::Path;

use super::error::RunError;
use super::job_events::JobEvent;
use super::job_store::{jobs_dir, read_events, read_outcomes, validate_job_id, OutcomeRecord};
use super::job_summary::{JobSummary, Outcome, Tally};

/// The job's last summary with its counts brought up to date from its outcomes; `None` when
/// the job has no summary yet.
pub(crate) fn current_summary(
    data_dir: &Path,
    job_id: &str,
) -> Result<Option<JobSummary>, RunError> {
    let outcomes = read_outcomes(data_dir, job_id)?;
    let path = jobs_dir(data_dir).join(job_id).join("summary.json");
    let summary: Option<JobSummary> = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    Ok(summary.map(|summary| recount(summary, &outcomes)))
}

/// `summary` with its counts replaced by the tally of `outcomes` (a later outcome of an item
/// replaces its earlier one); error types and patterns stay those of the last run. Pure.
fn recount(mut summary: JobSummary, outcomes: &[OutcomeRecord]) -> JobSummary {
    let mut tally = Tally::new(summary.total);
    for record in outcomes {
        tally.record(&record.item_id, record.outcome);
    }
    summary.successful = tally.count(Outcome::Succeeded);
    summary.failed = tally.count(Outcome::DeadLettered);
    summary.skipped = tally.count(Outcome::Skipped);
    summary.pending = tally.pending();
    summary.failure_rate = tally.failure_rate();
    summary
}

/// The job events of one item, in order (empty for a job without a job directory, or whose
/// id cannot name one: items emitted through the library).
pub(crate) fn item_events(
    data_dir: &Path,
    job_id: &str,
    item_id: &str,
) -> Result<Vec<JobEvent>, RunError> {
    if validate_job_id(job_id).is_err() {
        // Not a job of the runner (library users name jobs freely): it has no job events.
        return Ok(Vec::new());
    }
    let events = read_events(data_dir, job_id)?;
    Ok(events
        .into_iter()
        .filter(|event| {
            serde_json::to_value(&event.kind)
                .ok()
                .is_some_and(|v| v.get("item_id").and_then(|id| id.as_str()) == Some(item_id))
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn outcome(item: &str, outcome: Outcome) -> OutcomeRecord {
        OutcomeRecord {
            item_id: item.into(),
            outcome,
            attempts: 1,
            at: Utc::now(),
            error_type: None,
            error: None,
        }
    }

    #[test]
    fn a_resolved_retry_moves_items_from_dead_lettered_to_succeeded() {
        let mut run = Tally::new(4);
        run.record("a", Outcome::Succeeded);
        run.record("b", Outcome::DeadLettered);
        run.record("c", Outcome::DeadLettered);
        let summary = run.summary();
        assert_eq!(
            (summary.successful, summary.failed, summary.pending),
            (1, 2, 1)
        );
        let outcomes = [
            outcome("a", Outcome::Succeeded),
            outcome("b", Outcome::DeadLettered),
            outcome("c", Outcome::DeadLettered),
            // the retry resolved b
            outcome("b", Outcome::Succeeded),
        ];
        let now = recount(summary, &outcomes);
        assert_eq!(
            (now.total, now.successful, now.failed, now.pending),
            (4, 2, 1, 1)
        );
        assert!(
            (now.failure_rate - 1.0 / 3.0).abs() < 1e-9,
            "{}",
            now.failure_rate
        );
    }
}
