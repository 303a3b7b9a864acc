//! Building a complete [`DeadLetteredItem`] from failed attempts: signature, pattern and flags
//! are derived from the most recent failure.

use crate::domain::model::{DeadLetteredItem, FailureDetail, WorktreeArtifacts};
use crate::domain::signature::{manual_review_required, reprocess_eligible, signature};

/// [`DeadLetteredItem::new`] was given no failures: an item that never failed is not
/// dead-lettered. Record at least one [`FailureDetail`] (see [`FailureDetail::builder`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "item {item_id} of job {job_id} has no failures: pass at least one FailureDetail \
     (FailureDetail::builder(message)...build())"
)]
pub struct NoFailures {
    /// The job the item was meant for.
    pub job_id: String,
    /// The item that had no failures.
    pub item_id: String,
}

impl DeadLetteredItem {
    /// A dead-lettered item for `failures` (oldest first, at least one) of one work item, with
    /// its signature, pattern, count and flags derived from them; without worktree artifacts
    /// (add them with [`Self::with_artifacts`]).
    ///
    /// # Errors
    ///
    /// [`NoFailures`] when `failures` is empty.
    pub fn new(
        job_id: &str,
        item_id: &str,
        item_data: serde_json::Value,
        failures: Vec<FailureDetail>,
    ) -> Result<Self, NoFailures> {
        let no_failures = || NoFailures {
            job_id: job_id.to_owned(),
            item_id: item_id.to_owned(),
        };
        let first = failures.first().ok_or_else(no_failures)?;
        let last = failures.last().ok_or_else(no_failures)?;
        let sig = signature(&last.error_type, &last.error_message);
        let count = u32::try_from(failures.len()).unwrap_or(u32::MAX);
        Ok(DeadLetteredItem {
            item_id: item_id.to_owned(),
            job_id: job_id.to_owned(),
            item_data,
            first_attempt: first.timestamp,
            last_attempt: last.timestamp,
            failure_count: count,
            error_signature: sig.hash,
            error_pattern: sig.pattern,
            reprocess_eligible: reprocess_eligible(&last.error_type),
            manual_review_required: manual_review_required(&last.error_type, count),
            worktree_artifacts: None,
            failure_history: failures,
            redrive: None,
        })
    }

    /// The item with the state preserved from its failed agent's worktree, when there is one
    /// (`None` leaves it without).
    #[must_use]
    pub fn with_artifacts(mut self, artifacts: impl Into<Option<WorktreeArtifacts>>) -> Self {
        self.worktree_artifacts = artifacts.into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::model::ErrorType;

    fn failure(message: &str, minute: u32) -> FailureDetail {
        let at = chrono::DateTime::parse_from_rfc3339(&format!("2025-01-11T10:{minute:02}:00Z"));
        FailureDetail::builder(message)
            .exit_code(1)
            .at(at.unwrap().to_utc())
            .build()
    }

    #[test]
    fn no_failures_is_a_typed_error_that_says_what_to_do() {
        let err = DeadLetteredItem::new("job-1", "item-7", serde_json::json!({}), vec![]);
        let err = err.unwrap_err();
        assert_eq!(err.job_id, "job-1");
        assert_eq!(err.item_id, "item-7");
        let text = err.to_string();
        assert!(text.contains("item item-7 of job job-1"), "{text}");
        assert!(text.contains("FailureDetail::builder"), "{text}");
    }

    #[test]
    fn derives_times_count_and_signature_from_the_history() {
        let failures = vec![
            failure("disk went away", 1),
            failure("validation failed", 5),
        ];
        let item = DeadLetteredItem::new("j", "i", serde_json::json!(1), failures).unwrap();
        assert_eq!(item.first_attempt.to_rfc3339(), "2025-01-11T10:01:00+00:00");
        assert_eq!(item.last_attempt.to_rfc3339(), "2025-01-11T10:05:00+00:00");
        assert_eq!(item.failure_count, 2);
        assert_eq!(item.error_pattern, "ValidationFailed::validation failed");
        assert!(!item.reprocess_eligible);
        assert!(item.manual_review_required);
        assert_eq!(item.worktree_artifacts, None);
        assert_eq!(item.last_error_type(), Some(&ErrorType::ValidationFailed));
    }

    #[test]
    fn with_artifacts_sets_and_clears_them() {
        let artifacts = WorktreeArtifacts {
            worktree_path: "/tmp/w".into(),
            branch_name: "agent-1".into(),
            uncommitted_changes: None,
            error_logs: None,
        };
        let item = DeadLetteredItem::new("j", "i", serde_json::json!(1), vec![failure("x", 1)]);
        let item = item.unwrap().with_artifacts(artifacts.clone());
        assert_eq!(item.worktree_artifacts, Some(artifacts));
        assert_eq!(item.with_artifacts(None).worktree_artifacts, None);
    }
}
