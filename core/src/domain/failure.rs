//! Building a complete [`DeadLetteredItem`] from failed attempts: signature, pattern and flags
//! are derived from the most recent failure.

use crate::domain::model::{DeadLetteredItem, FailureDetail, WorktreeArtifacts};
use crate::domain::signature::{manual_review_required, reprocess_eligible, signature};

/// A dead-lettered item for `failures` (oldest first, at least one) of one work item.
/// Returns `None` when `failures` is empty: an item that never failed is not dead-lettered.
pub fn dead_lettered_item(
    job_id: &str,
    item_id: &str,
    item_data: serde_json::Value,
    failures: Vec<FailureDetail>,
    worktree_artifacts: Option<WorktreeArtifacts>,
) -> Option<DeadLetteredItem> {
    let first = failures.first()?;
    let last = failures.last()?;
    let sig = signature(&last.error_type, &last.error_message);
    let count = u32::try_from(failures.len()).unwrap_or(u32::MAX);
    Some(DeadLetteredItem {
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
        worktree_artifacts,
        failure_history: failures,
    })
}
