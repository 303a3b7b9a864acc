//! Pure conversion of an agent's result into the failure record of a dead-lettered item.
//!
//! [`failure_detail`] turns one failed or timed-out attempt into a [`FailureDetail`]. The
//! runner keeps the details of every attempt of an item and builds the dead-lettered item from
//! the whole history with [`DeadLetteredItem::new`](dlq::domain::model::DeadLetteredItem::new), so `failure_count` equals the
//! attempts made. Successful and cancelled agents produce nothing: a cancelled agent did not
//! fail, its item stays pending.

use chrono::{DateTime, Utc};

use super::agent::{AgentResult, AgentStatus};
use dlq::domain::model::FailureDetail;
use dlq::domain::signature::{classify, Outcome};

/// The step name recorded when no step is known (e.g. the agent never started).
const AGENT_STEP: &str = "agent_execution";

/// The agent id used for an item's agent: stable across attempts and resumes.
pub(super) fn agent_id(item_id: &str) -> String {
    format!("agent-{item_id}")
}

/// The failure detail of one attempt, or `None` when the attempt did not fail.
///
/// Timeouts are classified as [`dlq::domain::model::ErrorType::Timeout`] whatever the output said;
/// other failures are classified from their message and exit code by
/// [`dlq::domain::signature::classify`]. The stderr tail becomes the stack trace.
pub(super) fn failure_detail(
    result: &AgentResult,
    attempt: u32,
    now: DateTime<Utc>,
) -> Option<FailureDetail> {
    let (message, timed_out) = match &result.status {
        AgentStatus::Success | AgentStatus::Cancelled => return None,
        AgentStatus::Failed(message) => (message.clone(), false),
        AgentStatus::Timeout => (
            format!("agent timed out after {} ms", result.duration.as_millis()),
            true,
        ),
    };
    let classified_text = match &result.stderr_tail {
        Some(tail) => format!("{message}\n{tail}"),
        None => message.clone(),
    };
    Some(FailureDetail {
        attempt_number: attempt.max(1),
        timestamp: now,
        error_type: classify(&Outcome {
            message: &classified_text,
            exit_code: result.exit_code,
            timed_out,
        }),
        error_message: message,
        stack_trace: result.stderr_tail.clone(),
        agent_id: agent_id(&result.item_id),
        step_failed: result
            .step_failed
            .clone()
            .unwrap_or_else(|| AGENT_STEP.to_owned()),
        duration_ms: u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX),
        json_log_location: result.json_log_location.clone(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::runner::input::WorkItem;
    use dlq::domain::model::{DeadLetteredItem, ErrorType, WorktreeArtifacts};

    /// The dead-lettered item for one attempt of `work_item` in job `job_id`, built as the runner
    /// builds it (from the attempts' failure details), or `None` when the agent succeeded or was
    /// cancelled.
    fn agent_result_to_dlq_item(
        job_id: &str,
        result: &AgentResult,
        work_item: &WorkItem,
        attempt: u32,
        now: DateTime<Utc>,
    ) -> Option<DeadLetteredItem> {
        let detail = failure_detail(result, attempt, now)?;
        DeadLetteredItem::new(job_id, &work_item.id, work_item.data.clone(), vec![detail])
            .map(|item| item.with_artifacts(result.worktree.clone()))
            .ok()
    }

    fn result(status: AgentStatus) -> AgentResult {
        AgentResult {
            item_id: "item-1".into(),
            status,
            exit_code: None,
            stderr_tail: None,
            duration: Duration::from_millis(1500),
            step_failed: Some("shell: cargo test".into()),
            json_log_location: None,
            worktree: None,
        }
    }

    fn work_item() -> WorkItem {
        WorkItem {
            id: "item-1".into(),
            data: json!({"id": "item-1", "file": "src/main.rs"}),
        }
    }

    fn now() -> DateTime<Utc> {
        "2026-01-02T03:04:05Z".parse().unwrap()
    }

    #[test]
    fn success_and_cancellation_give_nothing() {
        for status in [AgentStatus::Success, AgentStatus::Cancelled] {
            assert!(
                agent_result_to_dlq_item("j", &result(status), &work_item(), 1, now()).is_none()
            );
        }
    }

    #[test]
    fn failed_command_gives_a_complete_item() {
        let mut failed = result(AgentStatus::Failed(
            "step \"shell: cargo test\" exited with code 101: test failed".into(),
        ));
        failed.exit_code = Some(101);
        failed.stderr_tail = Some("thread 'main' panicked at src/main.rs:42".into());
        failed.json_log_location = Some("/tmp/session-1.json".into());
        let item = agent_result_to_dlq_item("job-7", &failed, &work_item(), 2, now()).unwrap();
        assert_eq!(item.job_id, "job-7");
        assert_eq!(item.item_id, "item-1");
        assert_eq!(item.item_data, work_item().data);
        assert_eq!(item.failure_count, 1);
        assert_eq!((item.first_attempt, item.last_attempt), (now(), now()));
        assert_eq!(item.error_signature.len(), 16);
        assert!(item.reprocess_eligible);
        let detail = &item.failure_history[0];
        assert_eq!(detail.attempt_number, 2);
        assert_eq!(
            detail.error_type,
            ErrorType::CommandFailed { exit_code: 101 }
        );
        assert_eq!(detail.agent_id, "agent-item-1");
        assert_eq!(detail.step_failed, "shell: cargo test");
        assert_eq!(detail.duration_ms, 1500);
        assert_eq!(
            detail.json_log_location.as_deref(),
            Some("/tmp/session-1.json")
        );
        assert_eq!(
            detail.stack_trace.as_deref(),
            Some("thread 'main' panicked at src/main.rs:42")
        );
    }

    #[test]
    fn timeout_is_classified_as_timeout_and_eligible() {
        let item =
            agent_result_to_dlq_item("j", &result(AgentStatus::Timeout), &work_item(), 1, now())
                .unwrap();
        assert_eq!(item.failure_history[0].error_type, ErrorType::Timeout);
        assert!(item.failure_history[0].error_message.contains("timed out"));
        assert!(item.reprocess_eligible);
        assert!(!item.manual_review_required);
    }

    #[test]
    fn permission_errors_in_stderr_need_review() {
        let mut failed = result(AgentStatus::Failed("step exited with code 1".into()));
        failed.exit_code = Some(1);
        failed.stderr_tail = Some("open /etc/shadow: Permission denied".into());
        let item = agent_result_to_dlq_item("j", &failed, &work_item(), 1, now()).unwrap();
        assert_eq!(
            item.failure_history[0].error_type,
            ErrorType::PermissionError
        );
        assert!(!item.reprocess_eligible);
        assert!(item.manual_review_required);
    }

    #[test]
    fn worktree_artifacts_and_missing_step_are_kept() {
        let mut failed = result(AgentStatus::Failed(
            "worktree: fatal: invalid reference".into(),
        ));
        failed.step_failed = None;
        failed.worktree = Some(WorktreeArtifacts {
            worktree_path: "/tmp/wt".into(),
            branch_name: "dlq/j/item-1".into(),
            uncommitted_changes: Some(" M src/lib.rs".into()),
            error_logs: None,
        });
        let item = agent_result_to_dlq_item("j", &failed, &work_item(), 1, now()).unwrap();
        assert_eq!(item.failure_history[0].step_failed, AGENT_STEP);
        assert_eq!(item.failure_history[0].error_type, ErrorType::WorktreeError);
        assert_eq!(item.worktree_artifacts, failed.worktree);
    }

    #[test]
    fn same_message_same_signature() {
        let a = result(AgentStatus::Failed(
            "exit 1: connection refused to 10.0.0.1".into(),
        ));
        let b = result(AgentStatus::Failed(
            "exit 1: connection refused to 10.0.0.2".into(),
        ));
        let ia = agent_result_to_dlq_item("j", &a, &work_item(), 1, now()).unwrap();
        let ib = agent_result_to_dlq_item("j", &b, &work_item(), 1, now()).unwrap();
        assert_eq!(ia.error_signature, ib.error_signature);
    }
}
