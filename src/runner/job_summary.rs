//! A job's summary: outcome counts, failure rate, error types and recurring failure patterns.
//!
//! Pure: the runner feeds every final outcome into a [`Tally`]; [`Tally::summary`] gives the
//! [`JobSummary`] printed at the end of a job, saved with it, exported as Prometheus metrics and
//! offered to the `reduce` phase as `${map.total}`, `${map.successful}`, `${map.failed}`,
//! `${map.skipped}`, `${map.pending}` and `${map.failure_rate}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use dlq::domain::model::ErrorType;
use dlq::domain::signature::{remediation, signature};

/// A signature must recur this often to be reported as a failure pattern: fewer is a one-off,
/// not a pattern.
const PATTERN_MIN_OCCURRENCES: u64 = 3;

/// How many item ids a pattern lists as samples.
const PATTERN_SAMPLES: usize = 5;

/// How an item ended. Every item ends in exactly one of these (pending until it ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Outcome {
    /// The agent succeeded (possibly after retries, or when re-run from the DLQ).
    Succeeded,
    /// Every attempt failed and the item is in the dead-letter queue.
    DeadLettered,
    /// Every attempt failed and the policy skipped the item (or a custom handler took it).
    Skipped,
}

/// A recurring failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailurePattern {
    /// The error signature (16 hex).
    pub signature: String,
    /// Its readable pattern, e.g. `CommandFailed::exit <n> connection refused`.
    pub pattern: String,
    /// Error type name.
    pub error_type: String,
    /// Items that ended with this signature.
    pub count: u64,
    /// What to try.
    pub remediation: String,
    /// A few of the items.
    pub sample_items: Vec<String>,
}

/// The metrics of a job: its outcome counts (`pending` included), failure rate, error types
/// and recurring failure patterns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct JobSummary {
    /// Items in the job.
    pub total: u64,
    /// Items that succeeded.
    pub successful: u64,
    /// Items that failed and were dead-lettered.
    pub failed: u64,
    /// Items that failed and were skipped.
    pub skipped: u64,
    /// Items not run yet (stopped or interrupted job).
    pub pending: u64,
    /// (failed + skipped) / items that ran; 0 when none ran.
    pub failure_rate: f64,
    /// Final failures by error type name.
    pub error_types: BTreeMap<String, u64>,
    /// Signatures seen at least three times, most frequent first.
    pub failure_patterns: Vec<FailurePattern>,
}

impl JobSummary {
    /// The `${map.*}` variables for the reduce phase.
    pub(super) fn map_vars(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("total".to_owned(), self.total.to_string()),
            ("successful".to_owned(), self.successful.to_string()),
            ("failed".to_owned(), self.failed.to_string()),
            ("skipped".to_owned(), self.skipped.to_string()),
            ("pending".to_owned(), self.pending.to_string()),
            (
                "failure_rate".to_owned(),
                format!("{:.4}", self.failure_rate),
            ),
        ])
    }
}

#[derive(Debug, Clone, Default)]
struct PatternTally {
    pattern: String,
    error_type: Option<ErrorType>,
    count: u64,
    samples: Vec<String>,
}

/// Running counts of a job's outcomes. Counting is O(1) per record, so exporting the counts
/// after every item stays cheap for large jobs.
#[derive(Debug, Clone, Default)]
pub(super) struct Tally {
    total: u64,
    outcomes: BTreeMap<String, Outcome>,
    succeeded: u64,
    dead_lettered: u64,
    skipped: u64,
    error_types: BTreeMap<String, u64>,
    patterns: BTreeMap<String, PatternTally>,
}

impl Tally {
    /// A tally for a job of `total` items.
    pub(super) fn new(total: u64) -> Self {
        Tally {
            total,
            ..Tally::default()
        }
    }

    /// Records an item's final outcome; a later record of the same item replaces the earlier
    /// one (a dead-lettered item that succeeds on resume counts once, as succeeded).
    pub(super) fn record(&mut self, item_id: &str, outcome: Outcome) {
        if let Some(previous) = self.outcomes.insert(item_id.to_owned(), outcome) {
            *self.counter(previous) -= 1;
        }
        *self.counter(outcome) += 1;
    }

    fn counter(&mut self, outcome: Outcome) -> &mut u64 {
        match outcome {
            Outcome::Succeeded => &mut self.succeeded,
            Outcome::DeadLettered => &mut self.dead_lettered,
            Outcome::Skipped => &mut self.skipped,
        }
    }

    /// Records the last failure of an item that failed every attempt.
    pub(super) fn record_failure(&mut self, item_id: &str, error_type: &ErrorType, message: &str) {
        *self
            .error_types
            .entry(error_type.name().to_owned())
            .or_default() += 1;
        let sig = signature(error_type, message);
        let entry = self.patterns.entry(sig.hash).or_default();
        entry.pattern = sig.pattern;
        entry.error_type = Some(error_type.clone());
        entry.count += 1;
        if entry.samples.len() < PATTERN_SAMPLES {
            entry.samples.push(item_id.to_owned());
        }
    }

    /// Items with a final failure (dead-lettered or skipped).
    pub(super) fn failures(&self) -> u64 {
        self.count(Outcome::DeadLettered) + self.count(Outcome::Skipped)
    }

    /// Items that ran to an outcome.
    pub(super) fn completed(&self) -> u64 {
        self.outcomes.len() as u64
    }

    /// Items recorded with `outcome`.
    pub(super) fn count(&self, outcome: Outcome) -> u64 {
        match outcome {
            Outcome::Succeeded => self.succeeded,
            Outcome::DeadLettered => self.dead_lettered,
            Outcome::Skipped => self.skipped,
        }
    }

    /// Items without an outcome yet.
    pub(super) fn pending(&self) -> u64 {
        self.total.saturating_sub(self.completed())
    }

    /// The current failure rate: final failures over completed items.
    pub(super) fn failure_rate(&self) -> f64 {
        match self.completed() {
            0 => 0.0,
            done => self.failures() as f64 / done as f64,
        }
    }

    /// The summary at this point.
    pub(super) fn summary(&self) -> JobSummary {
        let mut failure_patterns: Vec<FailurePattern> = self
            .patterns
            .iter()
            .filter(|(_, p)| p.count >= PATTERN_MIN_OCCURRENCES)
            .map(|(hash, p)| {
                let error_type = p.error_type.clone().unwrap_or(ErrorType::Unknown);
                FailurePattern {
                    signature: hash.clone(),
                    pattern: p.pattern.clone(),
                    error_type: error_type.name().to_owned(),
                    count: p.count,
                    remediation: remediation(&error_type, &p.pattern).to_owned(),
                    sample_items: p.samples.clone(),
                }
            })
            .collect();
        failure_patterns.sort_by(|a, b| b.count.cmp(&a.count).then(a.signature.cmp(&b.signature)));
        JobSummary {
            total: self.total,
            successful: self.count(Outcome::Succeeded),
            failed: self.count(Outcome::DeadLettered),
            skipped: self.count(Outcome::Skipped),
            pending: self.pending(),
            failure_rate: self.failure_rate(),
            error_types: self.error_types.clone(),
            failure_patterns,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn counts_rate_and_map_vars() {
        let mut tally = Tally::new(10);
        for i in 0..6 {
            tally.record(&format!("ok-{i}"), Outcome::Succeeded);
        }
        tally.record("bad-1", Outcome::DeadLettered);
        tally.record("bad-2", Outcome::Skipped);
        let summary = tally.summary();
        assert_eq!(
            (
                summary.total,
                summary.successful,
                summary.failed,
                summary.skipped,
                summary.pending
            ),
            (10, 6, 1, 1, 2)
        );
        assert_eq!(summary.failure_rate, 0.25);
        let vars = summary.map_vars();
        assert_eq!(vars["failed"], "1");
        assert_eq!(vars["failure_rate"], "0.2500");
        assert_eq!(vars["pending"], "2");
    }

    #[test]
    fn a_later_outcome_replaces_an_earlier_one() {
        let mut tally = Tally::new(1);
        tally.record("a", Outcome::DeadLettered);
        tally.record("a", Outcome::Succeeded);
        let summary = tally.summary();
        assert_eq!((summary.successful, summary.failed), (1, 0));
    }

    #[test]
    fn patterns_need_three_occurrences_and_carry_remediation() {
        let mut tally = Tally::new(10);
        for i in 0..3 {
            tally.record_failure(&format!("t{i}"), &ErrorType::Timeout, "timed out after 30s");
        }
        tally.record_failure("p1", &ErrorType::PermissionError, "permission denied");
        tally.record_failure("p2", &ErrorType::PermissionError, "permission denied");
        let summary = tally.summary();
        assert_eq!(summary.error_types["Timeout"], 3);
        assert_eq!(summary.error_types["PermissionError"], 2);
        assert_eq!(summary.failure_patterns.len(), 1);
        let pattern = &summary.failure_patterns[0];
        assert_eq!(pattern.count, 3);
        assert_eq!(pattern.error_type, "Timeout");
        assert!(
            pattern.remediation.contains("agent_timeout_secs"),
            "{}",
            pattern.remediation
        );
        assert_eq!(pattern.sample_items, ["t0", "t1", "t2"]);
    }

    #[test]
    fn empty_job_has_zero_rate() {
        assert_eq!(Tally::new(0).summary().failure_rate, 0.0);
    }
}
