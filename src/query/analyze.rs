//! `dlq analyze`: failure patterns grouped by `error_signature`, the error-type distribution and
//! the failures per hour.
//!
//! One streaming pass over the items; memory grows with the number of distinct signatures,
//! error types and hours, never with the number of items (each group keeps at most
//! [`SAMPLE_IDS`] sample ids). The temporal distribution counts every recorded failure (each
//! entry of `failure_history`) in the UTC hour it happened; the other figures count items.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{ItemRef, QueryError};
use dlq::domain::model::{DeadLetteredItem, ErrorType};
use dlq::domain::signature::remediation;
use dlq::sink::LocalSink;

/// Sample ids kept per pattern group.
pub const SAMPLE_IDS: usize = 5;

/// Items sharing one `error_signature`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PatternGroup {
    /// The signature.
    pub error_signature: String,
    /// Its readable pattern.
    pub error_pattern: String,
    /// Error type name of the representative failure.
    pub error_type: String,
    /// Items in the group.
    pub count: u64,
    /// Failed attempts of those items (sum of `failure_count`).
    pub failures: u64,
    /// Earliest `first_attempt` in the group.
    pub first_seen: DateTime<Utc>,
    /// Latest `last_attempt` in the group.
    pub last_seen: DateTime<Utc>,
    /// Up to [`SAMPLE_IDS`] items of the group, in scan order.
    pub sample_ids: Vec<ItemRef>,
    /// The most recent failure message of the group's most recently failed item.
    pub representative_message: String,
    /// What to do about it ([`dlq::domain::signature::remediation`]).
    pub remediation: String,
}

/// Items of one error type.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypeCount {
    /// Error type name.
    pub error_type: String,
    /// Items.
    pub count: u64,
    /// Share of all items, in percent (one decimal).
    pub percent: f64,
}

/// Failures in one hour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HourCount {
    /// Start of the hour (UTC).
    pub hour: DateTime<Utc>,
    /// Failures recorded in it.
    pub failures: u64,
}

/// The whole analysis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// The job, when restricted to one.
    pub job_id: Option<String>,
    /// When the analysis was made.
    pub generated_at: DateTime<Utc>,
    /// Items analysed.
    pub total_items: u64,
    /// Failures recorded in their histories.
    pub total_failures: u64,
    /// Groups by signature, largest first (ties: signature order).
    pub pattern_groups: Vec<PatternGroup>,
    /// Items by error type, largest first.
    pub error_distribution: Vec<TypeCount>,
    /// Failures per hour, oldest hour first; hours without failures are left out.
    pub temporal_distribution: Vec<HourCount>,
}

#[derive(Debug)]
struct GroupAcc {
    group: PatternGroup,
    representative_type: Option<ErrorType>,
}

/// Folds items into an [`Analysis`]; pure.
#[derive(Debug, Default)]
pub struct AnalysisAccumulator {
    total_items: u64,
    total_failures: u64,
    groups: HashMap<String, GroupAcc>,
    types: BTreeMap<&'static str, u64>,
    hours: BTreeMap<i64, u64>,
}

impl AnalysisAccumulator {
    /// Counts one item.
    pub fn add(&mut self, item: &DeadLetteredItem) {
        self.total_items += 1;
        *self.types.entry(item.last_error_type_name()).or_default() += 1;
        for failure in &item.failure_history {
            self.total_failures += 1;
            let hour = failure.timestamp.timestamp().div_euclid(3600);
            *self.hours.entry(hour).or_default() += 1;
        }
        let message = item.last_error_message().to_owned();
        let acc = self
            .groups
            .entry(item.error_signature.clone())
            .or_insert_with(|| GroupAcc {
                group: PatternGroup {
                    error_signature: item.error_signature.clone(),
                    error_pattern: item.error_pattern.clone(),
                    error_type: item.last_error_type_name().to_owned(),
                    count: 0,
                    failures: 0,
                    first_seen: item.first_attempt,
                    last_seen: item.last_attempt,
                    sample_ids: Vec::new(),
                    representative_message: message.clone(),
                    remediation: String::new(),
                },
                representative_type: item.last_error_type().cloned(),
            });
        let group = &mut acc.group;
        group.count += 1;
        group.failures += u64::from(item.failure_count);
        group.first_seen = group.first_seen.min(item.first_attempt);
        if item.last_attempt > group.last_seen {
            group.last_seen = item.last_attempt;
            group.representative_message = message;
            group.error_type = item.last_error_type_name().to_owned();
            if !item.error_pattern.is_empty() {
                group.error_pattern = item.error_pattern.clone();
            }
            acc.representative_type = item.last_error_type().cloned();
        }
        if group.sample_ids.len() < SAMPLE_IDS {
            group.sample_ids.push(ItemRef::of(item));
        }
    }

    /// The analysis of every item added.
    pub fn finish(self, job_id: Option<String>, now: DateTime<Utc>) -> Analysis {
        let mut groups: Vec<PatternGroup> = self
            .groups
            .into_values()
            .map(|acc| {
                let mut group = acc.group;
                let kind = acc.representative_type.unwrap_or(ErrorType::Unknown);
                let text = if group.error_pattern.is_empty() {
                    &group.representative_message
                } else {
                    &group.error_pattern
                };
                group.remediation = remediation(&kind, text).to_owned();
                group
            })
            .collect();
        groups.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.error_signature.cmp(&b.error_signature))
        });
        let total = self.total_items.max(1) as f64;
        let mut types: Vec<TypeCount> = self
            .types
            .into_iter()
            .map(|(name, count)| TypeCount {
                error_type: name.to_owned(),
                count,
                percent: (count as f64 * 1000.0 / total).round() / 10.0,
            })
            .collect();
        types.sort_by_key(|t| std::cmp::Reverse(t.count));
        let hours = self
            .hours
            .into_iter()
            .filter_map(|(hour, failures)| {
                let hour = DateTime::<Utc>::from_timestamp(hour.checked_mul(3600)?, 0)?;
                Some(HourCount { hour, failures })
            })
            .collect();
        Analysis {
            job_id,
            generated_at: now,
            total_items: self.total_items,
            total_failures: self.total_failures,
            pattern_groups: groups,
            error_distribution: types,
            temporal_distribution: hours,
        }
    }
}

/// Analyses the sink's items (of `job_id` only, when given). A named job without items is
/// [`QueryError::JobNotFound`].
pub fn analyze(sink: &LocalSink, job_id: Option<&str>) -> Result<Analysis, QueryError> {
    let mut acc = AnalysisAccumulator::default();
    for stored in sink.scan_items(job_id) {
        acc.add(&stored?.item);
    }
    if let Some(job) = job_id.filter(|_| acc.total_items == 0) {
        return Err(QueryError::JobNotFound(job.to_owned()));
    }
    Ok(acc.finish(job_id.map(str::to_owned), Utc::now()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dlq::domain::model::FailureDetail;

    fn item(id: &str, message: &str, kind: ErrorType, at: &str) -> DeadLetteredItem {
        let at = DateTime::parse_from_rfc3339(at)
            .unwrap()
            .with_timezone(&Utc);
        let failure = FailureDetail {
            attempt_number: 1,
            timestamp: at,
            error_type: kind,
            error_message: message.into(),
            stack_trace: None,
            agent_id: "a".into(),
            step_failed: "s".into(),
            duration_ms: 1,
            json_log_location: None,
        };
        DeadLetteredItem::new("j", id, serde_json::json!({}), vec![failure]).unwrap()
    }

    #[test]
    fn groups_by_signature_with_samples_hours_and_remediation() {
        let mut acc = AnalysisAccumulator::default();
        for i in 0..7 {
            let message = format!("agent timed out after {i}s");
            let base = DateTime::parse_from_rfc3339("2025-01-11T10:00:00Z").unwrap();
            let at = (base + chrono::Duration::minutes(i * 10)).to_rfc3339();
            acc.add(&item(&format!("t{i}"), &message, ErrorType::Timeout, &at));
        }
        let failed = ErrorType::CommandFailed { exit_code: 101 };
        acc.add(&item(
            "c",
            "cargo test failed",
            failed,
            "2025-01-11T12:00:00Z",
        ));
        let analysis = acc.finish(None, Utc::now());
        assert_eq!(analysis.pattern_groups.len(), 2);
        let timeouts = &analysis.pattern_groups[0];
        assert_eq!(timeouts.count, 7);
        assert_eq!(timeouts.sample_ids.len(), SAMPLE_IDS);
        assert_eq!(timeouts.representative_message, "agent timed out after 6s");
        assert!(timeouts.remediation.contains("agent_timeout_secs"));
        assert_eq!(
            timeouts.first_seen.to_rfc3339(),
            "2025-01-11T10:00:00+00:00"
        );
        assert_eq!(analysis.error_distribution[0].error_type, "Timeout");
        assert_eq!(analysis.error_distribution[0].percent, 87.5);
        let hours: Vec<u64> = analysis
            .temporal_distribution
            .iter()
            .map(|h| h.failures)
            .collect();
        assert_eq!(hours, [6, 1, 1]);
    }
}
